"""One declaration per browser action: the registry the grammar, the tools and the prompts read.

An action is declared once, by the function that runs it (``executor.py``)::

    @action
    async def click(ctx: ActionContext, bid: str, button: Button = "left", modifiers: Modifiers = ()) -> None:
        \"\"\"Click the element with this BrowserGym bid.\"\"\"

The name, the parameters (names and order, kinds from the type hints, defaults) and the
docstring's first line are read from the function, as BrowserGym keeps each primitive as one
function in ``core/action/functions.py``. Everything else is derived from this registry
rather than written again: the action grammar's signatures (`actions.py`), the tool specs and
action strings (`action_tools.py`), the MCP tools, the prompts' action lists, `/web`'s list
and, through the tool specs, TRL's tool methods. A *shorthand* (``send_keys(text)``,
``scroll('down')``) is declared the same way, by a function that rewrites its call into a
primitive.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

#: The default of a parameter that has none.
REQUIRED: Any = object()

# Argument kinds beyond the plain str, float (a number), int and bool hints.
Key = Annotated[str, "key"]  # a key name or combination, e.g. 'Control+a'
Button = Annotated[str, "button"]  # 'left', 'middle' or 'right'
Modifiers = Annotated[tuple[str, ...], "modifiers"]  # keys held during a click
Options = Annotated[str | tuple[str, ...], "str_or_list"]  # one option or several
Direction = Annotated[str, "direction"]  # 'up', 'down', 'left' or 'right'

SCROLL_DIRECTIONS = ("up", "down", "left", "right")
_PLAIN_KINDS: dict[Any, str] = {str: "str", float: "number", int: "int", bool: "bool"}

#: Argument kinds and the JSON schema tool specs give each (the grammar checks each kind in
#: `actions.py`). `button` has no enum: a wrong button still reaches the environment and fails
#: in its step, as it did before tools were derived, instead of failing the schema.
KINDS: dict[str, Mapping[str, Any]] = {
    "str": {"type": "string"},
    "key": {"type": "string"},
    "number": {"type": "number"},
    "int": {"type": "integer"},
    "bool": {"type": "boolean"},
    "button": {"type": "string"},
    "modifiers": {"type": "array", "items": {"type": "string"}},
    "str_or_list": {"type": ["string", "array"]},
    "direction": {"type": "string", "enum": list(SCROLL_DIRECTIONS)},
}


@dataclass(frozen=True)
class ParamInfo:
    """What an argument means, an example value (`/web`), and the placeholder prompts show
    for it when that is not its name."""

    description: str
    example: Any
    shown_as: str = ""


#: Every parameter name an action may use, described once for all the actions that share it.
PARAMS: dict[str, ParamInfo] = {
    "bid": ParamInfo("The element's bid, the identifier in square brackets in the accessibility tree.", "12"),
    "from_bid": ParamInfo("The bid of the element to drag.", "12"),
    "to_bid": ParamInfo("The bid of the element to drop it on.", "14"),
    # Prompts showed `fill('bid', 'text')` before fill took BrowserGym's name `value`; they still do.
    "value": ParamInfo("The text to put in the field.", "hello", shown_as="text"),
    "enable_autocomplete_menu": ParamInfo("Type the last character, so that autocomplete menus open.", True),
    "text": ParamInfo("The text to type or send (or a key name such as Enter).", "hello"),
    "reason": ParamInfo("Why the task cannot be done.", "the page has no such button"),
    "wait_ms": ParamInfo("How long to wait, in milliseconds.", 500),
    "button": ParamInfo("The mouse button: 'left', 'middle' or 'right'.", "left"),
    "modifiers": ParamInfo("Keys held down meanwhile, e.g. ['Shift'].", ["Shift"]),
    "options": ParamInfo("The text of the option to select, or a list of them.", "Option 1"),
    "key_comb": ParamInfo("A key or key combination, e.g. 'Control+a'.", "Control+a"),
    "key": ParamInfo("A key or key combination, e.g. 'Enter' or 'Control+a'.", "Enter"),
    "direction": ParamInfo("One of 'up', 'down', 'left' or 'right'.", "down"),
    "delta_x": ParamInfo("Pixels to scroll right (negative: left).", 0),
    "delta_y": ParamInfo("Pixels to scroll down (negative: up).", 200),
    "x": ParamInfo("Horizontal page coordinate, in pixels.", 50),
    "y": ParamInfo("Vertical page coordinate, in pixels.", 80),
    "dx": ParamInfo("Pixels to scroll right (negative: left).", 0),
    "dy": ParamInfo("Pixels to scroll down (negative: up).", 200),
    "from_x": ParamInfo("Horizontal coordinate to drag from.", 50),
    "from_y": ParamInfo("Vertical coordinate to drag from.", 80),
    "to_x": ParamInfo("Horizontal coordinate to drop at.", 150),
    "to_y": ParamInfo("Vertical coordinate to drop at.", 80),
    "url": ParamInfo("The address to open.", "http://miniwob.local/miniwob/click-test.html"),
    "index": ParamInfo("The tab's position (negative: from the end).", 0),
}


@dataclass(frozen=True)
class Param:
    """One parameter of an action: its name, its kind (a key of `KINDS`) and its default."""

    name: str
    kind: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class ParsedAction:
    """One allow-listed call with checked, literal arguments (defaults filled in)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"


