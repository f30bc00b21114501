"""The policy endpoint over HTTP: OpenAI's `/v1/chat/completions`, plus rollout bookkeeping.

Which rollout a call belongs to: the URL (`/rollouts/{id}/v1/chat/completions`, so an agent
only needs `base_url`), an `X-Rollout-Id` header, or the API key (`api_key=<rollout id>`, or
the rollout's own secret key when the endpoint has a token). Host/Origin, the token (by route)
and body size are checked by `core/guards.py` before a route runs; call and idle limits:
`limits.py`. The driver opens and ends rollouts (`POST /rollouts`, `POST /rollouts/{id}/end`)
and reads their traces (`GET /rollouts/{id}`, `GET /rollouts/{id}/sample`). Every refusal is
an OpenAI-style error body (`errors.py`); nothing a client sends takes the endpoint down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect

from envharness.core import wire_json
from envharness.core.concurrency import run_sync
from envharness.core.guards import (
    Access,
    BodyLimit,
    HostOriginGuard,
    Refusal,
    Refusals,
    TokenGuard,
    checked_origins,
)
from envharness.core.wire_json import JSONLimitError
from envharness.policy import errors
from envharness.policy.endpoint import PolicyEndpoint
from envharness.policy.limits import bearer, is_token
from envharness.policy.prompt_size import LARGE_BODY_BYTES, ReleaseAfterLargeBodies
from envharness.policy.samples import trace_sample, training_trace_entries

log = logging.getLogger(__name__)
ROLLOUT_HEADER = "x-rollout-id"
#: Seconds between sweeps for rollouts no call reached in `rollout_idle_s`.
REAP_EVERY_S = 1.0


def _parse_json(raw: bytes) -> Any:
    try:
        return wire_json.loads(raw or b"null")
    except JSONLimitError as exc:
        raise errors.invalid(f"the body's JSON is refused: {exc}", code="invalid_json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.invalid(f"the body is not JSON: {exc}", code="invalid_json") from None


async def _json_body(request: Request) -> Any:
    """The request's JSON; a large body is decoded in a worker thread (the loop keeps serving)."""
    raw = await request.body()
    return await run_sync(_parse_json, raw) if len(raw) > LARGE_BODY_BYTES else _parse_json(raw)


def _endpoint(request: Request) -> PolicyEndpoint:
    return request.app.state.policy


def agent_rollout(request: Request, url_rollout: str | None) -> str | None:
    """The rollout an agent's call records into, once its key is checked."""
    endpoint = _endpoint(request)
    token = endpoint.limits.token
    key = bearer(request.headers.get("authorization"))
    named = url_rollout or request.headers.get(ROLLOUT_HEADER)
    if token is None:
        return named or key or None  # no token: the key, if any, is the rollout id
    if is_token(key, token):
        return named
    owner = endpoint.store.rollout_of_key(key) if key else None
    if owner is None:
        raise errors.unauthorized("send the endpoint's token or the api_key POST /rollouts gave this rollout")
    if named is not None and named != owner:
        raise errors.unauthorized("this api_key belongs to another rollout")
    return owner


