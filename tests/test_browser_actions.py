"""The action grammar: BrowserGym action strings in, allow-listed calls out; nothing executed."""

import pytest

from envharness.envs.browsergym.actions import (
    ACTION_SIGNATURES,
    MAX_ACTION_CHARS,
    MAX_STRING_CHARS,
    SCROLL_STEP,
    ActionParseError,
    ParsedAction,
    parse_actions,
)
from envharness.envs.browsergym.executor import PRIMITIVES


def one(text: str) -> ParsedAction:
    actions = parse_actions(text)
    assert len(actions) == 1
    return actions[0]


def test_every_action_has_exactly_one_primitive():
    assert set(PRIMITIVES) == set(ACTION_SIGNATURES)


def test_browsergym_action_names_are_all_offered():
    from browsergym.core.action.highlevel import ACTION_SUBSETS

    names = {f.__name__ for subset in ("chat", "infeas", "bid", "coord", "nav", "tab") for f in ACTION_SUBSETS[subset]}
    assert names - set(ACTION_SIGNATURES) == {"upload_file", "mouse_upload_file"}


def test_parameter_names_match_browsergym():
    import inspect

    from browsergym.core.action import functions

    for name, params in ACTION_SIGNATURES.items():
        expected = list(inspect.signature(getattr(functions, name)).parameters)
        assert [p.name for p in params] == expected, name


@pytest.mark.parametrize(
    "text, expected",
    [
        ("click('12')", ParsedAction("click", {"bid": "12", "button": "left", "modifiers": ()})),
        ('click("b22", button="right", modifiers=["Shift"])',
         ParsedAction("click", {"bid": "b22", "button": "right", "modifiers": ("Shift",)})),
        ("fill('45', 'multi-line\\nexample')",
         ParsedAction("fill", {"bid": "45", "value": "multi-line\nexample", "enable_autocomplete_menu": False})),
        ("fill('b534', \"Montre\", True)",
         ParsedAction("fill", {"bid": "b534", "value": "Montre", "enable_autocomplete_menu": True})),
        ("select_option('c48', ['red', 'green'])", ParsedAction("select_option", {"bid": "c48", "options": ("red", "green")})),
        ("scroll(-50.2, -100.5)", ParsedAction("scroll", {"delta_x": -50.2, "delta_y": -100.5})),
        ("mouse_click(56, 712.56, 'right')", ParsedAction("mouse_click", {"x": 56, "y": 712.56, "button": "right"})),
        ("noop()", ParsedAction("noop", {"wait_ms": None})),
        ("noop(500)", ParsedAction("noop", {"wait_ms": 500})),
        ("noop(wait_ms=1000)", ParsedAction("noop", {"wait_ms": 1000})),
        ("tab_focus(-1)", ParsedAction("tab_focus", {"index": -1})),
        ("go_back()", ParsedAction("go_back", {})),
        ("keyboard_press('ControlOrMeta+a')", ParsedAction("keyboard_press", {"key": "ControlOrMeta+a"})),
        ("send_msg_to_user(\"the city was built in 1751\")", ParsedAction("send_msg_to_user", {"text": "the city was built in 1751"})),
        # aliases of OpenEnv's harness tools
        ("send_keys('Enter')", ParsedAction("keyboard_press", {"key": "Enter"})),
        ("send_keys('Control+a')", ParsedAction("keyboard_press", {"key": "Control+a"})),
        ("send_keys('hello world')", ParsedAction("keyboard_type", {"text": "hello world"})),
        ("send_keys(text='x')", ParsedAction("keyboard_type", {"text": "x"})),
        ("scroll('down')", ParsedAction("scroll", {"delta_x": 0, "delta_y": SCROLL_STEP})),
        ("scroll('up')", ParsedAction("scroll", {"delta_x": 0, "delta_y": -SCROLL_STEP})),
        # surrounding whitespace, code fences, comments
        ("  click('7')  \n", ParsedAction("click", {"bid": "7", "button": "left", "modifiers": ()})),
        ("```python\nclick('7')  # the submit button\n```", ParsedAction("click", {"bid": "7", "button": "left", "modifiers": ()})),
    ],
)
def test_valid_actions(text, expected):
    assert one(text) == expected


