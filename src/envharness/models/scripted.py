"""A scripted policy as a `ModelBackend`, for benchmarks and smoke runs.

It reads the latest goal and accessibility tree from the conversation it is given (the
`Goal: ...` line and the AXTree block that the BrowserGym harness and the eval prompts
write, or a JSON observation with `goal`/`axtree_txt`) and answers with the action of
`envharness.envs.browsergym.solutions.solve(goal, axtree_txt)`, e.g. `click('13')`.
No tokens: the token fields stay empty.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from envharness.models.base import Generation, GenerationRequest, Message
from envharness.models.images import refuse_images

_GOAL = re.compile(r"^[ \t]*Goal:[ \t]*(.+)$", re.MULTILINE)
# the AXTree block of the harness/eval prompts, or the compact prompt's "Elements:" lines (same `[bid] role 'name'` form)
_TREE_HEADER = re.compile(r"^[^\n]*(?:accessibility tree|axtree|elements)[^\n]*:[ \t]*\n", re.IGNORECASE | re.MULTILINE)
_ROOT = re.compile(r"^[ \t]*(?:\[\w+\][ \t]*)?RootWebArea\b", re.MULTILINE)
FALLBACK_ACTION = "noop()"


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _from_json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return {}
    if isinstance(value, dict):
        value = value.get("observation", value) if isinstance(value.get("observation"), dict) else value
        return value
    return {}


def _tree(text: str) -> str | None:
    """The AXTree block of a message: after its header (or from `RootWebArea`) to a blank line."""
    header = _TREE_HEADER.search(text)
    start = header.end() if header else (m.start() if (m := _ROOT.search(text)) else None)
    if start is None:
        return None
    block = re.split(r"\n[ \t]*\n", text[start:], maxsplit=1)[0]
    return block.strip("\n") or None


def find_goal_and_tree(messages: list[Message]) -> tuple[str | None, str | None]:
    """The newest goal and the newest AXTree in the conversation (either may be missing)."""
    goal = tree = None
    for message in reversed(messages):
        text = _text(message)
        obs = _from_json(text)
        if goal is None:
            goal = obs.get("goal") or (m.group(1).strip() if (m := _GOAL.search(text)) else None)
        if tree is None:
            tree = obs.get("axtree_txt") or _tree(text)
        if goal and tree:
            break
    return goal, tree


class ScriptedBackend:
    """Answers every request with the scripted solution's next action."""

    name = "scripted"

    def __init__(self, solve: Callable[[str, str], str | None] | None = None):
        self._solve = solve

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        for r in requests:
            refuse_images(self.name, r.messages)  # it reads text only: a screenshot would be ignored
        return [self._answer(r.messages) for r in requests]

    def _answer(self, messages: list[Message]) -> Generation:
        goal, tree = find_goal_and_tree(messages)
        if not goal or not tree:
            missing = " and ".join(n for n, v in (("goal", goal), ("accessibility tree", tree)) if not v)
            return Generation(text=FALLBACK_ACTION, metadata={"error": f"no {missing} in the conversation"})
        action = self.solve(goal, tree)
        if not action:
            return Generation(text=FALLBACK_ACTION, metadata={"error": "no scripted solution for this goal"})
        return Generation(text=action)

    @property
    def solve(self) -> Callable[[str, str], str | None]:
        if self._solve is None:
            from envharness.envs.browsergym.solutions import solve

            self._solve = solve
        return self._solve

    async def aclose(self) -> None:
        """Nothing to release."""
