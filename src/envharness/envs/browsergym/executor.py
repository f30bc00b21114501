"""The browser's actions: each declared once, by the short async function that runs it.

`@action` registers a BrowserGym primitive in `ACTIONS` from its signature and docstring
(`action_set.py`); the grammar, the tools and the prompts derive from that registry.
`@shorthand` declares OpenEnv's harness tools that stand for a primitive (``send_keys``,
``scroll('down')``). `execute` runs parsed actions on the page.

Each function keeps the meaning of its namesake in ``browsergym/core/action/functions.py``
(element timeouts, coordinates divided by the page's ``_bgym_scale_factor``,
``get_elem_by_bid``'s frame-by-frame lookup) without BrowserGym's demo-mode effects.
Errors are raised as exceptions; the environment turns them into ``last_action_error``.

Documented differences from BrowserGym:
- ``noop()`` without an argument waits ``ActionContext.noop_wait_ms`` (0 by default) rather
  than 1000 ms; ``noop(1000)`` waits exactly as BrowserGym's default does.
- ``goto`` (and any request a page makes) may reach only the environment's own pages and
  the configured allowed hosts.
- ``upload_file`` / ``mouse_upload_file`` are refused (they would read the server's disk).
- element actions on main-frame bids are checked first in one round trip (`actionability`):
  one that can never become actionable (hidden, disabled, covered, read-only) fails at once
  with the reason in words; one that is animating is waited for up to
  `ActionContext.element_timeout_ms` (environment option ``action_timeout_ms``, 3000 by
  default; BrowserGym waits 500 ms for anything). Clicks and hovers then dispatch the mouse
  input at the checked point. ``fast_actions=False`` restores Playwright's locator actions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envharness.envs.browsergym.action_set import (
    ActionSet,
    Button,
    Derived,
    Direction,
    Key,
    Modifiers,
    Options,
    ParsedAction,
)
from envharness.envs.browsergym.actionability import pointer_action, require_actionable

if TYPE_CHECKING:
    from envharness.envs.browsergym.engine import HostGuard

_SHOW_PAGE_JS = "window.dispatchEvent(new Event('pageshow', {bubbles: true, cancelable: false}));"


@dataclass
class ActionContext:
    """What actions may touch: the session's context, its active page, its chat."""

    context: Any
    page: Any
    guard: HostGuard
    chat_messages: list[dict[str, str]] = field(default_factory=list)
    noop_wait_ms: float = 0.0
    element_timeout_ms: float = 3000.0
    infeasible: bool = False
    fast_actions: bool = True  # False: Playwright's locator actions (polling checks) only
    held_keys: list[str] = field(default_factory=list)  # pressed by keyboard_down, not released
    held_buttons: list[str] = field(default_factory=list)  # pressed by mouse_down, not released


async def release_held(ctx: ActionContext) -> None:
    """Release what the last episode's actions left pressed: Playwright keeps a page's pressed keys
    and buttons (a held Shift turns the next episode's Tab into Shift+Tab), a fresh page has none."""
    while ctx.held_keys:
        await ctx.page.keyboard.up(ctx.held_keys.pop())
    while ctx.held_buttons:
        await ctx.page.mouse.up(button=ctx.held_buttons.pop())


#: Every action the browser runs, declared below by the function that runs it.
ACTIONS = ActionSet()
action = ACTIONS.action
shorthand = ACTIONS.shorthand


# -- helpers --------------------------------------------------------------------------
async def get_elem_by_bid(page: Any, bid: str) -> Any:
    """BrowserGym's lookup: a bid like ``aB12`` lives in frame ``a``, then frame ``aB``."""
    current = page
    i = 0
    while bid[i:] and not bid[i:].isnumeric():
        i += 1
        while bid[i:] and bid[i].isalpha() and bid[i].isupper():
            i += 1
        frame_elem = current.get_by_test_id(bid[:i])
        if not await frame_elem.count():
            raise ValueError(f'Could not find element with bid "{bid}"')
        current = frame_elem.frame_locator(":scope")
    elem = current.get_by_test_id(bid)
    if not await elem.count():
        raise ValueError(f'Could not find element with bid "{bid}"')
    return elem


