"""A teacher's replies in a student's tokens: demonstrations with the exact tokens of training.

`TeacherForcedBackend(tokenizer, teacher)` answers each request with the teacher's text (the
environment's scripted policy, or any backend) and reports the tokens the *student* model
would have seen and produced: the prompt rendered and tokenized by the same function every
local backend uses (`chat.prompt_ids`, with the episode's `prefix_ids`, so multi-turn
sequences chain exactly as in GRPO), and the reply tokenized as the student would end it
(its text, then the end-of-turn token). Run through eval's runner with a conversation prompt
style, the episodes' token sequences are what `envharness train` would assemble for those
replies: the SFT data of `envharness sft`.
"""

from __future__ import annotations

from typing import Any

from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest


class TeacherForcedBackend:
    """The teacher's text, the student's tokens. Logprobs are 0.0: nothing was sampled."""

    def __init__(self, tokenizer: Any, teacher: Any, *, name: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.teacher = teacher
        self.name = name or f"teacher:{getattr(teacher, 'name', type(teacher).__name__)}"
        closing = chat.end_of_turn_text(tokenizer)
        #: What ends a reply: the template's end-of-turn marker without the whitespace after it
        #: (the next prompt adds that, as after a sampled reply that stopped at the marker).
        self.end_of_reply = closing.rstrip() if closing.strip() else (tokenizer.eos_token or "")

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        answers = await self.teacher.generate(requests)
        return [self._forced(r, a) for r, a in zip(requests, answers)]

    def _forced(self, request: GenerationRequest, answer: Generation) -> Generation:
        prompt = chat.prompt_ids(self.tokenizer, request.messages, request.tools, request.prefix_ids)
        completion = chat.encode(self.tokenizer, answer.text + self.end_of_reply)
        return Generation(
            text=answer.text,
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=[0.0] * len(completion),
            metadata={**answer.metadata, "teacher": getattr(self.teacher, "name", "teacher")},
        )

    async def aclose(self) -> None:
        await self.teacher.aclose()
