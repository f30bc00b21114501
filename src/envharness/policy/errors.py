"""OpenAI-style errors of the policy endpoint: `{"error": {"message", "type", "param", "code"}}`.

An agent's SDK turns these into its own exceptions (`openai.NotFoundError`, ...), so every
refusal says what was wrong in the shape the agent already handles; the endpoint stays up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PolicyError(Exception):
    """A request the endpoint refuses: HTTP `status`, OpenAI `type` and `code`, and the reason."""

    status: int
    message: str
    code: str
    type: str = "invalid_request_error"
    param: str | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def unknown_rollout(rollout_id: str) -> PolicyError:
    return PolicyError(
        404,
        f"unknown rollout id {rollout_id!r}: open one with POST /rollouts first",
        "rollout_not_found",
        param="rollout_id",
    )


def ended_rollout(rollout_id: str, reason: str = "") -> PolicyError:
    why = f" ({reason})" if reason else ""
    return PolicyError(
        409,
        f"rollout {rollout_id!r} has ended{why}; no more model calls are recorded for it",
        "rollout_ended",
        param="rollout_id",
    )


def unauthorized(
    message: str = "a valid bearer token is required (Authorization: Bearer TOKEN)",
) -> PolicyError:
    return PolicyError(401, message, "invalid_api_key", type="authentication_error")


def too_large(size: int, limit: int) -> PolicyError:
    return PolicyError(
        413, f"the request has {size} bytes; this endpoint takes at most {limit}", "request_too_large"
    )


def call_limit(rollout_id: str, limit: int) -> PolicyError:
    return PolicyError(
        400,
        f"rollout {rollout_id!r} made its {limit} model calls, the most one rollout may make; "
        "end it and open another",
        "rollout_call_limit",
        param="rollout_id",
    )


def missing_rollout() -> PolicyError:
    return PolicyError(
        400,
        "no rollout id: call /rollouts/{id}/v1/chat/completions or send an X-Rollout-Id header",
        "rollout_id_missing",
        param="rollout_id",
    )


def context_exceeded(prompt_tokens: int, context: int, completion_tokens: int | None = None) -> PolicyError:
    if completion_tokens is None:
        message = (
            f"this model's maximum context length is {context} tokens, but the prompt has {prompt_tokens}"
        )
    else:
        message = (
            f"this model's maximum context length is {context} tokens, but you requested "
            f"{prompt_tokens + completion_tokens} tokens ({prompt_tokens} in the messages, {completion_tokens} "
            "in the completion); reduce the length of the messages or the completion"
        )
    return PolicyError(
        400,
        message,
        "context_length_exceeded",
        param="messages" if completion_tokens is None else "max_tokens",
    )


def prompt_too_long(tokens: int, limit: int, *, at_least: bool = False, why: str = "") -> PolicyError:
    """A prompt over the endpoint's prompt limit; `at_least`: counted from its length, untokenized."""
    counted = f"at least {tokens} tokens ({why})" if at_least else f"{tokens} tokens"
    return PolicyError(
        400,
        f"the prompt has {counted}; this endpoint takes prompts of at most {limit} tokens "
        "(its --max-prompt-tokens, or the model's context less one); shorten the messages",
        "context_length_exceeded",
        param="messages",
    )


def reply_too_long(requested: int, limit: int) -> PolicyError:
    return PolicyError(
        400,
        f"max_tokens is {requested}, but this endpoint generates at most {limit} tokens per reply "
        "(its --max-tokens-limit)",
        "context_length_exceeded",
        param="max_tokens",
    )


def shutting_down() -> PolicyError:
    return PolicyError(503, "the policy endpoint is shutting down", "shutting_down", type="server_error")


def invalid(message: str, param: str | None = None, code: str = "invalid_request") -> PolicyError:
    return PolicyError(400, message, code, param=param)


def backend_failed(exc: BaseException) -> PolicyError:
    return PolicyError(
        500, f"the model backend failed: {type(exc).__name__}: {exc}", "backend_error", type="server_error"
    )