def _page_xy(ctx: ActionContext, x: float, y: float) -> tuple[float, float]:
    """Screenshot coordinates -> page coordinates (BrowserGym's `map_coordinates`)."""
    scale = getattr(ctx.page, "_bgym_scale_factor", 1.0)
    return x / scale, y / scale


async def _activate(ctx: ActionContext, page: Any) -> None:
    ctx.page = page
    await page.evaluate(_SHOW_PAGE_JS)


async def _checked(ctx: ActionContext, bid: str, action: str) -> None:
    """Fail fast when `bid` cannot take `action` (the Playwright call that follows is then quick)."""
    if ctx.fast_actions:
        await require_actionable(ctx.page, bid, action, ctx.element_timeout_ms)


async def _pointer(ctx: ActionContext, bid: str, action: str, **kwargs: Any) -> bool:
    """Click/dblclick/hover at the checked point; False when Playwright's locator must do it."""
    if not ctx.fast_actions:
        return False
    return await pointer_action(ctx.page, bid, action, timeout_ms=ctx.element_timeout_ms, **kwargs)


# -- chat / infeasibility ---------------------------------------------------------------
@action
async def send_msg_to_user(ctx: ActionContext, text: str) -> None:
    """Send a message to the user."""
    ctx.chat_messages.append({"role": "assistant", "message": text})


@action
async def report_infeasible(ctx: ActionContext, reason: str) -> None:
    """Report that the task cannot be done."""
    ctx.chat_messages.append({"role": "infeasible", "message": reason})
    ctx.infeasible = True


@action
async def noop(ctx: ActionContext, wait_ms: float | None = None) -> None:
    """Do nothing and observe the page again (optionally wait `wait_ms`)."""
    wait = ctx.noop_wait_ms if wait_ms is None else wait_ms  # None: the environment's default wait
    if wait > 0:
        await ctx.page.wait_for_timeout(wait)


# -- element (bid) actions ------------------------------------------------------------------
@action
async def click(ctx: ActionContext, bid: str, button: Button = "left", modifiers: Modifiers = ()) -> None:
    """Click the element with this BrowserGym bid."""
    if await _pointer(ctx, bid, "click", button=button, modifiers=modifiers):
        return
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.click(button=button, modifiers=list(modifiers), timeout=ctx.element_timeout_ms)


@action
async def dblclick(ctx: ActionContext, bid: str, button: Button = "left", modifiers: Modifiers = ()) -> None:
    """Double-click an element."""
    if await _pointer(ctx, bid, "dblclick", button=button, modifiers=modifiers):
        return
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.dblclick(button=button, modifiers=list(modifiers), timeout=ctx.element_timeout_ms)


@action
async def hover(ctx: ActionContext, bid: str) -> None:
    """Move the mouse over an element."""
    if await _pointer(ctx, bid, "hover"):
        return
    await (await get_elem_by_bid(ctx.page, bid)).hover(timeout=ctx.element_timeout_ms)


@action(aliases={"text": "value"})  # the tool's argument was called `text` before it took BrowserGym's name
async def fill(ctx: ActionContext, bid: str, value: str, enable_autocomplete_menu: bool = False) -> None:
    """Replace the text of an input field (by bid) with `text`."""
    await _checked(ctx, bid, "fill")
    elem = await get_elem_by_bid(ctx.page, bid)
    timeout = ctx.element_timeout_ms
    if not enable_autocomplete_menu:
        await elem.fill(value, timeout=timeout)
        return
    # BrowserGym: fill all but the last character, type the last one to open autocomplete menus
    await elem.clear(timeout=timeout)
    if len(value) > 1:
        await elem.fill(value[:-1], timeout=timeout)
    if value:
        await elem.type(value[-1], delay=0, timeout=timeout)


@action
async def clear(ctx: ActionContext, bid: str) -> None:
    """Clear an input field."""
    await _checked(ctx, bid, "clear")
    await (await get_elem_by_bid(ctx.page, bid)).clear(timeout=ctx.element_timeout_ms)


@action
async def check(ctx: ActionContext, bid: str) -> None:
    """Tick a checkbox."""
    await _checked(ctx, bid, "check")
    await (await get_elem_by_bid(ctx.page, bid)).check(timeout=ctx.element_timeout_ms)