async def _until_disconnected(request: Request) -> None:
    """Returns when the client goes away (its body has been read: the next message is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _complete(request: Request, rollout_id: str | None) -> Any:
    """One completion; cancelled (generation stopped, nothing recorded) when the client goes."""
    rollout_id = agent_rollout(request, rollout_id)
    body = await _json_body(request)
    call = asyncio.ensure_future(_endpoint(request).complete(rollout_id, body))
    gone = asyncio.ensure_future(_until_disconnected(request))
    try:
        await asyncio.wait({call, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not call.done():
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
        log.info("a call of rollout %s was cancelled: its client went away", rollout_id)
        return Response(status_code=499)
    return call.result()


async def chat_completions(request: Request) -> Any:
    return await _complete(request, None)


async def rollout_chat_completions(rollout_id: str, request: Request) -> Any:
    return await _complete(request, rollout_id)


async def models(request: Request) -> dict[str, Any]:
    endpoint = _endpoint(request)
    if endpoint.limits.token is not None:
        agent_rollout(request, request.path_params.get("rollout_id"))
    return {
        "object": "list",
        "data": [{"id": endpoint.model_name, "object": "model", "owned_by": "envharness"}],
    }


async def health(request: Request) -> dict[str, Any]:
    """Open to probes: without the token it says only `status` (the model may be a local path)."""
    endpoint = _endpoint(request)
    status = "shutting_down" if endpoint.stopping else "ok"
    if not request.scope.get("state", {}).get("authorized", True):
        return {"status": status}
    return {
        "status": status,
        "model": endpoint.model_name,
        "context_length": endpoint.context_length,
        "max_tokens_limit": endpoint.limits.max_tokens_limit,
        "generating": endpoint.generating,
    }


async def open_rollout(request: Request) -> dict[str, Any]:
    endpoint = _endpoint(request)
    raw = await request.body()
    body = _parse_json(raw) if raw else {}
    if not isinstance(body, dict):
        raise errors.invalid("the body must be a JSON object (optional `rollout_id`, `metadata`)")
    metadata, rollout_id = body.get("metadata") or {}, body.get("rollout_id")
    if not isinstance(metadata, dict):
        raise errors.invalid("metadata must be an object", "metadata")
    if rollout_id is not None and not isinstance(rollout_id, str):
        raise errors.invalid("rollout_id must be a string", "rollout_id")
    try:
        trace = endpoint.store.open(
            rollout_id,
            secret_key=endpoint.limits.token is not None,
            **{str(k): v for k, v in metadata.items()},
        )
    except ValueError as exc:
        code, status = ("rollout_exists", 409) if "in use" in str(exc) else ("invalid_rollout_id", 400)
        raise errors.PolicyError(status, str(exc), code, param="rollout_id") from None
    return {
        "rollout_id": trace.rollout_id,
        "base_url": f"{str(request.base_url).rstrip('/')}/rollouts/{trace.rollout_id}/v1",
        "api_key": trace.api_key,
    }


async def end_rollout(rollout_id: str, request: Request) -> dict[str, Any]:
    return _endpoint(request).store.end(rollout_id).summary()


async def get_rollout(rollout_id: str, request: Request) -> dict[str, Any]:
    return _endpoint(request).store.get(rollout_id).to_dict()


async def get_sample(rollout_id: str, request: Request) -> dict[str, Any]:
    sample = trace_sample(_endpoint(request).store.get(rollout_id))
    return {k: v for k, v in asdict(sample).items() if k != "images"}


async def get_training_trace(rollout_id: str, request: Request) -> dict[str, Any]:
    return {"schema_version": 1, "entries": training_trace_entries(_endpoint(request).store.get(rollout_id))}


#: (method, path, endpoint, who may call it). Agents' routes check their key themselves
#: (`agent_rollout`); every other route, and any path not listed, needs the driver's token.
ROUTES = [
    ("POST", "/v1/chat/completions", chat_completions, Access.ENDPOINT),
    ("POST", "/rollouts/{rollout_id}/v1/chat/completions", rollout_chat_completions, Access.ENDPOINT),
    ("GET", "/v1/models", models, Access.ENDPOINT),
    ("GET", "/rollouts/{rollout_id}/v1/models", models, Access.ENDPOINT),
    ("GET", "/health", health, Access.OPEN),
    ("POST", "/rollouts", open_rollout, Access.TOKEN),
    ("POST", "/rollouts/{rollout_id}/end", end_rollout, Access.TOKEN),
    ("GET", "/rollouts/{rollout_id}", get_rollout, Access.TOKEN),
    ("GET", "/rollouts/{rollout_id}/sample", get_sample, Access.TOKEN),
    ("GET", "/rollouts/{rollout_id}/training_trace", get_training_trace, Access.TOKEN),
]


def _refusal(refusal: Refusal) -> Response:
    code = {"unauthorized": "invalid_api_key", "forbidden": "forbidden", "too_large": "request_too_large"}
    kind = "authentication_error" if refusal.kind == "unauthorized" else "invalid_request_error"
    error = errors.PolicyError(refusal.status, refusal.message, code[refusal.kind], type=kind)
    return JSONResponse(error.body(), status_code=error.status)


async def _policy_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, errors.PolicyError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _client_gone(_: Request, exc: Exception) -> Response:
    """A client that went away before its body arrived: nobody to answer, nothing wrong here
    (not a 500 with two tracebacks in the log)."""
    return Response(status_code=499)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("policy endpoint error")
    return JSONResponse(errors.backend_failed(exc).body(), status_code=500)


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Idle rollouts are ended in the background (their agents went away)."""
    endpoint: PolicyEndpoint = app.state.policy
    reaper = asyncio.ensure_future(_reap_idle(endpoint))
    try:
        yield
    finally:
        reaper.cancel()
        endpoint.stop_generating()


async def _reap_idle(endpoint: PolicyEndpoint) -> None:
    idle_s = endpoint.limits.rollout_idle_s
    while idle_s is not None:
        await asyncio.sleep(REAP_EVERY_S)
        for rollout_id in endpoint.store.reap_idle(idle_s):
            log.warning("rollout %s ended: no call for %.0f s", rollout_id, idle_s)


def create_policy_app(
    endpoint: PolicyEndpoint,
    *,
    allowed_hosts: Iterable[str] = (),
    allowed_origins: Iterable[str] = (),
    allow_null_origin: bool = False,
) -> FastAPI:
    """A FastAPI app serving `endpoint` (run it with `core.launchers.LocalServer` or uvicorn).
    `allowed_hosts` / `allowed_origins` widen who may call it beyond loopback (`core/guards.py`;
    the origin `null` is refused unless `allow_null_origin`)."""
    allowed_origins = checked_origins(allowed_origins, allow_null=allow_null_origin)
    refusals = Refusals(_refusal)
    app = FastAPI(
        title="envharness policy endpoint",
        docs_url=None,
        redoc_url=None,
        openapi_url=None if endpoint.limits.token else "/openapi.json",
        lifespan=_lifespan,
        exception_handlers={
            errors.PolicyError: _policy_error,
            ClientDisconnect: _client_gone,
            Exception: _unexpected,
        },
        middleware=[
            Middleware(ReleaseAfterLargeBodies),
            Middleware(
                HostOriginGuard,
                refusals=refusals,
                allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins,
            ),  # fmt: skip
            Middleware(
                TokenGuard,
                token=endpoint.limits.token,
                routes=lambda: app.routes,
                access={path: access for _, path, _, access in ROUTES},
                refusals=refusals,
            ),  # fmt: skip
            Middleware(BodyLimit, limit=lambda: endpoint.limits.max_request_bytes, refusals=refusals),
        ],
    )
    app.state.policy = endpoint
    app.state.before_shutdown = endpoint.stop_generating
    for method, path, function, _ in ROUTES:
        app.add_api_route(path, function, methods=[method])
    return app
