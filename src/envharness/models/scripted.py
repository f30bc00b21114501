"""A scripted policy as a `ModelBackend`, for benchmarks, smoke runs and demonstrations.

The policy is the environment's (`EnvHarness.scripted_policy`, e.g. the browser's MiniWoB
solutions or a Wordle solver): the conversation so far -> the next reply's text. When it
has no move (it raises ValueError) the reply is the environment's fallback with the reason
in `Generation.metadata["error"]`. No tokens: the token fields stay empty.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envharness.core.registry import DEFAULT_ENV
from envharness.models.base import Generation, GenerationRequest, Message
from envharness.models.images import refuse_images

#: The reply when the policy has no move (the browser's no-op; other environments' policies
#: return their own fallback instead of raising).
FALLBACK_ACTION = "noop()"
ScriptedPolicy = Callable[[list[Message]], "str | None"]


class ScriptedBackend:
    """Answers every request with the scripted policy's next move."""

    name = "scripted"

    def __init__(
        self,
        policy: ScriptedPolicy | None = None,
        *,
        env: Any = None,
        env_options: dict[str, Any] | None = None,
        fallback: str = FALLBACK_ACTION,
    ):
        self._policy = policy
        self.env = env or DEFAULT_ENV
        self.env_options = dict(env_options or {})  # the server's options (the browser's web tasks)
        self.fallback = fallback

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        for r in requests:
            refuse_images(self.name, r.messages)  # it reads text only: a screenshot would be ignored
        return [self._answer(r.messages) for r in requests]

    def _answer(self, messages: list[Message]) -> Generation:
        try:
            action = self.policy(list(messages))
        except ValueError as exc:
            return Generation(text=self.fallback, metadata={"error": str(exc)})
        if not action:
            return Generation(text=self.fallback, metadata={"error": "the scripted policy has no move"})
        return Generation(text=action)

    @property
    def policy(self) -> ScriptedPolicy:
        if self._policy is None:
            from envharness.core.registry import env_harness

            policy = env_harness(self.env, self.env_options).scripted_policy  # a name, or a run's ResolvedEnv
            if policy is None:
                raise ValueError(
                    f"environment {getattr(self.env, 'name', self.env)!r} has no scripted policy"
                )
            self._policy = policy
        return self._policy

    async def aclose(self) -> None:
        """Nothing to release."""
