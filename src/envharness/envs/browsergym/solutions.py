"""Scripted solutions of MiniWoB++ tasks, from what an agent sees: the goal and the AXTree text.

``solve(goal, axtree_txt)`` returns the next BrowserGym action string. It is called once per
step with the current observation, so a task that needs several actions (tick boxes, then
submit) is solved over several steps, reading the page's state (``checked``, ``value``) from
the AXTree. The task is recognised from the goal's wording; ``task=`` (a MiniWoB name) makes
the choice explicit. These are the reference policies of the tests, the benchmark and the
"scripted" model backend. `solve` returns None where it has no action (a goal it does not
know, a page without the element it needs); `next_action` raises `UnsolvableTask` saying why.

Not scripted: tasks whose target has no bid in the AXTree text, e.g. click-link (its links are
``<span>`` elements, which BrowserGym's AXTree shows only as bid-less ``StaticText``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


class UnsolvableTask(ValueError):
    """The goal is not one of the scripted tasks, or the page lacks what the solution needs."""


@dataclass(frozen=True)
class Node:
    """One line of BrowserGym's AXTree text: ``[bid] role 'name', props``."""

    bid: str | None
    role: str
    name: str
    rest: str

    @property
    def focused(self) -> bool:
        return re.search(r"(?:^|, )focused(?:,|$)", self.rest) is not None

    def prop(self, key: str) -> str | None:
        match = re.search(rf"\b{key}=(?:'([^']*)'|(\w+))", self.rest)
        return None if match is None else (match.group(1) if match.group(1) is not None else match.group(2))


_LINE = re.compile(r"^\t*(?:\[(\w+)\] )?(\S+)(?: '((?:[^'\\]|\\.)*)')?(.*)$")


def parse_axtree(axtree_txt: str) -> list[Node]:
    """The AXTree text as a list of nodes, in document order."""
    nodes = []
    for line in axtree_txt.splitlines():
        match = _LINE.match(line)
        if match:
            bid, role, name, rest = match.groups()
            nodes.append(Node(bid, role, name or "", rest))
    return nodes


def _find(nodes: list[Node], role: str | tuple[str, ...], name: str | None = None) -> list[Node]:
    roles = (role,) if isinstance(role, str) else role
    return [n for n in nodes if n.bid and n.role in roles and (name is None or n.name == name)]


def _one(nodes: list[Node], role: str | tuple[str, ...], name: str | None = None) -> Node:
    found = _find(nodes, role, name)
    if not found:
        raise UnsolvableTask(
            f"no {role} {name!r} on the page" if name is not None else f"no {role} on the page"
        )
    return found[0]


def _q(text: str) -> str:
    """A Python string literal for an action argument."""
    return repr(text)


def _fill_then_click(nodes: list[Node], fields: list[tuple[Node, str]], button: Node) -> str:
    """Fill each field whose value differs, one per step; then click the button."""
    for field, text in fields:
        value = field.prop("value") or ""
        if value != text and value != "\u2022" * len(text):  # password fields show bullets
            return f"fill({_q(field.bid)}, {_q(text)})"
    return f"click({_q(button.bid)})"


# -- one function per task: (goal match, nodes) -> action ------------------------------------------
def click_test(m: re.Match, nodes: list[Node]) -> str:
    return f"click({_q(_one(nodes, 'button').bid)})"


def click_named_button(m: re.Match, nodes: list[Node]) -> str:
    return f"click({_q(_one(nodes, 'button', m.group(1)).bid)})"


def click_dialog(m: re.Match, nodes: list[Node]) -> str:
    name = "Close" if m.group(1).lower() == "x" else m.group(1)
    return f"click({_q(_one(nodes, 'button', name).bid)})"


