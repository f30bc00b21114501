"""The action grammar: BrowserGym action strings in, allow-listed calls out; nothing executed.
And the one declaration of each action, which the grammar, the executor and the tools share."""

import asyncio
import inspect

import jsonschema
import pytest

from envharness.envs.browsergym.action_set import PARAMS, REQUIRED, ActionSet, Button
from envharness.envs.browsergym.action_text import build_browsergym_action_tool_call
from envharness.envs.browsergym.action_tools import (
    ACTION_TOOLS,
    DEFAULT_TOOL_NAMES,
    action_list,
    build_browsergym_action_str,
)
from envharness.envs.browsergym.actions import (
    ACTION_SIGNATURES,
    MAX_ACTION_CHARS,
    MAX_STRING_CHARS,
    SCROLL_STEP,
    ActionParseError,
    ParsedAction,
    parse_actions,
)
from envharness.envs.browsergym.executor import ACTIONS, PRIMITIVES, STATEFUL_ACTIONS, ActionContext, execute


def one(text: str) -> ParsedAction:
    actions = parse_actions(text)
    assert len(actions) == 1
    return actions[0]


def test_every_action_has_exactly_one_primitive():
    assert set(PRIMITIVES) == set(ACTION_SIGNATURES)


def test_browsergym_action_names_are_all_offered():
    from browsergym.core.action.highlevel import ACTION_SUBSETS

    names = {
        f.__name__
        for subset in ("chat", "infeas", "bid", "coord", "nav", "tab")
        for f in ACTION_SUBSETS[subset]
    }
    assert names - set(ACTION_SIGNATURES) == {"upload_file", "mouse_upload_file"}


def test_parameter_names_match_browsergym():
    from browsergym.core.action import functions

    for name, params in ACTION_SIGNATURES.items():
        expected = list(inspect.signature(getattr(functions, name)).parameters)
        assert [p.name for p in params] == expected, name


