"""Shared pieces of the model-backend tests: the tiny model and honest loopback servers.

The servers are real HTTP servers (uvicorn on 127.0.0.1, a free port, its own thread)
whose answers come from a real model: the tiny random Llama on the SmolLM2 tokenizer,
sampled by `TransformersBackend`. They follow the wire formats the backends talk to:
OpenAI chat completions (with vLLM's token-id extras, or strict like a hosted API),
vLLM's `/v1/completions` as TRL 1.16's `VLLMClient` calls it, and TRL 0.2x's
`/health/` + `/generate/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envharness.models import chat
from envharness.models.base import SamplingParams
from envharness.models.transformers_backend import TransformersBackend

VLLM_EXTRAS = {"return_token_ids", "return_tokens_as_token_ids", "include_stop_str_in_output", "top_k"}


@contextlib.contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run `app` on a free loopback port; yields its base URL and stops it afterwards."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _sampling(body: dict[str, Any]) -> SamplingParams:
    return SamplingParams(
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        top_k=max(int(body.get("top_k") or 0), 0),
        max_tokens=int(body.get("max_tokens") or 16),
        stop=list(body.get("stop") or []),
        seed=body.get("seed"),
    )


def _strip_stop(text: str, stop: str | None, keep: bool) -> str:
    if stop and not keep and text.endswith(stop):
        return text[: -len(stop)]
    return text


class Flaky:
    """Answers the first `failures` requests with HTTP 503, as an overloaded server does."""

    def __init__(self, failures: int = 0):
        self.failures = failures
        self.seen = 0

    def fail_now(self) -> JSONResponse | None:
        self.seen += 1
        if self.seen <= self.failures:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        return None


def chat_completions_app(
    backend: TransformersBackend, *, strict: bool = False, flaky: Flaky | None = None
) -> FastAPI:
    """`/v1/chat/completions`: vLLM-like (token-id extras), or `strict` like a hosted API
    (unknown fields rejected with 400, stop strings removed from the text)."""
    app = FastAPI()
    flaky = flaky or Flaky()
    tok = backend.tokenizer

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "tiny", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> Any:
        if (failure := flaky.fail_now()) is not None:
            return failure
        body = await request.json()
        unknown = VLLM_EXTRAS & set(body) if strict else set()
        if unknown:
            return JSONResponse(
                {"error": {"message": f"Unrecognized request argument supplied: {sorted(unknown)[0]}"}},
                status_code=400,
            )
        prompt = chat.encode(tok, chat.render(tok, body["messages"], body.get("tools")))
        gen = (await asyncio.to_thread(backend.generate_from_ids, [prompt], [_sampling(body)]))[0]
        as_ids = body.get("return_tokens_as_token_ids")
        entries = [
            {"token": f"token_id:{t}" if as_ids else tok.decode([t]), "logprob": lp, "top_logprobs": []}
            for t, lp in zip(gen.completion_ids, gen.logprobs)
        ]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": _strip_stop(
                    gen.text, gen.metadata.get("stop"), bool(body.get("include_stop_str_in_output"))
                ),
            },
            "finish_reason": gen.finish_reason,
            "logprobs": {"content": entries} if body.get("logprobs") else None,
        }
        data: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [choice],
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = gen.completion_ids
            data["prompt_token_ids"] = prompt
        return data

    return app


def trl_server_app(backend: TransformersBackend, *, legacy: bool, flaky: Flaky | None = None) -> FastAPI:
    """TRL's generation server: vLLM's `/health` + `/v1/models` + `/v1/completions` (TRL 1.x),
    or TRL 0.2x's own `/health/` + `/generate/` when `legacy`."""
    app = FastAPI()
    flaky = flaky or Flaky()
    tok = backend.tokenizer

    if legacy:

        @app.get("/health/")
        async def health_legacy() -> dict:
            return {"status": "ok"}

        @app.post("/generate/")
        async def generate(request: Request) -> Any:
            if (failure := flaky.fail_now()) is not None:
                return failure
            body = await request.json()
            params = _sampling({**body, **body.get("generation_kwargs", {})})
            prompts = [chat.encode(tok, p) for p in body["prompts"]]
            gens = await asyncio.to_thread(backend.generate_from_ids, prompts, [params] * len(prompts))
            return {
                "prompt_ids": prompts,
                "completion_ids": [g.completion_ids for g in gens],
                "logprobs": [g.logprobs for g in gens],
            }

        return app

    @app.get("/health")
    async def health() -> dict:
        return {}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "tiny", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        if (failure := flaky.fail_now()) is not None:
            return failure
        body = await request.json()
        prompts = body["prompt"]
        if not (isinstance(prompts, list) and prompts and isinstance(prompts[0], list)):
            return JSONResponse(
                {"error": {"message": "this test server takes token-id prompts only"}}, status_code=400
            )
        gens = await asyncio.to_thread(backend.generate_from_ids, prompts, [_sampling(body)] * len(prompts))
        choices = []
        for i, (prompt, gen) in enumerate(zip(prompts, gens)):
            tokens = [f"token_id:{t}" for t in gen.completion_ids]
            choices.append(
                {
                    "index": i,
                    "text": _strip_stop(
                        gen.text, gen.metadata.get("stop"), bool(body.get("include_stop_str_in_output"))
                    ),
                    "logprobs": {
                        "tokens": tokens,
                        "token_logprobs": gen.logprobs,
                        "top_logprobs": [{}] * len(tokens),
                    },
                    "finish_reason": gen.finish_reason,
                    "stop_reason": gen.metadata.get("stop"),
                    "prompt_token_ids": prompt,
                    "token_ids": gen.completion_ids,
                }
            )
        return {"id": "cmpl-test", "object": "text_completion", "model": body["model"], "choices": choices}

    return app
