"""The BrowserGym action-text parser on what real models write, good and malformed."""

from __future__ import annotations

import pytest

from envharness.envs.browsergym.action_text import (
    ACTION_TOOLS,
    build_browsergym_action_str,
    build_browsergym_action_tool_call,
)

FALLBACK = None  # expected: noop() with a recorded parse problem

# (model output, expected tool name, expected arguments)
CORPUS: list[tuple[str, str | None, dict]] = [
    # --- the plain forms
    ("click('13')", "click", {"bid": "13"}),
    ('click("13")', "click", {"bid": "13"}),
    ("click(13)", "click", {"bid": "13"}),
    ("click( 'a42' )", "click", {"bid": "a42"}),
    ("noop()", "noop", {}),
    ("noop(500)", "noop", {"wait_ms": 500}),
    ("fill('7', 'hello world')", "fill", {"bid": "7", "value": "hello world"}),
    ('fill("7", "it\'s here")', "fill", {"bid": "7", "value": "it's here"}),
    ("fill('7', value='Bob')", "fill", {"bid": "7", "value": "Bob"}),
    (
        "fill(bid='7', text='x, y (z)')",
        "fill",
        {"bid": "7", "value": "x, y (z)"},
    ),  # `text`: fill's older name
    ("fill('7', 'Bob', True)", "fill", {"bid": "7", "value": "Bob", "enable_autocomplete_menu": True}),
    ("click('7', modifiers=['Shift'])", "click", {"bid": "7", "modifiers": ["Shift"]}),
    ("mouse_click(10, 20, 'right')", "mouse_click", {"x": 10, "y": 20, "button": "right"}),
    ("send_keys('Enter')", "send_keys", {"text": "Enter"}),
    ("scroll('down')", "scroll", {"direction": "down"}),
    ('scroll("UP")', "scroll", {"direction": "up"}),
    ("scroll(0, 300)", "scroll", {"direction": "down"}),
    ("scroll(0, -200.5)", "scroll", {"direction": "up"}),
    # --- capitalised names, as small models write them
    ("CLICK('13')", "click", {"bid": "13"}),
    ("Action: Fill('7', 'Bob')", "fill", {"bid": "7", "value": "Bob"}),
    ("I will Fill (the form) first.\nAction: Click(9)", "click", {"bid": "9"}),
    # --- with the "Action:" convention and prose
    ("Action: click('13')", "click", {"bid": "13"}),
    ("action: click('13')", "click", {"bid": "13"}),
    ("Thought: the submit button has bid 13.\nAction: click('13')", "click", {"bid": "13"}),
    ("I will click the OK button, which is click('21').", "click", {"bid": "21"}),
    (
        "To finish I need to press the button: click('5')\nThat should complete the task.",
        "click",
        {"bid": "5"},
    ),
    # A call mentioned while reasoning loses to the one after the Action: marker.
    ("I considered click('3') but it is disabled.\nAction: click('4')", "click", {"bid": "4"}),
    # --- code fences
    ("```python\nclick('13')\n```", "click", {"bid": "13"}),
    ("```\nfill('9', 'abc')\n```", "fill", {"bid": "9", "value": "abc"}),
    ("Here is my action:\n```py\nsend_keys('hi')\n```\nDone.", "send_keys", {"text": "hi"}),
    ("`click('8')`", "click", {"bid": "8"}),
    # --- several candidate calls: the first valid wins
    ("click('1')\nclick('2')", "click", {"bid": "1"}),
    ("click(bid)\nclick('2')", "click", {"bid": "2"}),
    ("fill('3')  # oops\nfill('3', 'ok')", "fill", {"bid": "3", "value": "ok"}),
    ("Action: click(x)\nAction: click('6')", "click", {"bid": "6"}),
    # --- JSON tool-call blobs
    ('{"name": "click", "arguments": {"bid": "13"}}', "click", {"bid": "13"}),
    (
        '<tool_call>\n{"name": "fill", "arguments": {"bid": "4", "text": "Zoe"}}\n</tool_call>',
        "fill",
        {"bid": "4", "value": "Zoe"},
    ),
    ('{"name": "fill", "arguments": {"bid": "4", "value": "Zoe"}}', "fill", {"bid": "4", "value": "Zoe"}),
    ('{"function": {"name": "click", "arguments": "{\\"bid\\": \\"12\\"}"}}', "click", {"bid": "12"}),
    ('{"action": "click", "bid": 17}', "click", {"bid": "17"}),
    ('{"action": "click(\'18\')"}', "click", {"bid": "18"}),
    ('```json\n{"tool": "scroll", "args": {"direction": "down"}}\n```', "scroll", {"direction": "down"}),
    # --- other BrowserGym actions (opt-in tools) still parse to their own name
    ("dblclick('44')", "dblclick", {"bid": "44"}),
    ("select_option('12', 'Red')", "select_option", {"bid": "12", "options": "Red"}),
    ("select_option('12', ['Red', 'Blue'])", "select_option", {"bid": "12", "options": ["Red", "Blue"]}),
    ("press('3', 'Control+a')", "press", {"bid": "3", "key_comb": "Control+a"}),
    ("keyboard_type('abc')", "keyboard_type", {"text": "abc"}),
    ("drag_and_drop('1', '2')", "drag_and_drop", {"from_bid": "1", "to_bid": "2"}),
    ("mouse_click(10, 20.5)", "mouse_click", {"x": 10, "y": 20.5}),
    ("go_back()", "go_back", {}),
    # --- typographic quotes from chat UIs
    ("click(\u201813\u2019)", "click", {"bid": "13"}),
    # --- more of what chat models write around the action
    ("Action: `click('13')`", "click", {"bid": "13"}),
    ("```\nAction: click('13')\n```", "click", {"bid": "13"}),
    ("click('13')<|im_end|>", "click", {"bid": "13"}),
    (
        "<think>I should click('3') first?</think>\nAction: fill('5', 'abc')",
        "fill",
        {"bid": "5", "value": "abc"},
    ),
    ('click("13", button="left")', "click", {"bid": "13", "button": "left"}),
    ("send_keys('Enter').", "send_keys", {"text": "Enter"}),
    ("1. click('13')", "click", {"bid": "13"}),
    ("Action: click('13') # the submit button", "click", {"bid": "13"}),
    ("Action:\nclick('7')", "click", {"bid": "7"}),
    ("Action: click('13')\nObservation: the page changed", "click", {"bid": "13"}),
    ("fill('12', \"O'Brien\")", "fill", {"bid": "12", "value": "O'Brien"}),
    ("fill('3', 42)", "fill", {"bid": "3", "value": "42"}),
    # Python-dict tool calls (single quotes), as small models write them: literals only
    ("{'name': 'click', 'arguments': {'bid': '13'}}", "click", {"bid": "13"}),
    ("I'll do {'action': 'fill', 'bid': '4', 'text': 'Zoe'} now", "fill", {"bid": "4", "value": "Zoe"}),
    # Many calls while reasoning cannot crowd out the declared action.
    ("I think click('1') " * 100 + "Action: fill('2', 'a')", "fill", {"bid": "2", "value": "a"}),
    # --- malformed: nothing usable, falls back to noop with the problem recorded
    ("", FALLBACK, {}),
    ("I don't know what to do.", FALLBACK, {}),
    ("click(", FALLBACK, {}),
    ("click('13'", FALLBACK, {}),
    ("click(bid)", FALLBACK, {}),
    ("click(__import__('os').system('rm -rf /'))", FALLBACK, {}),
    ("click('1', 'left', 'extra', 4)", FALLBACK, {}),
    ("fill('7')", FALLBACK, {}),
    ("scroll('sideways')", FALLBACK, {}),
    ("scroll(-100, 0)", "scroll", {"direction": "left"}),
    ("scroll(0, 0)", FALLBACK, {}),
    ("page.click('13')", FALLBACK, {}),
    # Text inside another call is still just text: the action is extracted, nothing is evaluated.
    ("eval('click(1)')", "click", {"bid": "1"}),
    ('{"name": "open_door", "arguments": {}}', FALLBACK, {}),
    ('{"name": "click", "arguments": {"bid": "1", "force": true}}', FALLBACK, {}),
    ("clicked('13')", FALLBACK, {}),
    ("click(*['1'])", FALLBACK, {}),
    ("Action: noop", FALLBACK, {}),
    ("Action: click[13]", FALLBACK, {}),
    (
        '{"name": "open_door", "arguments": {"action": "click", "bid": 1}}',
        FALLBACK,
        {},
    ),  # nested dicts are not calls
    # hostile or degenerate output: no exception, no action
    ("click({{}})", FALLBACK, {}),
    ("fill('1', {'a'})", FALLBACK, {}),
    ("click(" + "(" * 200 + "1" + ")" * 200 + ")", FALLBACK, {}),
    ("click(" * 3000, FALLBACK, {}),
    ("{" * 4000 + "}" * 4000, FALLBACK, {}),
    ('{"a": ' * 3000, FALLBACK, {}),
]


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 40
    assert sum(1 for _, name, _ in CORPUS if name is FALLBACK) >= 10


