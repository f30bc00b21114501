"""The model step of an eval episode on a conversation prompt style: exactly train's rollout.

`envharness train --prompt compact` plays each episode as one conversation: the style's
opening messages, then the model's reply and the tool result (the page after the action)
appended turn after turn, the model extending its own exact tokens (`EpisodeModelStep`).
`envharness eval --prompt compact` runs the same session factory and the same model step,
so a checkpoint is evaluated on the messages and token sequence it was trained on; this
wrapper only notes each step on the eval tape for the report.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from envharness.eval.episode import EpisodeTape, StepRecord, _call_text
from envharness.harness.model_step import BatchingModelStep
from envharness.harness.types import Message, ModelStepResult, Tool


class ConversationModelStep:
    """One episode's `EpisodeModelStep` (as in training), recording each step on the tape."""

    def __init__(self, batcher: BatchingModelStep, tape: EpisodeTape):
        self._step = batcher.for_episode()  # batches wait for this episode until close()
        self.tape = tape

    def close(self) -> None:
        self._step.close()

    async def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult:
        self.tape.note_refusal(messages)
        if sampling.get("seed") is None and float(sampling.get("temperature", 0.0) or 0.0) > 0:
            # Reproducible sampling, whatever batch the request lands in (the messages are unchanged).
            sampling = {
                **sampling,
                "seed": zlib.crc32(f"{self.tape.episode_id}/{len(self.tape.steps)}".encode()),
            }
        started = time.perf_counter()
        result = await self._step(messages, tools, sampling)
        call = result.response.tool_calls[0] if result.response.tool_calls else None
        self.tape.steps.append(
            StepRecord(
                index=len(self.tape.steps) + 1,
                prompt=self.tape.conversation_for_record(messages),
                completion=result.response.content or "",
                action=_call_text(call.name, call.args) if call is not None else "",
                parse_error=(
                    call.metadata.get("parse_error") if call is not None else "no action in the reply"
                ),
                screenshot=self.tape.page.screenshot,
                url=self.tape.page.url,
                prompt_tokens=len(result.prompt_ids),
                completion_tokens=len(result.completion_ids),
                model_s=time.perf_counter() - started,
            )
        )
        return result