@dataclass(frozen=True)
class Action:
    """A declared action (or shorthand): what the grammar, the executor and the tools all read."""

    name: str
    params: tuple[Param, ...]
    doc: str  # the docstring's first line: the tool's description
    run: Callable[..., Any]  # primitives: async (ctx, **args); shorthands: (**args) -> ParsedAction
    tool: bool = True  # offered to models as a tool (tool specs, MCP, prompts); else action strings only
    stateful: bool = False  # leaves state that a restarted episode must not inherit: the next reset reloads
    aliases: tuple[tuple[str, str], ...] = ()  # (older tool argument name, the parameter it stands for)
    shorthand: bool = False


F = TypeVar("F", bound=Callable[..., Any])
V = TypeVar("V")


class ActionSet:
    """The registry: primitives (`action`) and shorthands (`shorthand`), in declaration order.

    `version` changes with every declaration, so tables derived from the set (`Derived`) follow."""

    def __init__(self) -> None:
        self.actions: dict[str, Action] = {}
        self.shorthands: dict[str, Action] = {}
        self.version = 0

    def action(
        self,
        fn: F | None = None,
        *,
        tool: bool = True,
        stateful: bool = False,
        aliases: Mapping[str, str] | None = None,
    ) -> Any:
        """Declare `fn(ctx, ...)`, an async function that runs the action on a page."""

        def register(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"action {fn.__name__}() must be an async function (ctx, ...)")
            self._add(
                self.actions,
                _declare(
                    fn,
                    fn.__name__,
                    skip=1,
                    tool=tool,
                    stateful=stateful,
                    aliases=aliases or {},
                    shorthand=False,
                ),
            )
            return fn

        return register(fn) if fn is not None else register

    def shorthand(self, fn: F | None = None, *, name: str | None = None) -> Any:
        """Declare `fn(...) -> ParsedAction`: a call the grammar rewrites into a primitive."""

        def register(fn: F) -> F:
            self._add(
                self.shorthands,
                _declare(
                    fn, name or fn.__name__, skip=0, tool=True, stateful=False, aliases={}, shorthand=True
                ),
            )
            return fn

        return register(fn) if fn is not None else register

    def remove(self, name: str) -> None:
        """Forget a primitive or shorthand (declarations made at run time, e.g. by tests)."""
        if self.actions.pop(name, None) is None and self.shorthands.pop(name, None) is None:
            raise KeyError(name)
        self.version += 1

    def tools(self) -> list[Action]:
        """What models are offered, in declaration order: a shorthand in place of a primitive it names."""
        offered = [a for a in self.actions.values() if a.tool] + list(self.shorthands.values())
        names = [a.name for a in offered]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise ValueError(
                f"{', '.join(clash)}: a primitive offered as a tool has a shorthand of the same name"
            )
        return offered

    def _add(self, table: dict[str, Action], declared: Action) -> None:
        if declared.name in table:
            raise ValueError(f"{declared.name} is declared twice")
        table[declared.name] = declared
        self.version += 1


def _declare(
    fn: Callable[..., Any],
    name: str,
    *,
    skip: int,
    tool: bool,
    stateful: bool,
    aliases: Mapping[str, str],
    shorthand: bool,
) -> Action:
    """The declaration `fn` makes: its parameters after the first `skip`, their kinds, its docstring."""
    doc = (inspect.getdoc(fn) or "").strip().splitlines()
    if not doc:
        raise ValueError(f"{name}: the docstring is the tool's description; write one line")
    hints = typing.get_type_hints(fn, include_extras=True)
    params = []
    for p in list(inspect.signature(fn).parameters.values())[skip:]:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            raise ValueError(f"{name}: parameter {p.name!r} must be a named one (no *args, **kwargs)")
        if p.name not in PARAMS:
            raise ValueError(f"{name}: describe parameter {p.name!r} in action_set.PARAMS")
        kind = _kind(hints.get(p.name))
        if kind is None:
            raise ValueError(
                f"{name}: parameter {p.name!r} needs a type hint of a known kind ({', '.join(KINDS)})"
            )
        params.append(Param(p.name, kind, REQUIRED if p.default is p.empty else p.default))
    names = {p.name for p in params}
    for old, new in aliases.items():
        if new not in names or old in names:
            raise ValueError(f"{name}: alias {old!r} must name another of its parameters, not {new!r}")
    return Action(
        name,
        tuple(params),
        doc[0],
        fn,
        tool=tool,
        stateful=stateful,
        aliases=tuple(aliases.items()),
        shorthand=shorthand,
    )


def _kind(hint: Any) -> str | None:
    """The kind a parameter's type hint names: Annotated metadata, a plain type, or X | None."""
    if typing.get_origin(hint) is Annotated:
        kind = hint.__metadata__[0]
        return kind if kind in KINDS else None
    args = typing.get_args(hint)
    if type(None) in args and len(args) == 2:
        return _kind(next(a for a in args if a is not type(None)))
    return _PLAIN_KINDS.get(hint)


class Derived(Mapping[str, V]):
    """A read-only table computed from an `ActionSet`, and computed again once the set changes:
    an action declared later (a plug-in, a test) shows up in every table at once."""

    def __init__(self, actions: ActionSet, build: Callable[[ActionSet], dict[str, V]]) -> None:
        self._actions = actions
        self._build = build
        self._state: tuple[int, dict[str, V]] = (-1, {})

    def _table(self) -> dict[str, V]:
        version, table = self._state
        if version != self._actions.version:
            version = self._actions.version
            table = self._build(self._actions)
            self._state = (version, table)
        return table

    def __getitem__(self, key: str) -> V:
        return self._table()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"Derived({self._table()!r})"