def click_boxes(m: re.Match, nodes: list[Node]) -> str:
    """Tick the listed boxes (radio or checkbox) not yet checked, then submit."""
    wanted = [] if m.group(1) == "nothing" else [w.strip() for w in re.split(r",\s*", m.group(1))]
    for name in wanted:
        box = _one(nodes, ("checkbox", "radio"), name)
        if box.prop("checked") != "true":
            return f"click({_q(box.bid)})"
    return f"click({_q(_one(nodes, 'button', 'Submit').bid)})"


def focus_text(m: re.Match, nodes: list[Node]) -> str:
    boxes = _find(nodes, "textbox")
    index = int(m.group(1)) - 1 if m.re.groups else 0
    if index >= len(boxes):
        raise UnsolvableTask(f"no textbox number {index + 1}")
    return f"click({_q(boxes[index].bid)})"


def enter_text(m: re.Match, nodes: list[Node]) -> str:
    text = m.group(1)
    case = m.group(2) if m.re.groups > 1 else None
    if case == "lower":
        text = text.lower()
    elif case == "upper":
        text = text.upper()
    return _fill_then_click(nodes, [(_one(nodes, "textbox"), text)], _one(nodes, "button", "Submit"))


def enter_password(m: re.Match, nodes: list[Node]) -> str:
    fields = _find(nodes, "textbox")
    if len(fields) != 2:
        raise UnsolvableTask("expected two password fields")
    return _fill_then_click(nodes, [(f, m.group(1)) for f in fields], _one(nodes, "button", "Submit"))


def login_user(m: re.Match, nodes: list[Node]) -> str:
    fields = _find(nodes, "textbox")
    if len(fields) != 2:
        raise UnsolvableTask("expected a username and a password field")
    return _fill_then_click(nodes, list(zip(fields, m.groups())), _one(nodes, "button", "Login"))


def choose_list(m: re.Match, nodes: list[Node]) -> str:
    """With the default tools (no ``select_option``): click the list, which focuses it (its menu
    opens, and closes after the observation, as in BrowserGym), type the option's name (the
    list's type-ahead picks it), then Submit; Enter closes a menu still open."""
    combo = _one(nodes, "combobox")
    if combo.prop("value") != m.group(1):
        return f"send_keys({_q(m.group(1))})" if combo.focused else f"click({_q(combo.bid)})"
    if combo.prop("expanded") == "True":
        return "send_keys('Enter')"
    return f"click({_q(_one(nodes, 'button', 'Submit').bid)})"


def click_tab(m: re.Match, nodes: list[Node]) -> str:
    return f"click({_q(_one(nodes, 'link', 'Tab #' + m.group(1)).bid)})"


def click_button_sequence(m: re.Match, nodes: list[Node]) -> str:
    """ONE, then TWO, one click a step (a reply is one tool call): the clicked button keeps the
    focus, so a focused ONE says it was clicked."""
    one = _one(nodes, "button", "ONE")
    if one.focused:
        return f"click({_q(_one(nodes, 'button', 'TWO').bid)})"
    return f"click({_q(one.bid)})"


_WIDGET_ROLES = {
    "button": "button",
    "checkbox": "checkbox",
    "radio": "radio",
    "text": "textbox",
    "textarea": "textbox",
}


def click_widget(m: re.Match, nodes: list[Node]) -> str:
    """Text inputs and textareas are both ``textbox`` in the AXTree text (BrowserGym drops the
    ``multiline`` property), so those two kinds are solved only when the page has one textbox."""
    kind = m.group(1)
    if kind not in _WIDGET_ROLES:
        raise UnsolvableTask(f"unknown widget kind {kind!r}")
    candidates = _find(nodes, _WIDGET_ROLES[kind])
    if not candidates:
        raise UnsolvableTask(f"no {kind} widget on the page")
    if kind in ("text", "textarea") and len(candidates) > 1:
        raise UnsolvableTask("text inputs and textareas look alike in the AXTree text")
    return f"click({_q(candidates[0].bid)})"


def click_collapsible(m: re.Match, nodes: list[Node]) -> str:
    section = next((n for n in _find(nodes, "tab") if n.name.startswith("Section")), None)
    if section is not None and section.prop("expanded") == "False":
        return f"click({_q(section.bid)})"
    return f"click({_q(_one(nodes, 'button', 'Submit').bid)})"


