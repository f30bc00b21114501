"""`eval --opponent self|<model>`: the model the client seats in the other seats of a
multi-player game (`harness/seat_player.py`), and the client that lets it play them.

``self`` asks the model under test through the run's own batcher (its requests batch with the
episodes' own); another model spec loads its own backend, closed when the run ends.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator

from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.harness.model_step import BatchingModelStep
from envharness.harness.seat_player import Generate
from envharness.harness.types import Message
from envharness.models.base import GenerationRequest, SamplingParams


@contextlib.asynccontextmanager
async def opponent_generate(
    config: EvalConfig, spec: str, batcher: BatchingModelStep
) -> AsyncIterator[Generate]:
    """An async messages -> reply for the opponent `spec`, sampled as the run samples."""
    sampling = {"temperature": config.temperature, "max_tokens": config.max_new_tokens}
    backend = None
    if spec != "self":
        from envharness.core.lifecycle import in_daemon_thread
        from envharness.models import load_backend

        try:
            backend = await in_daemon_thread(
                functools.partial(load_backend, spec, device=config.device, dtype=config.dtype)
            )
        except (ValueError, RuntimeError, OSError, ImportError) as exc:
            raise EvalSetupError(f"cannot load the opponent {spec!r}: {exc}") from exc
        batcher = BatchingModelStep(backend, max_wait_s=0.05, send_tools=False)

    async def generate(messages: list[Message]) -> str:
        request = GenerationRequest(messages=messages, sampling=SamplingParams.from_dict(sampling))
        return (await batcher.generate(request)).text

    try:
        yield generate
    finally:
        if backend is not None:
            await backend.aclose()


__all__ = ["opponent_generate"]
