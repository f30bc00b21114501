"""Runs a `ParsedAction` on a page: one short async function per BrowserGym primitive.

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

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from envharness.envs.browsergym.actionability import pointer_action, require_actionable
from envharness.envs.browsergym.actions import ParsedAction
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


# -- chat / infeasibility ---------------------------------------------------------------
async def send_msg_to_user(ctx: ActionContext, text: str) -> None:
    ctx.chat_messages.append({"role": "assistant", "message": text})


async def report_infeasible(ctx: ActionContext, reason: str) -> None:
    ctx.chat_messages.append({"role": "infeasible", "message": reason})
    ctx.infeasible = True


async def noop(ctx: ActionContext, wait_ms: float | None) -> None:
    wait = ctx.noop_wait_ms if wait_ms is None else wait_ms
    if wait > 0:
        await ctx.page.wait_for_timeout(wait)


# -- element actions --------------------------------------------------------------------
async def _checked(ctx: ActionContext, bid: str, action: str) -> None:
    """Fail fast when `bid` cannot take `action` (the Playwright call that follows is then quick)."""
    if ctx.fast_actions:
        await require_actionable(ctx.page, bid, action, ctx.element_timeout_ms)


async def _pointer(ctx: ActionContext, bid: str, action: str, **kwargs: Any) -> bool:
    """Click/dblclick/hover at the checked point; False when Playwright's locator must do it."""
    if not ctx.fast_actions:
        return False
    return await pointer_action(ctx.page, bid, action, timeout_ms=ctx.element_timeout_ms, **kwargs)


async def click(ctx: ActionContext, bid: str, button: str, modifiers: tuple[str, ...]) -> None:
    if await _pointer(ctx, bid, "click", button=button, modifiers=modifiers):
        return
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.click(button=button, modifiers=list(modifiers), timeout=ctx.element_timeout_ms)


async def dblclick(ctx: ActionContext, bid: str, button: str, modifiers: tuple[str, ...]) -> None:
    if await _pointer(ctx, bid, "dblclick", button=button, modifiers=modifiers):
        return
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.dblclick(button=button, modifiers=list(modifiers), timeout=ctx.element_timeout_ms)


async def hover(ctx: ActionContext, bid: str) -> None:
    if await _pointer(ctx, bid, "hover"):
        return
    await (await get_elem_by_bid(ctx.page, bid)).hover(timeout=ctx.element_timeout_ms)


async def fill(ctx: ActionContext, bid: str, value: str, enable_autocomplete_menu: bool) -> None:
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


async def clear(ctx: ActionContext, bid: str) -> None:
    await _checked(ctx, bid, "clear")
    await (await get_elem_by_bid(ctx.page, bid)).clear(timeout=ctx.element_timeout_ms)


async def check(ctx: ActionContext, bid: str) -> None:
    await _checked(ctx, bid, "check")
    await (await get_elem_by_bid(ctx.page, bid)).check(timeout=ctx.element_timeout_ms)


async def uncheck(ctx: ActionContext, bid: str) -> None:
    await _checked(ctx, bid, "uncheck")
    await (await get_elem_by_bid(ctx.page, bid)).uncheck(timeout=ctx.element_timeout_ms)


async def select_option(ctx: ActionContext, bid: str, options: str | tuple[str, ...]) -> None:
    await _checked(ctx, bid, "select_option")
    elem = await get_elem_by_bid(ctx.page, bid)
    await elem.select_option(options if isinstance(options, str) else list(options), timeout=ctx.element_timeout_ms)


async def press(ctx: ActionContext, bid: str, key_comb: str) -> None:
    await (await get_elem_by_bid(ctx.page, bid)).press(key_comb, timeout=ctx.element_timeout_ms)


async def focus(ctx: ActionContext, bid: str) -> None:
    await (await get_elem_by_bid(ctx.page, bid)).focus(timeout=ctx.element_timeout_ms)


async def drag_and_drop(ctx: ActionContext, from_bid: str, to_bid: str) -> None:
    await hover(ctx, from_bid)
    await ctx.page.mouse.down()
    await hover(ctx, to_bid)
    await ctx.page.mouse.up()