@action
async def uncheck(ctx: ActionContext, bid: str) -> None:
    """Untick a checkbox."""
    await _checked(ctx, bid, "uncheck")
    await (await get_elem_by_bid(ctx.page, bid)).uncheck(timeout=ctx.element_timeout_ms)


@action
async def select_option(ctx: ActionContext, bid: str, options: Options) -> None:
    """Select option(s) of a <select> by their text."""
    await _checked(ctx, bid, "select_option")
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.select_option(
        options if isinstance(options, str) else list(options), timeout=ctx.element_timeout_ms
    )


@action
async def press(ctx: ActionContext, bid: str, key_comb: Key) -> None:
    """Press a key combination (e.g. 'Control+a') in an element."""
    await (await get_elem_by_bid(ctx.page, bid)).press(key_comb, timeout=ctx.element_timeout_ms)


@action
async def focus(ctx: ActionContext, bid: str) -> None:
    """Focus an element."""
    await (await get_elem_by_bid(ctx.page, bid)).focus(timeout=ctx.element_timeout_ms)


@action(stateful=True)
async def drag_and_drop(ctx: ActionContext, from_bid: str, to_bid: str) -> None:
    """Drag one element onto another."""
    await hover(ctx, from_bid)
    await ctx.page.mouse.down()
    await hover(ctx, to_bid)
    await ctx.page.mouse.up()


@action(tool=False)  # the `scroll` tool is the shorthand scroll(direction) below
async def scroll(ctx: ActionContext, delta_x: float, delta_y: float) -> None:
    """Scroll the page by (delta_x, delta_y) pixels."""
    await ctx.page.mouse.wheel(*_page_xy(ctx, delta_x, delta_y))


# -- coordinate actions -------------------------------------------------------------------
@action(tool=False)
async def scroll_at(ctx: ActionContext, x: float, y: float, dx: float, dy: float) -> None:
    """Scroll by (dx, dy) pixels with the mouse at (x, y)."""
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.wheel(*_page_xy(ctx, dx, dy))


@action(tool=False)
async def mouse_move(ctx: ActionContext, x: float, y: float) -> None:
    """Move the mouse to page coordinates."""
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))


@action(tool=False)
async def mouse_up(ctx: ActionContext, x: float, y: float, button: Button = "left") -> None:
    """Release a mouse button at page coordinates."""
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.up(button=button)
    if button in ctx.held_buttons:
        ctx.held_buttons.remove(button)


@action(tool=False, stateful=True)
async def mouse_down(ctx: ActionContext, x: float, y: float, button: Button = "left") -> None:
    """Press a mouse button at page coordinates (and hold it)."""
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.down(button=button)
    ctx.held_buttons.append(button)


@action
async def mouse_click(ctx: ActionContext, x: float, y: float, button: Button = "left") -> None:
    """Click at page coordinates."""
    await ctx.page.mouse.click(*_page_xy(ctx, x, y), button=button)


@action(tool=False)
async def mouse_dblclick(ctx: ActionContext, x: float, y: float, button: Button = "left") -> None:
    """Double-click at page coordinates."""
    await ctx.page.mouse.dblclick(*_page_xy(ctx, x, y), button=button)


@action(tool=False)
async def mouse_drag_and_drop(
    ctx: ActionContext, from_x: float, from_y: float, to_x: float, to_y: float
) -> None:
    """Drag from one point of the page to another."""
    await ctx.page.mouse.move(*_page_xy(ctx, from_x, from_y))
    await ctx.page.mouse.down()
    await ctx.page.mouse.move(*_page_xy(ctx, to_x, to_y))
    await ctx.page.mouse.up()


@action
async def keyboard_press(ctx: ActionContext, key: Key) -> None:
    """Press a key or combination on the page."""
    await ctx.page.keyboard.press(key)


@action(tool=False, stateful=True)
async def keyboard_down(ctx: ActionContext, key: Key) -> None:
    """Press a key and hold it."""
    await ctx.page.keyboard.down(key)
    ctx.held_keys.append(key)


@action(tool=False)
async def keyboard_up(ctx: ActionContext, key: Key) -> None:
    """Release a held key."""
    await ctx.page.keyboard.up(key)
    if key in ctx.held_keys:
        ctx.held_keys.remove(key)