@pytest.mark.parametrize(
    "text, expected",
    [
        ("click('12')", ParsedAction("click", {"bid": "12", "button": "left", "modifiers": ()})),
        (
            'click("b22", button="right", modifiers=["Shift"])',
            ParsedAction("click", {"bid": "b22", "button": "right", "modifiers": ("Shift",)}),
        ),
        (
            "fill('45', 'multi-line\\nexample')",
            ParsedAction(
                "fill", {"bid": "45", "value": "multi-line\nexample", "enable_autocomplete_menu": False}
            ),
        ),
        (
            "fill('b534', \"Montre\", True)",
            ParsedAction("fill", {"bid": "b534", "value": "Montre", "enable_autocomplete_menu": True}),
        ),
        (
            "select_option('c48', ['red', 'green'])",
            ParsedAction("select_option", {"bid": "c48", "options": ("red", "green")}),
        ),
        ("scroll(-50.2, -100.5)", ParsedAction("scroll", {"delta_x": -50.2, "delta_y": -100.5})),
        (
            "mouse_click(56, 712.56, 'right')",
            ParsedAction("mouse_click", {"x": 56, "y": 712.56, "button": "right"}),
        ),
        ("noop()", ParsedAction("noop", {"wait_ms": None})),
        ("noop(500)", ParsedAction("noop", {"wait_ms": 500})),
        ("noop(wait_ms=1000)", ParsedAction("noop", {"wait_ms": 1000})),
        ("tab_focus(-1)", ParsedAction("tab_focus", {"index": -1})),
        ("go_back()", ParsedAction("go_back", {})),
        ("keyboard_press('ControlOrMeta+a')", ParsedAction("keyboard_press", {"key": "ControlOrMeta+a"})),
        (
            'send_msg_to_user("the city was built in 1751")',
            ParsedAction("send_msg_to_user", {"text": "the city was built in 1751"}),
        ),
        # aliases of OpenEnv's harness tools
        ("send_keys('Enter')", ParsedAction("keyboard_press", {"key": "Enter"})),
        ("send_keys('Control+a')", ParsedAction("keyboard_press", {"key": "Control+a"})),
        ("send_keys('hello world')", ParsedAction("keyboard_type", {"text": "hello world"})),
        ("send_keys(text='x')", ParsedAction("keyboard_type", {"text": "x"})),
        ("scroll('down')", ParsedAction("scroll", {"delta_x": 0, "delta_y": SCROLL_STEP})),
        ("scroll('up')", ParsedAction("scroll", {"delta_x": 0, "delta_y": -SCROLL_STEP})),
        # surrounding whitespace, code fences, comments
        ("  click('7')  \n", ParsedAction("click", {"bid": "7", "button": "left", "modifiers": ()})),
        (
            "```python\nclick('7')  # the submit button\n```",
            ParsedAction("click", {"bid": "7", "button": "left", "modifiers": ()}),
        ),
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


# -- one declaration per action (executor.py): the grammar, tools, MCP and prompts derive from it --


def _executor_params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in list(inspect.signature(fn).parameters.values())[1:]]


def _declared_params(params) -> list[tuple[str, object]]:
    return [(p.name, inspect.Parameter.empty if p.default is REQUIRED else p.default) for p in params]


def _plain(args: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in args.items()}


def test_each_action_agrees_with_its_executor_grammar_and_tool():
    for name, declared in ACTIONS.actions.items():
        fn = PRIMITIVES[name]
        assert fn is declared.run and fn.__name__ == name
        assert _executor_params(fn) == _declared_params(declared.params), name
        assert ACTION_SIGNATURES[name] == declared.params, name
        assert declared.doc == inspect.getdoc(fn).splitlines()[0]
        if not declared.tool:
            assert name not in ACTION_TOOLS or name in ACTIONS.shorthands, name
            continue
        tool = ACTION_TOOLS[name]
        assert [p for p, _ in tool.params] == [p.name for p in declared.params], name
        assert tool.description == declared.doc
        schema = tool.spec()["inputSchema"]
        assert list(schema["properties"]) == [p.name for p in declared.params] + [
            old for old, _ in declared.aliases
        ]
        aliased = {new for _, new in declared.aliases}
        required = [p.name for p in declared.params if p.default is REQUIRED]
        assert schema.get("required", []) == [p for p in required if p not in aliased], name
    for name, short in ACTIONS.shorthands.items():
        assert ACTION_TOOLS[name].declared == short.params
    assert list(ACTION_TOOLS) == [
        *DEFAULT_TOOL_NAMES,
        *(a.name for a in ACTIONS.tools() if a.name not in DEFAULT_TOOL_NAMES),
    ]


@pytest.mark.parametrize("name", list(ACTION_TOOLS))
def test_every_tool_call_runs_its_executor_with_the_arguments_given(name):
    """Every argument (optional ones too) goes tool call -> action string -> grammar -> executor
    unchanged, and the model-text parser reads the action string back as the same tool call."""
    tool = ACTION_TOOLS[name]
    args = {p.name: PARAMS[p.name].example for p in tool.declared}
    action_str = build_browsergym_action_str(name, args)
    [parsed] = parse_actions(action_str)
    inspect.signature(PRIMITIVES[parsed.name]).bind(None, **parsed.args)  # the executor takes them
    if name in ACTIONS.actions and name not in ACTIONS.shorthands:
        assert _plain(parsed.args) == args
    else:  # a shorthand: rewritten into a primitive
        assert parsed.name in ACTIONS.actions
    again = build_browsergym_action_tool_call(action_str)
    assert (again.name, again.args) == (name, args)


def test_stateful_actions_are_the_ones_that_leave_state_behind():
    assert set(STATEFUL_ACTIONS) == {
        "mouse_down",
        "keyboard_down",
        "drag_and_drop",
        "goto",
        "go_back",
        "go_forward",
        "new_tab",
        "tab_close",
        "tab_focus",
    }


def test_fill_takes_browsergyms_value_and_still_accepts_text():
    from envharness.envs.browsergym.mcp_tools import BrowserGymToolset

    assert [p.name for p in ACTION_SIGNATURES["fill"]] == ["bid", "value", "enable_autocomplete_menu"]
    assert build_browsergym_action_str("fill", {"bid": "7", "text": "Bob"}) == "fill('7', 'Bob')"
    schema = {t.name: t for t in BrowserGymToolset().tools()}["fill"].inputSchema
    for args in ({"bid": "7", "value": "Bob"}, {"bid": "7", "text": "Bob"}):
        jsonschema.validate(args, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"bid": "7", "txt": "Bob"}, schema)
    assert "fill('bid', 'text')" in action_list(["fill"])  # what prompts showed before the rename


