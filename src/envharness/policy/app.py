"""The policy endpoint over HTTP: OpenAI's `/v1/chat/completions`, plus rollout bookkeeping.

Which rollout a call belongs to: the URL (`/rollouts/{id}/v1/chat/completions`, so an agent
only needs `base_url`), an `X-Rollout-Id` header, or the API key (`api_key=<rollout id>`).
The driver opens and ends rollouts (`POST /rollouts`, `POST /rollouts/{id}/end`) and reads
their traces (`GET /rollouts/{id}`, `GET /rollouts/{id}/sample`). Every refusal is an
OpenAI-style error body (`errors.py`); nothing a client sends takes the endpoint down.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envharness.policy import errors
from envharness.policy.endpoint import PolicyEndpoint
from envharness.policy.samples import trace_sample, training_trace_entries

log = logging.getLogger(__name__)
ROLLOUT_HEADER = "x-rollout-id"


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.invalid(f"the body is not JSON: {exc}", code="invalid_json") from None


def _rollout_from_headers(request: Request) -> str | None:
    header = request.headers.get(ROLLOUT_HEADER)
    if header:
        return header
    auth = request.headers.get("authorization", "")
    return auth[7:].strip() or None if auth.lower().startswith("bearer ") else None


def create_policy_app(endpoint: PolicyEndpoint) -> FastAPI:
    """A FastAPI app serving `endpoint` (run it with `core.launchers.LocalServer` or uvicorn)."""
    app = FastAPI(title="envharness policy endpoint", docs_url=None, redoc_url=None)
    app.state.policy = endpoint
    store = endpoint.store

    @app.exception_handler(errors.PolicyError)
    async def policy_error(_: Request, exc: errors.PolicyError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("policy endpoint error")
        return JSONResponse(errors.backend_failed(exc).body(), status_code=500)

    async def complete(request: Request, rollout_id: str | None) -> dict[str, Any]:
        return await endpoint.complete(rollout_id, await _json_body(request))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict[str, Any]:
        return await complete(request, _rollout_from_headers(request))

    @app.post("/rollouts/{rollout_id}/v1/chat/completions")
    async def rollout_chat_completions(rollout_id: str, request: Request) -> dict[str, Any]:
        return await complete(request, rollout_id)

    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": endpoint.model_name, "object": "model", "owned_by": "envharness"}]}

    app.get("/v1/models")(models)
    app.get("/rollouts/{rollout_id}/v1/models")(lambda rollout_id: models())

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": endpoint.model_name, "context_length": endpoint.context_length}

    @app.post("/rollouts")
    async def open_rollout(request: Request) -> dict[str, Any]:
        body = await _json_body(request) if await request.body() else {}
        if not isinstance(body, dict):
            raise errors.invalid("the body must be a JSON object (optional `rollout_id`, `metadata`)")
        metadata, rollout_id = body.get("metadata") or {}, body.get("rollout_id")
        if not isinstance(metadata, dict):
            raise errors.invalid("metadata must be an object", "metadata")
        if rollout_id is not None and not isinstance(rollout_id, str):
            raise errors.invalid("rollout_id must be a string", "rollout_id")
        try:
            trace = store.open(rollout_id, **{str(k): v for k, v in metadata.items()})
        except ValueError as exc:
            code, status = ("rollout_exists", 409) if "in use" in str(exc) else ("invalid_rollout_id", 400)
            raise errors.PolicyError(status, str(exc), code, param="rollout_id") from None
        return {"rollout_id": trace.rollout_id, "base_url": f"{str(request.base_url).rstrip('/')}/rollouts/{trace.rollout_id}/v1"}

    @app.post("/rollouts/{rollout_id}/end")
    async def end_rollout(rollout_id: str) -> dict[str, Any]:
        return store.end(rollout_id).summary()

    @app.get("/rollouts/{rollout_id}")
    async def get_rollout(rollout_id: str) -> dict[str, Any]:
        return store.get(rollout_id).to_dict()

    @app.get("/rollouts/{rollout_id}/sample")
    async def get_sample(rollout_id: str) -> dict[str, Any]:
        sample = trace_sample(store.get(rollout_id))
        return {k: v for k, v in asdict(sample).items() if k != "images"}

    @app.get("/rollouts/{rollout_id}/training_trace")
    async def get_training_trace(rollout_id: str) -> dict[str, Any]:
        return {"schema_version": 1, "entries": training_trace_entries(store.get(rollout_id))}

    return app
