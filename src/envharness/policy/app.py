"""The policy endpoint over HTTP: OpenAI's `/v1/chat/completions`, plus rollout bookkeeping.

Which rollout a call belongs to: the URL (`/rollouts/{id}/v1/chat/completions`, so an agent
only needs `base_url`), an `X-Rollout-Id` header, or the API key (`api_key=<rollout id>`, or
the rollout's own secret key when the endpoint has a token). Auth, size, call and idle limits:
`limits.py`.
The driver opens and ends rollouts (`POST /rollouts`, `POST /rollouts/{id}/end`) and reads
their traces (`GET /rollouts/{id}`, `GET /rollouts/{id}/sample`). Every refusal is an
OpenAI-style error body (`errors.py`); nothing a client sends takes the endpoint down.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from envharness.policy import errors
from envharness.policy.endpoint import PolicyEndpoint
from envharness.policy.limits import bearer, is_token
from envharness.policy.samples import trace_sample, training_trace_entries

log = logging.getLogger(__name__)
ROLLOUT_HEADER = "x-rollout-id"


async def _json_body(request: Request) -> Any:
    return _parse_json(await request.body())


def _parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.invalid(f"the body is not JSON: {exc}", code="invalid_json") from None


def create_policy_app(endpoint: PolicyEndpoint) -> FastAPI:
    """A FastAPI app serving `endpoint` (run it with `core.launchers.LocalServer` or uvicorn)."""
    app = FastAPI(title="envharness policy endpoint", docs_url=None, redoc_url=None)
    app.state.policy = endpoint
    store, limits = endpoint.store, endpoint.limits
    reaped_at = [0.0]

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        """Size first (before a byte is parsed), the driver's token, then idle rollouts reaped."""
        try:
            limits.check_size(request.headers.get("content-length"))
            if request.url.path.startswith("/rollouts") and "/v1/" not in request.url.path:
                limits.check_driver(request.headers.get("authorization"))
        except errors.PolicyError as exc:
            return JSONResponse(exc.body(), status_code=exc.status)
        if limits.rollout_idle_s is not None and time.monotonic() - reaped_at[0] > 1.0:
            reaped_at[0] = time.monotonic()
            for rollout_id in store.reap_idle(limits.rollout_idle_s):
                log.warning("rollout %s ended: no call for %.0f s", rollout_id, limits.rollout_idle_s)
        return await call_next(request)

    def agent_rollout(request: Request, url_rollout: str | None) -> str | None:
        """The rollout an agent's call records into, once its key is checked."""
        key, named = (
            bearer(request.headers.get("authorization")),
            url_rollout or request.headers.get(ROLLOUT_HEADER),
        )
        if limits.token is None:
            return named or key or None  # no token: the key, if any, is the rollout id
        if is_token(key, limits.token):
            return named
        owner = store.rollout_of_key(key) if key else None
        if owner is None:
            raise errors.unauthorized(
                "send the endpoint's token or the api_key POST /rollouts gave this rollout"
            )
        if named is not None and named != owner:
            raise errors.unauthorized("this api_key belongs to another rollout")
        return owner

    @app.exception_handler(errors.PolicyError)
    async def policy_error(_: Request, exc: errors.PolicyError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(_: Request, exc: ClientDisconnect) -> Response:
        """A client that went away before its body arrived: nobody to answer, nothing wrong here
        (not a 500 with two tracebacks in the log)."""
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("policy endpoint error")
        return JSONResponse(errors.backend_failed(exc).body(), status_code=500)

    async def complete(request: Request, rollout_id: str | None) -> dict[str, Any]:
        rollout_id = agent_rollout(request, rollout_id)
        raw = await request.body()
        limits.check_size(None, len(raw))  # a body sent without its length
        return await endpoint.complete(rollout_id, _parse_json(raw))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> dict[str, Any]:
        return await complete(request, None)

    @app.post("/rollouts/{rollout_id}/v1/chat/completions")
    async def rollout_chat_completions(rollout_id: str, request: Request) -> dict[str, Any]:
        return await complete(request, rollout_id)

    def models(request: Request, rollout_id: str | None = None) -> dict[str, Any]:
        if limits.token is not None:
            agent_rollout(request, rollout_id)
        return {
            "object": "list",
            "data": [{"id": endpoint.model_name, "object": "model", "owned_by": "envharness"}],
        }

    app.get("/v1/models")(models)
    app.get("/rollouts/{rollout_id}/v1/models")(models)

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
            trace = store.open(
                rollout_id, secret_key=limits.token is not None, **{str(k): v for k, v in metadata.items()}
            )
        except ValueError as exc:
            code, status = ("rollout_exists", 409) if "in use" in str(exc) else ("invalid_rollout_id", 400)
            raise errors.PolicyError(status, str(exc), code, param="rollout_id") from None
        return {
            "rollout_id": trace.rollout_id,
            "base_url": f"{str(request.base_url).rstrip('/')}/rollouts/{trace.rollout_id}/v1",
            "api_key": trace.api_key,
        }

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