#: goal pattern -> (MiniWoB task, solution). The first matching pattern wins.
SOLUTIONS: list[tuple[re.Pattern, str, Callable[[re.Match, list[Node]], str]]] = [
    (re.compile(r"^Click the button\.$"), "click-test", click_test),
    (re.compile(r"^Click button (ONE|TWO)\.$"), "click-test-2", click_named_button),
    (re.compile(r'^Click on the "(.*)" button\.$'), "click-button", click_named_button),
    (re.compile(r'^Close the dialog box by clicking the "(x)"\.$'), "click-dialog", click_dialog),
    (re.compile(r'^Click the button in the dialog box labeled "(.*)"\.$'), "click-dialog-2", click_dialog),
    (re.compile(r"^Select (.*) from the list and click Submit\.$"), "choose-list", choose_list),
    (re.compile(r"^Select (.*) and click Submit\.$"), "click-checkboxes", click_boxes),  # also click-option
    (re.compile(r"^Focus into the textbox\.$"), "focus-text", focus_text),
    (re.compile(r"^Focus into the (\d+)(?:st|nd|rd|th) input textbox\.$"), "focus-text-2", focus_text),
    (
        re.compile(r'^Type "(.*)" in all (lower|upper) case letters in the text input and press Submit\.$'),
        "enter-text-2",
        enter_text,
    ),
    (re.compile(r'^Enter "(.*)" into the text field and press Submit\.$'), "enter-text", enter_text),
    (
        re.compile(r'^Enter the password "(.*)" into both text fields and press submit\.$'),
        "enter-password",
        enter_password,
    ),
    (
        re.compile(
            r'^Enter the username "(.*)" and the password "(.*)" into the text fields and press login\.$'
        ),
        "login-user",
        login_user,
    ),
    (re.compile(r"^Click on Tab #(\d+)\.$"), "click-tab", click_tab),
    (
        re.compile(r"^Click button ONE, then click button TWO\.$"),
        "click-button-sequence",
        click_button_sequence,
    ),
    (re.compile(r'^Click on a "(.*)" widget\.$'), "click-widget", click_widget),
    (re.compile(r"^Expand the section below and click submit\.$"), "click-collapsible", click_collapsible),
]

#: Tasks whose goals share a wording with another entry above.
_SAME_WORDING = {"click-option": "click-checkboxes", "enter-text-dynamic": "enter-text"}

#: The MiniWoB tasks `solve` knows.
SOLVED_TASKS: tuple[str, ...] = tuple(sorted({task for _, task, _ in SOLUTIONS} | set(_SAME_WORDING)))


def next_action(goal: str, axtree_txt: str, task: str | None = None) -> str:
    """The next BrowserGym action for `goal`, read off the page's AXTree text.

    `task` (a MiniWoB name, with or without ``miniwob.``) restricts the choice to that task's
    solution; without it the task is recognised from the goal. Raises `UnsolvableTask`.
    """
    if task is not None:
        task = task.removeprefix("browsergym/").removeprefix("miniwob.")
        if task not in SOLVED_TASKS:
            raise UnsolvableTask(f"no scripted solution for task {task!r}; known: {', '.join(SOLVED_TASKS)}")
        task = _SAME_WORDING.get(task, task)
    goal = goal.strip()
    nodes = parse_axtree(axtree_txt)
    for pattern, name, solution in SOLUTIONS:
        if task is not None and name != task:
            continue
        match = pattern.match(goal)
        if match:
            return solution(match, nodes)
    raise UnsolvableTask(f"no scripted solution for the goal {goal[:200]!r}")


def solve(goal: str, axtree_txt: str, task: str | None = None) -> str | None:
    """`next_action`, or None where there is none (what the scripted model backend expects)."""
    try:
        return next_action(goal, axtree_txt, task)
    except UnsolvableTask:
        return None
