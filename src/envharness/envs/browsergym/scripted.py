"""The browser's scripted policy as the harness sees it: a conversation -> the next action.

It reads the latest goal and accessibility tree from the conversation (the `Goal: ...` line
and the AXTree block that the BrowserGym harness and the eval prompts write, or a JSON
observation with `goal`/`axtree_txt`) and answers with `solutions.solve(goal, axtree_txt)`,
e.g. `click('13')`. `EnvHarness.scripted_policy` of envs/browsergym is `scripted_action`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from envharness.envs.browsergym.solutions import solve as solve_page
from envharness.harness.types import Message

_GOAL = re.compile(r"^[ \t]*Goal:[ \t]*(.+)$", re.MULTILINE)
# the AXTree block of the harness/eval prompts, or the compact prompt's "Elements:" lines (same `[bid] role 'name'` form)
_TREE_HEADER = re.compile(
    r"^[^\n]*(?:accessibility tree|axtree|elements)[^\n]*:[ \t]*\n", re.IGNORECASE | re.MULTILINE
)
_ROOT = re.compile(r"^[ \t]*(?:\[\w+\][ \t]*)?RootWebArea\b", re.MULTILINE)


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


class NoScriptedMove(ValueError):
    """The conversation has no goal or page the scripted solutions can act on."""


def scripted_action(messages: list[Message], solve: Callable[[str, str], str | None] = solve_page) -> str:
    """The scripted solution's next action for the newest page in `messages`."""
    goal, tree = find_goal_and_tree(messages)
    if not goal or not tree:
        missing = " and ".join(n for n, v in (("goal", goal), ("accessibility tree", tree)) if not v)
        raise NoScriptedMove(f"no {missing} in the conversation")
    action = solve(goal, tree)
    if not action:
        raise NoScriptedMove("no scripted solution for this goal")
    return action