@pytest.fixture()
def tap_twice():
    """An action declared at run time, as a plug-in would declare one."""

    async def tap_twice(ctx: ActionContext, bid: str, button: Button = "left") -> None:
        """Tap an element twice."""
        ctx.chat_messages.append({"role": "tap", "message": f"{bid} {button}"})

    ACTIONS.action(tap_twice)
    yield "tap_twice"
    if "tap_twice" in ACTIONS.actions:
        ACTIONS.remove("tap_twice")


def test_an_action_declared_once_shows_up_everywhere(tap_twice):
    from envharness.envs.browsergym.harness import browser_actions
    from envharness.envs.browsergym.mcp_tools import BrowserGymToolset
    from envharness.envs.browsergym.sessions import BrowserGymSessionFactory, action_instructions

    # the grammar and the executor
    [parsed] = parse_actions("tap_twice('4', button='right')")
    assert parsed == ParsedAction("tap_twice", {"bid": "4", "button": "right"})
    ctx = ActionContext(context=None, page=None, guard=None)
    asyncio.run(execute(ctx, [parsed]))
    assert ctx.chat_messages == [{"role": "tap", "message": "4 right"}]
    # tools, action strings, the model-text parser
    assert ACTION_TOOLS["tap_twice"].spec() == {
        "name": "tap_twice",
        "description": "Tap an element twice.",
        "inputSchema": {
            "type": "object",
            "properties": {"bid": {"type": "string"}, "button": {"type": "string"}},
            "required": ["bid"],
        },
    }
    assert build_browsergym_action_str("tap_twice", {"bid": "4"}) == "tap_twice('4')"
    call = build_browsergym_action_tool_call("Thought: twice.\nAction: tap_twice('4')")
    assert (call.name, call.args) == ("tap_twice", {"bid": "4"})
    # MCP, the session factory (whose specs TRL's tool methods are made from), prompts, /web
    assert "tap_twice" in {t.name for t in BrowserGymToolset().tools()}
    assert BrowserGymSessionFactory(lambda: None, extra_tools=["tap_twice"]).tool_names[-1] == "tap_twice"
    assert action_list(["tap_twice"]) == "tap_twice('bid'): Tap an element twice."
    assert "- tap_twice(bid, button=...): Tap an element twice." in action_instructions(["tap_twice"])
    assert {
        "name": "tap_twice",
        "signature": "tap_twice(bid, button?)",
        "description": "Tap an element twice.",
        "example": "tap_twice('12')",
    } in browser_actions()

    ACTIONS.remove("tap_twice")
    with pytest.raises(ActionParseError, match="unknown action 'tap_twice'"):
        parse_actions("tap_twice('4')")
    assert "tap_twice" not in ACTION_TOOLS and "tap_twice" not in PRIMITIVES
    assert build_browsergym_action_tool_call("tap_twice('4')").name == "noop"


async def _undocumented(ctx, bid: str) -> None:
    pass


def _not_async(ctx, bid: str) -> None:
    """Not awaited."""


async def _unknown_parameter(ctx, colour: str) -> None:
    """A parameter no other action has."""


async def _unknown_kind(ctx, bid: dict) -> None:
    """A kind the grammar cannot check."""


async def _starred(ctx, *bid: str) -> None:
    """Arguments without names."""


@pytest.mark.parametrize(
    "fn, problem",
    [
        (_undocumented, "docstring"),
        (_not_async, "async"),
        (_unknown_parameter, "describe parameter 'colour'"),
        (_unknown_kind, "type hint"),
        (_starred, "named one"),
    ],
)
def test_a_declaration_says_what_is_missing(fn, problem):
    with pytest.raises((ValueError, TypeError), match=problem):
        ActionSet().action(fn)


def test_declarations_that_cannot_agree_are_refused():
    actions = ActionSet()

    async def click(ctx, bid: str) -> None:
        """Click."""

    actions.action(click)
    with pytest.raises(ValueError, match="twice"):
        actions.action(click)
    with pytest.raises(ValueError, match="alias"):
        actions.action(aliases={"text": "value"})(click)

    @actions.shorthand(name="click")
    def click_twice(bid: str):
        """Click twice."""

    with pytest.raises(ValueError, match="shorthand of the same name"):
        actions.tools()
