"""Any OpenAI-compatible chat endpoint (`vllm serve`, hosted APIs) as a `ModelBackend`.

Requests of a batch are sent concurrently. Logprobs are asked for; token ids come back
when the server is vLLM (its `return_token_ids` / `return_tokens_as_token_ids` extras).
Servers that reject those extras (or logprobs) answer 400 once; the backend then drops the
feature and remembers. Without vLLM's `include_stop_str_in_output`, stop strings are
applied here (the text is cut after the first stop string, which is kept), so the text is
the same on every server. Structured tool calls from hosted APIs are appended to the text
as `<tool_call>{json}</tool_call>` (what the harness's JSON tool-call parser reads) and kept
raw in `metadata["tool_calls"]`. Image parts of messages (`models/images.py`) travel as
`image_url` parts with base64 data URLs (PNG, or `image_format="JPEG"`); whether the served
model can see them is the server's to say (a text-only model answers with an error).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx

from envharness.models.base import Generation, GenerationRequest
from envharness.models.chat import to_openai_tools
from envharness.models.http import BackendError, RetryPolicy, request_json
from envharness.models.images import openai_messages

_FEATURES = ("vllm_extras", "logprobs")  # dropped in this order when a server rejects them


class OpenAIBackend:
    """`await backend.generate([GenerationRequest])` against `{base_url}/chat/completions`."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 32,
        extra_body: dict[str, Any] | None = None,
        image_format: str = "PNG",
    ):
        if image_format.upper() not in ("PNG", "JPEG"):
            raise ValueError(f"image_format must be 'PNG' or 'JPEG', not {image_format!r}")
        self.image_format = image_format.upper()
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip(
            "/"
        )
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
        )
        self.retry = retry or RetryPolicy()
        self.extra_body = dict(extra_body or {})
        self.features = set(_FEATURES)
        self._semaphore = asyncio.Semaphore(max_concurrency)

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """One chat completion per request, all in flight at once (up to `max_concurrency`)."""
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _one(self, request: GenerationRequest) -> Generation:
        async with self._semaphore:
            while True:
                payload = self._payload(request)
                try:
                    data = await request_json(
                        self._client,
                        "POST",
                        f"{self.base_url}/chat/completions",
                        json=payload,
                        retry=self.retry,
                    )
                except BackendError as exc:
                    dropped = self._drop_rejected_feature(exc)
                    if dropped:
                        continue
                    raise
                return self._generation(request, data)

    def _drop_rejected_feature(self, exc: BackendError) -> bool:
        """After a 400/422, give up the next optional feature; False when none is left."""
        if exc.status not in (400, 422):
            return False
        for feature in _FEATURES:
            if feature in self.features:
                self.features.discard(feature)
                return True
        return False

    def _payload(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": openai_messages(request.messages, self.image_format),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.seed is not None:
            payload["seed"] = s.seed
        tools = to_openai_tools(request.tools)
        if tools:
            payload["tools"] = tools
        if "logprobs" in self.features:
            payload["logprobs"] = True
        if "vllm_extras" in self.features:
            payload.update(
                return_token_ids=True, return_tokens_as_token_ids=True, include_stop_str_in_output=True
            )
            if s.top_k > 0:
                payload["top_k"] = s.top_k
            if s.stop:
                payload["stop"] = s.stop
            if tools:
                payload["tool_choice"] = "none"  # the template shows the tools; calls are parsed from text
        payload.update(self.extra_body)
        return payload

    def _generation(self, request: GenerationRequest, data: dict[str, Any]) -> Generation:
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(f"malformed chat completion: {json.dumps(data)[:300]}") from exc
        text = message.get("content") or ""
        entries = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(e["logprob"]) for e in entries]
        completion_ids = list(choice.get("token_ids") or _ids_from_entries(entries))
        finish_reason = choice.get("finish_reason") or "stop"
        if "vllm_extras" not in self.features and request.sampling.stop:
            text, logprobs, completion_ids, cut = _apply_stop(
                text, request.sampling.stop, entries, logprobs, completion_ids
            )
            finish_reason = "stop" if cut else finish_reason
        metadata: dict[str, Any] = {}
        if message.get("tool_calls"):
            metadata["tool_calls"] = message["tool_calls"]
            text += "".join(_tool_call_text(c) for c in message["tool_calls"])
        if len(logprobs) != len(completion_ids):
            completion_ids = []  # token ids we cannot vouch for are worse than none
        return Generation(
            text=text,
            prompt_ids=list(data.get("prompt_token_ids") or choice.get("prompt_token_ids") or []),
            completion_ids=completion_ids,
            logprobs=logprobs,
            finish_reason="length" if finish_reason == "length" else "stop",
            metadata=metadata,
        )


def _ids_from_entries(entries: list[dict[str, Any]]) -> list[int]:
    """Token ids from vLLM's `token_id:123` logprob tokens (empty when tokens are text)."""
    ids = []
    for entry in entries:
        token = str(entry.get("token", ""))
        if not token.startswith("token_id:"):
            return []
        ids.append(int(token.removeprefix("token_id:")))
    return ids


def _apply_stop(
    text: str, stops: list[str], entries: list[dict[str, Any]], logprobs: list[float], ids: list[int]
):
    """Cut after the earliest stop string; keep only the tokens that cover the kept text."""
    ends = [text.index(s) + len(s) for s in stops if s and s in text]
    if not ends:
        return text, logprobs, ids, False
    end = min(ends)
    kept, covered = 0, 0
    for entry in entries:
        if covered >= end:
            break
        covered += len(entry.get("token", ""))
        kept += 1
    return text[:end], logprobs[:kept], ids[:kept], True


def _tool_call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    args = fn.get("arguments") or "{}"
    try:
        args = json.loads(args) if isinstance(args, str) else args
    except json.JSONDecodeError:
        pass
    return "<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args}) + "</tool_call>"