async def scroll(ctx: ActionContext, delta_x: float, delta_y: float) -> None:
    await ctx.page.mouse.wheel(*_page_xy(ctx, delta_x, delta_y))


# -- coordinate actions -------------------------------------------------------------------
async def scroll_at(ctx: ActionContext, x: float, y: float, dx: float, dy: float) -> None:
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.wheel(*_page_xy(ctx, dx, dy))


async def mouse_move(ctx: ActionContext, x: float, y: float) -> None:
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))


async def mouse_up(ctx: ActionContext, x: float, y: float, button: str) -> None:
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.up(button=button)


async def mouse_down(ctx: ActionContext, x: float, y: float, button: str) -> None:
    await ctx.page.mouse.move(*_page_xy(ctx, x, y))
    await ctx.page.mouse.down(button=button)


async def mouse_click(ctx: ActionContext, x: float, y: float, button: str) -> None:
    await ctx.page.mouse.click(*_page_xy(ctx, x, y), button=button)


async def mouse_dblclick(ctx: ActionContext, x: float, y: float, button: str) -> None:
    await ctx.page.mouse.dblclick(*_page_xy(ctx, x, y), button=button)


async def mouse_drag_and_drop(ctx: ActionContext, from_x: float, from_y: float, to_x: float, to_y: float) -> None:
    await ctx.page.mouse.move(*_page_xy(ctx, from_x, from_y))
    await ctx.page.mouse.down()
    await ctx.page.mouse.move(*_page_xy(ctx, to_x, to_y))
    await ctx.page.mouse.up()


async def keyboard_press(ctx: ActionContext, key: str) -> None:
    await ctx.page.keyboard.press(key)


async def keyboard_down(ctx: ActionContext, key: str) -> None:
    await ctx.page.keyboard.down(key)


async def keyboard_up(ctx: ActionContext, key: str) -> None:
    await ctx.page.keyboard.up(key)


async def keyboard_type(ctx: ActionContext, text: str) -> None:
    await ctx.page.keyboard.type(text)


async def keyboard_insert_text(ctx: ActionContext, text: str) -> None:
    await ctx.page.keyboard.insert_text(text)


# -- navigation and tabs ---------------------------------------------------------------------
async def goto(ctx: ActionContext, url: str) -> None:
    ctx.guard.check(url)
    await ctx.page.goto(url)


async def go_back(ctx: ActionContext) -> None:
    await ctx.page.go_back()


async def go_forward(ctx: ActionContext) -> None:
    await ctx.page.go_forward()


async def new_tab(ctx: ActionContext) -> None:
    await _activate(ctx, await ctx.context.new_page())


async def tab_close(ctx: ActionContext) -> None:
    await ctx.page.close()
    pages = ctx.context.pages
    await _activate(ctx, pages[-1] if pages else await ctx.context.new_page())


async def tab_focus(ctx: ActionContext, index: int) -> None:
    pages = ctx.context.pages
    if not -len(pages) <= index < len(pages):
        raise IndexError(f"tab index {index} is out of range: {len(pages)} tab(s) open")
    await pages[index].bring_to_front()
    await _activate(ctx, pages[index])


PRIMITIVES: dict[str, Callable[..., Awaitable[None]]] = {
    f.__name__: f
    for f in (
        send_msg_to_user, report_infeasible, noop, click, dblclick, hover, fill, clear, check, uncheck,
        select_option, press, focus, drag_and_drop, scroll, scroll_at, mouse_move, mouse_up, mouse_down,
        mouse_click, mouse_dblclick, mouse_drag_and_drop, keyboard_press, keyboard_down, keyboard_up,
        keyboard_type, keyboard_insert_text, goto, go_back, go_forward, new_tab, tab_close, tab_focus,
    )
}

#: Actions after which the next reset reloads the page instead of restarting in place
#: (they leave state behind that a restarted episode must not inherit).
STATEFUL_ACTIONS = frozenset({"mouse_down", "keyboard_down", "drag_and_drop", "goto", "go_back",
                              "go_forward", "new_tab", "tab_close", "tab_focus"})


async def execute(ctx: ActionContext, actions: list[ParsedAction]) -> None:
    """Run the actions in order; the first failure stops the rest and propagates."""
    for action in actions:
        await PRIMITIVES[action.name](ctx, **action.args)