def test_multi_action_keeps_order():
    actions = parse_actions("fill('3', 'hi')\n# then\nkeyboard_press('Enter')\nclick('4')")
    assert [a.name for a in actions] == ["fill", "keyboard_press", "click"]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("__import__('os').system('x')", "bare name"),
        ("__import__('os')", "unknown action '__import__'"),
        ("click(__import__('os').system('touch /tmp/x'))", "literals"),
        ("getattr(click, '__globals__')('1')", "bare name; got a function call"),
        ("(lambda: click('1'))()", "bare name; got a lambda"),
        ("click('1').__class__", "single action call"),
        ("click('1')[0]", "single action call"),
        ("click.__call__('1')", "bare name; got attribute access"),
        ("\u0435val('1')", "unknown action"),  # a Cyrillic "e"
        ("click('1' * 10**9)", "an arithmetic expression"),  # refused before anything is computed
        ("select_option('1', ['a'] * 10**9)", "an arithmetic expression"),
        ("click({'bid': '1'})", "a dict"),
        ("click('1', button=None)", "button must be one of"),
        ("click(b'1')", "literals"),
        ("scroll(1j, 0)", "literals"),
        ("fill('1', " + "[" * 50 + "]" * 50 + ")", "expected a string"),
        ("fill('1', " + "[" * 500 + "]" * 500 + ")", "not a valid action call"),
        ("os.system('rm -rf /')", "bare name; got attribute access"),
        ("click(page.url)", "literals"),
        ("click(lambda: 1)", "a lambda"),
        ("click(*['1'])", "a starred argument"),
        ("click('1', **{'button': 'left'})", "keyword unpacking"),
        ("click(bid)", "a variable name"),
        ("click('1' + '2')", "an arithmetic expression"),
        ("click(f'{1}')", "an f-string"),
        ("click(open('/etc/passwd').read())", "literals"),
        ("click([x for x in '1'])", "literals"),
        ("x = click('1')", "single action call"),
        ("import os", "single action call"),
        ("click('1'); exec('x')", "unknown action 'exec'"),
        ("eval('1')", "unknown action 'eval'"),
        ("click()", "missing the required argument 'bid'"),
        ("click('1', 'left', [], 4)", "at most 3 arguments"),
        ("click('1', foo=2)", "unexpected keyword argument 'foo'"),
        ("click('1', bid='2')", "multiple values for argument 'bid'"),
        ("click(12)", "expected a string"),
        ("click('1', button='sideways')", "button must be one of"),
        ("click('1', modifiers=['Hyper'])", "modifiers must be"),
        ("tab_focus(1.5)", "expected an integer"),
        ("noop(True)", "expected a number"),
        ("scroll(float('inf'), 0)", "literals"),
        ("scroll(1e308 * 10, 0)", "arithmetic"),
        ("mouse_click(1e9, 0)", "out of range"),
        ("scroll('sideways')", "one direction"),
        ("upload_file('1', '/etc/passwd')", "server's disk"),
        ("", "empty action"),
        ("   # only a comment", "empty action"),
        ("click('1'", "not a valid action call"),
        ("click('1')\n" * 21, "limit is 20"),
        (f"fill('1', '{'a' * (MAX_STRING_CHARS + 1)}')", "longer than the limit"),
        ("x" * (MAX_ACTION_CHARS + 1), "characters long"),
        ("click(" * 5000 + ")" * 5000, "characters long"),
        ("[" * 3000 + "]" * 3000, "not a valid action call"),
    ],
)
def test_invalid_actions_say_why(text, reason):
    with pytest.raises(ActionParseError) as info:
        parse_actions(text)
    assert reason in str(info.value)


def test_non_string_action_is_refused():
    with pytest.raises(ActionParseError, match="must be a string"):
        parse_actions(b"click('1')")  # type: ignore[arg-type]
