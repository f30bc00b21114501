"""The OpenAI chat-completions wire: the request as pydantic validates it, and the reply.

Only what a policy endpoint can honour is accepted: one choice (`n=1`), no streaming, tools
in OpenAI's function form (a malformed list is refused by name, never half-used). Unknown
fields are ignored as OpenAI's clients send many. Image parts pass through to the backend
unchanged (`models/images.py` reads OpenAI's `image_url` parts).
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from envharness.policy.errors import PolicyError, invalid


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(BaseModel):
    type: Literal["function"]
    function: FunctionSpec


class ChatRequest(BaseModel):
    """`POST /v1/chat/completions`."""

    model_config = ConfigDict(extra="ignore")

    model: str = ""
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = 1
    stream: bool = False
    #: vLLM's token extras (what OpenEnv's capture proxy and other token-faithful clients ask for):
    #: `logprobs` gives `choices[0].logprobs.content` (tokens as `token_id:N`), `return_token_ids`
    #: the prompt's and the completion's ids. Alternatives (`top_logprobs` > 0) are not offered.
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_token_ids: bool = False

    @field_validator("messages")
    @classmethod
    def _roles(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, msg in enumerate(messages):
            if msg.get("role") not in ("system", "developer", "user", "assistant", "tool"):
                raise ValueError(f"messages[{i}].role must be system, developer, user, assistant or tool")
        return messages

    @classmethod
    def parse(cls, body: Any) -> ChatRequest:
        """Validate a decoded body; every problem becomes an OpenAI-style 400 naming the field."""
        if not isinstance(body, dict):
            raise invalid("the request body must be a JSON object")
        try:
            request = cls.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            code = "invalid_tools" if where.startswith("tools") else "invalid_request"
            raise invalid(f"{where}: {first['msg']}", param=where.split(".")[0], code=code) from None
        if request.n != 1:
            raise invalid("only n=1 is supported (one sample per call; a rollout is one conversation)", "n")
        if request.stream:
            raise invalid(
                "streaming is not supported by this endpoint; send stream=false",
                "stream",
                "unsupported_stream",
            )
        if request.top_logprobs:
            raise invalid(
                "top_logprobs > 0 is not supported (the sampled token's own logprob is: logprobs=true)",
                "top_logprobs",
                "unsupported_top_logprobs",
            )
        names = [t.function.name for t in request.tools or []]
        if len(set(names)) != len(names):
            raise invalid(
                f"tools: duplicate function names {sorted({n for n in names if names.count(n) > 1})}",
                "tools",
                "invalid_tools",
            )
        return request

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


def tool_call_json(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def completion_body(
    request: ChatRequest,
    *,
    completion_id: str,
    model: str,
    text: str,
    tool_calls: list[dict[str, Any]],
    finish_reason: str,
    prompt_ids: list[int],
    completion_ids: list[int],
    logprobs: list[float],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The chat.completion object (with vLLM's token extras when asked); `extra` (rollout id,
    turn, fork) rides along under `envharness`."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
        finish_reason = "tool_calls" if finish_reason == "stop" else finish_reason
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": finish_reason,
        "logprobs": None,
    }
    if request.logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                for t, lp in zip(completion_ids, logprobs)
            ]
        }
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(completion_ids),
            "total_tokens": len(prompt_ids) + len(completion_ids),
        },
        "envharness": extra,
    }
    if request.return_token_ids:
        body["prompt_token_ids"] = list(prompt_ids)
        choice["token_ids"] = list(completion_ids)
    return body


__all__ = ["ChatRequest", "PolicyError", "completion_body", "tool_call_json"]
