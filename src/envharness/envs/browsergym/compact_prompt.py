"""The compact conversation prompt: what `envharness train` uses by default for small models.

The first message holds the goal and the page's elements (one line each, bid first), after
one worked example as an earlier turn; about 100-150 tokens instead of ~270+ for the full
accessibility tree, which also makes each GRPO step faster. Later turns (multi-step tasks)
see the page again in the same compact form (`compact_tool_result`), not the full tree.

Elements are the tree lines that carry a bid and either a name or an interactive role: an
unnamed `textbox ''` is exactly what a form task needs to fill, while an unnamed paragraph
or label is noise. Of the properties after the name, those that say what an action would
change (`checked`, `selected`, `expanded`, `value`, ...) are kept; `focused` is dropped (a
135M model copies it into its action: `click('12', focused)`).
"""

from __future__ import annotations

import re
from typing import Any

from envharness.envs.browsergym.action_tools import action_list

_ELEMENT = re.compile(r"^\s*\[(\w+)\]\s+(\w+)\s+'(.*?)'((?:,.*)?)$")
#: Roles worth showing even without a name: things one can click, type into or pick.
INTERACTIVE_ROLES = frozenset(
    {
        "textbox",
        "searchbox",
        "button",
        "checkbox",
        "radio",
        "combobox",
        "listbox",
        "option",
        "link",
        "spinbutton",
        "slider",
        "switch",
        "tab",
        "menuitem",
        "textarea",
        "gridcell",
    }
)
MAX_ELEMENTS = 40
_DROPPED_PROPERTY = re.compile(r",\s*focused\b")
_EXAMPLE = [
    {
        "role": "user",
        "content": "Goal: Open the \"next\" link.\nElements:\n[4] link 'next'\n[5] button 'Submit'",
    },
    {"role": "assistant", "content": "click('4')"},
]


def compact_elements(tree: str, limit: int = MAX_ELEMENTS) -> list[str]:
    """`[bid] role 'name'<properties>` lines for the named or interactive elements of an AXTree."""
    out = []
    for line in tree.splitlines():
        m = _ELEMENT.match(line)
        if m and (m[3] or m[2] in INTERACTIVE_ROLES):
            out.append(f"[{m[1]}] {m[2]} '{m[3]}'{_DROPPED_PROPERTY.sub('', m[4])}")
    return out[:limit]


def _tree(observation: Any) -> str:
    if isinstance(observation, dict):
        return observation.get("axtree_txt") or observation.get("text") or ""
    return getattr(observation, "axtree_txt", "") or getattr(observation, "text", "") or ""


def compact_prompt(observation: Any, task: Any, tool_names: list[str]) -> list[dict[str, Any]]:
    """A short prompt a 135M model can follow: the actions with their syntax, one worked
    example as a previous turn, then the goal and the page's elements (one line each)."""
    system = (
        "You control a web browser. Reply with exactly one action per turn, e.g. click('<bid>'). Actions:\n"
        + action_list(tuple(tool_names))
    )
    goal = (
        observation.get("goal") if isinstance(observation, dict) else getattr(observation, "goal", "")
    ) or (task if isinstance(task, str) else "")
    page = "\n".join(compact_elements(_tree(observation))) or "(no elements)"
    return [
        {"role": "system", "content": system},
        *_EXAMPLE,
        {"role": "user", "content": f"Goal: {goal}\nElements:\n{page}"},
    ]


def compact_tool_result(observation: Any) -> str:
    """The page after an action, as later turns read it: its elements in the compact form
    (the goal is in the first message; the action's error travels separately)."""
    return "Elements:\n" + ("\n".join(compact_elements(_tree(observation))) or "(no elements)")


#: The worked example of the tool-calling opening: the same page, answered with a tool call.
_TOOL_EXAMPLE = [
    _EXAMPLE[0],
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "click", "arguments": {"bid": "4"}}}],
    },
]


def compact_tool_opening(observation: Any, task: Any, tool_names: list[str]) -> list[dict[str, Any]]:
    """The compact opening for a model that acts through tool calls (TRL's `environment_factory`):
    the same goal and elements, the worked example answered with a `click` tool call."""
    messages = compact_prompt(observation, task, tool_names)
    system = (
        "You control a web browser. Page elements have an id in square brackets, e.g. [13]; "
        "tools take that id as `bid`."
    )
    return [{"role": "system", "content": system}, *_TOOL_EXAMPLE, messages[-1]]
