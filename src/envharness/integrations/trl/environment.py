"""A browser tab for TRL's `environment_factory`: its public methods are the browser tools.

TRL 1.16 (`GRPOTrainer(environment_factory=...)`) builds instances with a zero-argument
factory, calls `reset(**dataset_row)` before each rollout (the returned text is appended to
the last user message), exposes every other public method as a tool (its type hints and
Google-style docstring become the tool schema, its return value the tool message), and
scores the rollout with `get_reward()`. TRL owns the generation loop there, so the model
must speak its chat template's tool-call format (e.g. Qwen, Hermes); for text actions such
as `click('13')`, use the rollout function in `integrations/trl/rollout.py` instead.

    factory = browsergym_environment_factory(BrowserGymEnv.from_local, task="click-test")
    trainer = GRPOTrainer(model=..., environment_factory=factory, args=GRPOConfig(max_steps=50, ...))
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from envharness.envs.browsergym.action_text import build_browsergym_action_str
from envharness.envs.browsergym.harness import format_observation
from envharness.integrations.trl.rollout import parse_task_prompt


class BrowserGymToolEnv:
    """One browser session (a sync `BrowserGymEnv` client) seen as five tools."""

    def __init__(self, client: Any, *, task: str = "click-test", max_observation_chars: int | None = 6000):
        self._client = client
        self._default_task = task
        self._max_chars = max_observation_chars
        self._reward = 0.0
        self._done = False

    def reset(self, **row: Any) -> str:
        """Start an episode. The dataset row may name `task` and `seed` (or carry them in a
        `task_prompt` JSON prompt); otherwise the factory's task with a fresh seed."""
        task, seed = parse_task_prompt(row.get("prompt"))
        task = row.get("task") or (task if isinstance(task, str) else None) or self._default_task
        seed = row.get("seed", seed)
        result = self._client.reset(task=task, **({"seed": seed} if seed is not None else {}))
        self._reward, self._done = 0.0, bool(result.done)
        return format_observation(result.observation, task=task, max_chars=self._max_chars)

    def click(self, bid: str) -> str:
        """Click an element of the page.

        Args:
            bid: The element's bid, the identifier in square brackets in the accessibility tree.
        """
        return self._act("click", {"bid": bid})

    def fill(self, bid: str, text: str) -> str:
        """Replace the text of an input field.

        Args:
            bid: The input field's bid, the identifier in square brackets in the accessibility tree.
            text: The text to put in the field.
        """
        return self._act("fill", {"bid": bid, "text": text})

    def send_keys(self, text: str) -> str:
        """Type text, or a key such as Enter, into the focused element.

        Args:
            text: The text or key name to send.
        """
        return self._act("send_keys", {"text": text})

    def scroll(self, direction: str) -> str:
        """Scroll the page.

        Args:
            direction: One of 'up', 'down', 'left' or 'right'.
        """
        return self._act("scroll", {"direction": direction})

    def noop(self) -> str:
        """Do nothing and look at the page again."""
        return self._act("noop", {})

    def get_reward(self) -> float:
        """The environment's reward for the episode so far (its last step's reward)."""
        return self._reward

    def _act(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one action; errors go back to the model as text (TRL shows exceptions too)."""
        from envharness.envs.browsergym.models import BrowserGymAction

        if self._done:
            return "The episode is over; no more actions are needed."
        result = self._client.step(BrowserGymAction(action_str=build_browsergym_action_str(name, arguments)))
        self._reward, self._done = float(result.reward or 0.0), bool(result.done)
        text = format_observation(result.observation, max_chars=self._max_chars)
        return f"{text}\n\nReward: {self._reward}  Done: {self._done}"

    def __enter__(self) -> "BrowserGymToolEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def browsergym_environment_factory(client_factory: Callable[[], Any], **options: Any) -> Callable[[], BrowserGymToolEnv]:
    """A zero-argument factory for `environment_factory`: each instance gets its own client
    (e.g. `functools.partial(BrowserGymEnv, base_url=url)` for a running server)."""
    return functools.partial(_make, client_factory, options)


def _make(client_factory: Callable[[], Any], options: dict[str, Any]) -> BrowserGymToolEnv:
    return BrowserGymToolEnv(client_factory(), **options)


__all__ = ["BrowserGymToolEnv", "browsergym_environment_factory"]
