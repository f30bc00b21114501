"""One interface for every model backend: chat messages in, text + exact tokens out.

A backend receives a *batch* of requests (the harness groups the model steps of all
episodes that are waiting at the same moment) and returns one `Generation` per request.
`prompt_ids` are the exact tokens the model saw and `completion_ids`/`logprobs` the exact
tokens it sampled with their log-probabilities under the sampling distribution's
temperature, so that RL trainers never have to re-tokenize anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]


@dataclass
class SamplingParams:
    """How to sample. `max_tokens` bounds one turn; `stop` ends it early (kept in the text)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    #: Set (by another thread) when nobody waits for this reply any more: a backend that
    #: decodes token by token ends the row at its next token, finish_reason "cancelled".
    cancelled: threading.Event | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> SamplingParams:
        """Build from a loose dict (e.g. `HarnessRunLimits.sampling`), ignoring unknown keys."""
        data = dict(data or {})
        if "max_new_tokens" in data and "max_tokens" not in data:
            data["max_tokens"] = data.pop("max_new_tokens")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__ and v is not None}
        return cls(**known)


@dataclass
class GenerationRequest:
    """One model call: the conversation so far and, optionally, the tools it may call.

    `prefix_ids`, when given, are the exact tokens of the conversation up to the end of
    the model's previous turn; a backend that can tokenize must then return `prompt_ids`
    that start with them (it tokenizes only the new messages), which is what keeps
    multi-turn training sequences exact.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    prefix_ids: list[int] | None = None

    @property
    def images(self) -> list[Any]:
        """The images of the conversation (image parts, `models/images.py`), in placeholder order."""
        from envharness.models.images import messages_images

        return messages_images(self.messages)


@dataclass
class Generation:
    """One model turn. Token fields are empty when a backend cannot provide them."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Vision backends: the images this turn's prompt added after `prefix_ids` (all of them
    #: without a prefix), in placeholder order, and how many placeholder tokens
    #: (`image_token_id`) each became in `prompt_ids`, as the image processor counts them.
    #: A trainer rebuilds the pixels of a sequence from these (see integrations/trl/vision.py).
    images: list[Any] = field(default_factory=list)
    image_token_counts: list[int] = field(default_factory=list)
    image_token_id: int | None = None


@runtime_checkable
class ModelBackend(Protocol):
    """What every backend implements. `generate` is async; batches may have any size >= 1."""

    name: str

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]: ...

    async def aclose(self) -> None: ...