@action
async def keyboard_type(ctx: ActionContext, text: str) -> None:
    """Type text with the keyboard."""
    await ctx.page.keyboard.type(text)


@action(tool=False)
async def keyboard_insert_text(ctx: ActionContext, text: str) -> None:
    """Insert text at the caret, without key events."""
    await ctx.page.keyboard.insert_text(text)


# -- navigation and tabs ---------------------------------------------------------------------
@action(stateful=True)
async def goto(ctx: ActionContext, url: str) -> None:
    """Open a URL."""
    ctx.guard.check(url)
    try:
        await ctx.page.goto(url)
    except Exception:
        ctx.guard.take_blocked(ctx.page)  # the browser's own check: the guard's reason, not net::ERR_ABORTED
        raise
    ctx.guard.take_blocked(ctx.page)


@action(stateful=True)
async def go_back(ctx: ActionContext) -> None:
    """Go back in history."""
    await ctx.page.go_back()


@action(stateful=True)
async def go_forward(ctx: ActionContext) -> None:
    """Go forward in history."""
    await ctx.page.go_forward()


@action(tool=False, stateful=True)
async def new_tab(ctx: ActionContext) -> None:
    """Open a new tab and switch to it."""
    await _activate(ctx, await ctx.context.new_page())


@action(tool=False, stateful=True)
async def tab_close(ctx: ActionContext) -> None:
    """Close the active tab."""
    await ctx.page.close()
    pages = ctx.context.pages
    await _activate(ctx, pages[-1] if pages else await ctx.context.new_page())


@action(tool=False, stateful=True)
async def tab_focus(ctx: ActionContext, index: int) -> None:
    """Switch to the tab at this index."""
    pages = ctx.context.pages
    if not -len(pages) <= index < len(pages):
        raise IndexError(f"tab index {index} is out of range: {len(pages)} tab(s) open")
    await pages[index].bring_to_front()
    await _activate(ctx, pages[index])


# -- shorthands: OpenEnv's harness tools, rewritten into the primitives above ---------------
#: Pixels one ``scroll('down')`` moves (before BrowserGym's coordinate scaling).
SCROLL_STEP = 200
_SCROLL_MOVES = {
    "down": (0, SCROLL_STEP),
    "up": (0, -SCROLL_STEP),
    "right": (SCROLL_STEP, 0),
    "left": (-SCROLL_STEP, 0),
}
#: Key names `send_keys` presses as one key (anything else is typed as text).
_NAMED_KEYS = {
    "Enter",
    "Tab",
    "Escape",
    "Backspace",
    "Delete",
    "Insert",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "Space",
    "Shift",
    "Control",
    "Alt",
    "Meta",
    *(f"F{i}" for i in range(1, 13)),
}


@shorthand
def send_keys(text: str) -> ParsedAction:
    """Type text (or a key such as Enter) into the focused element."""
    parts = text.split("+")
    if all(part in _NAMED_KEYS or (len(part) == 1 and len(parts) > 1) for part in parts):
        return ParsedAction("keyboard_press", {"key": text})
    return ParsedAction("keyboard_type", {"text": text})


@shorthand(name="scroll")
def scroll_direction(direction: Direction) -> ParsedAction:
    """Scroll the page: 'up', 'down', 'left' or 'right'."""
    dx, dy = _SCROLL_MOVES[direction]
    return ParsedAction("scroll", {"delta_x": dx, "delta_y": dy})


# -- derived from the declarations ------------------------------------------------------------
#: name -> the function that runs it.
PRIMITIVES: Derived[Callable[..., Awaitable[None]]] = Derived(
    ACTIONS, lambda actions: {name: a.run for name, a in actions.actions.items()}
)
#: Actions after which the next reset reloads the page instead of restarting in place.
STATEFUL_ACTIONS: Derived[Any] = Derived(
    ACTIONS, lambda actions: {name: a for name, a in actions.actions.items() if a.stateful}
)


async def execute(ctx: ActionContext, actions: list[ParsedAction]) -> None:
    """Run the actions in order; the first failure stops the rest and propagates."""
    for parsed in actions:
        await ACTIONS.actions[parsed.name].run(ctx, **parsed.args)