@pytest.mark.parametrize("text,name,args", CORPUS, ids=[repr(t[0][:40]) for t in CORPUS])
def test_parse(text: str, name: str | None, args: dict):
    call = build_browsergym_action_tool_call(text)
    if name is FALLBACK:
        assert (call.name, call.args) == ("noop", {})
        assert call.metadata["parse_error"], "the parse problem must be recorded"
        assert call.metadata["raw_text"] == text[:500]
    else:
        assert (call.name, call.args) == (name, args)
        assert "parse_error" not in call.metadata
        assert call.id == f"browsergym-{name}"


def test_parse_error_says_what_was_wrong():
    call = build_browsergym_action_tool_call("Action: click(button_bid)")
    assert "literal" in call.metadata["parse_error"]
    call = build_browsergym_action_tool_call("fill('7')")
    assert "value" in call.metadata["parse_error"]


@pytest.mark.parametrize("text,name,args", [c for c in CORPUS if c[1] is not FALLBACK])
def test_round_trip_through_the_action_string(text: str, name: str, args: dict):
    """The action string we send re-parses to the same call (what the env's ast parser reads)."""
    action = build_browsergym_action_str(name, args)
    again = build_browsergym_action_tool_call(action)
    assert (again.name, again.args) == (name, args)


def test_action_strings_quote_safely():
    assert build_browsergym_action_str("fill", {"bid": "7", "value": "a'b\"c"}) == "fill('7', 'a\\'b\"c')"
    assert (
        build_browsergym_action_str("fill", {"bid": "7", "text": "a'b\"c"}) == "fill('7', 'a\\'b\"c')"
    )  # older name
    assert (
        build_browsergym_action_str("click", {"bid": "7", "modifiers": ["Shift"]})
        == "click('7', modifiers=['Shift'])"
    )
    assert build_browsergym_action_str("noop", {}) == "noop()"
    assert build_browsergym_action_str("scroll", {"direction": "down"}) == "scroll('down')"
    with pytest.raises(KeyError):
        build_browsergym_action_str("exec", {})
    with pytest.raises(ValueError):
        build_browsergym_action_str("click", {})
    with pytest.raises(ValueError):
        build_browsergym_action_str("click", {"bid": "1", "force": True})
    with pytest.raises(ValueError, match="twice"):
        build_browsergym_action_str("fill", {"bid": "1", "value": "a", "text": "b"})
    with pytest.raises(ValueError, match="needs argument 'value'"):
        build_browsergym_action_str("fill", {"bid": "1"})


def test_every_tool_spec_is_an_mcp_tool():
    for tool in ACTION_TOOLS.values():
        spec = tool.spec()
        assert set(spec) == {"name", "description", "inputSchema"}
        assert spec["inputSchema"]["type"] == "object"
