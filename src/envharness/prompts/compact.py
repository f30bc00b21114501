"""The compact conversation prompt: what `envharness train` uses by default for small models.

The first message holds the goal and the page's named elements (one line each, bid first),
after one worked example as an earlier turn; about 100 tokens instead of ~270 for the full
accessibility tree, which also makes each GRPO step faster.
"""

from __future__ import annotations

import re
from typing import Any

_ELEMENT = re.compile(r"^\s*\[(\w+)\]\s+(\w+)\s+'(.+)'")
_EXAMPLE = [
    {"role": "user", "content": "Goal: Open the \"next\" link.\nElements:\n[4] link 'next'\n[5] button 'Submit'"},
    {"role": "assistant", "content": "click('4')"},
]


def compact_prompt(observation: Any, task: Any, tool_names: list[str]) -> list[dict[str, Any]]:
    """A short prompt a 135M model can follow: the goal, the named elements of the page (one
    line each, bid first) and one worked example as a previous turn. ~100 tokens instead of
    ~270 for the full accessibility tree, which also makes each GRPO step faster."""
    tree = getattr(observation, "axtree_txt", "") or getattr(observation, "text", "") or ""
    elements = [f"[{m[1]}] {m[2]} '{m[3]}'" for m in map(_ELEMENT.match, tree.splitlines()) if m][:40]
    actions = ", ".join(f"{name}()" if name == "noop" else f"{name}(...)" for name in tool_names)
    system = f"You control a web browser. Reply with exactly one action, e.g. click('<bid>'). Actions: {actions}"
    goal = getattr(observation, "goal", "") or (task if isinstance(task, str) else "")
    page = "\n".join(elements) or "(no named elements)"
    return [{"role": "system", "content": system}, *_EXAMPLE, {"role": "user", "content": f"Goal: {goal}\nElements:\n{page}"}]
