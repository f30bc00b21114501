"""Fail fast, say why: one round trip decides whether an element action can run.

Playwright's element actions poll their actionability checks (attached, visible, enabled,
editable, stable, receives events) until a time-out, so a click on a hidden element's bid
costs the whole time-out and comes back as "Timeout 3000ms exceeded". An untrained policy
takes such actions all the time. Here the checks run in the page in one call
(``js/element_actionability.js``) and answer at once, with the reason in words
("element 2 is not visible (display: none)", "element 13 is disabled",
"element 7 is covered by element 9"). Only what can change soon is waited for, bounded: an
element that, or whose ancestor or covering element, is animating; and a pointer action waits
for the page's finite animations to end, wherever they are (an accordion opening above a button
moves the button), then until its element has kept its place for a frame while anything animates.

Pointer actions (click, dblclick, hover) then dispatch the input at the computed point with
``page.mouse``: the checks have been done, so Playwright's own re-checks (and their wait of an
animation frame, ~17-35 ms in headless Chromium) are skipped. Other element actions (fill,
clear, check, uncheck, select_option) run through Playwright once the check passed, so their
semantics stay Playwright's. Bids inside child frames, and bids carried by several elements,
are left to Playwright as before (`check_element` returns None).

Differences from Playwright: the element is not re-checked between the check and the input
(a ~1 ms window, where Playwright re-checks the hit target at pointerdown), and an element
moved by script timers rather than Web/CSS animations or jQuery effects is not waited for.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

# The observation's CDP session of the page: requests on it are answered in order.
from envharness.envs.browsergym.observation import _cdp
from envharness.envs.browsergym.observation_text import BID_ATTR

_JS = Path(__file__).parent / "js" / "element_actionability.js"
#: Modifier names Playwright accepts -> the key pressed on this (Linux) machine.
_MODIFIER_KEYS = {
    "Alt": "Alt",
    "Control": "Control",
    "ControlOrMeta": "Control",
    "Meta": "Meta",
    "Shift": "Shift",
}


class ElementNotActionable(ValueError):
    """The element exists but the action cannot be done on it; the message says why."""


@dataclass(frozen=True)
class Actionability:
    """The page's answer: the click point when actionable, else the reason."""

    ok: bool
    x: float = 0.0
    y: float = 0.0
    code: str = (
        ""  # missing | ambiguous | hidden | disabled | readonly | notcheckbox | outside | covered | moving
    )
    reason: str = ""
    transient: bool = False
    elapsed_ms: float = 0.0


@cache
def _script() -> str:
    return _JS.read_text()


def handles_bid(bid: str) -> bool:
    """Main-frame bids are digits; ``aB12`` lives in a child frame (left to Playwright)."""
    return bid.isdigit()


async def check_element(page: Any, bid: str, action: str, timeout_ms: float) -> Actionability | None:
    """Ask the page whether `action` can run on `bid` now (waiting up to `timeout_ms` only while
    it is animating). None: not decided here (child frame, several elements with the bid)."""
    if not handles_bid(bid):
        return None
    expression = (
        f"(() => {{\n{_script()}\nreturn element_actionability("
        f"{json.dumps(bid)}, {json.dumps(action)}, {json.dumps(BID_ATTR)}, {float(timeout_ms)});\n}})()"
    )
    start = time.perf_counter()
    cdp = await _cdp(page)
    reply = await cdp.send(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
    )
    if "exceptionDetails" in reply:
        details = reply["exceptionDetails"]
        raise RuntimeError(details.get("exception", {}).get("description") or details.get("text", "JS error"))
    value = reply["result"].get("value") or {}
    elapsed = (time.perf_counter() - start) * 1000
    if value.get("code") == "ambiguous":
        return None  # Playwright reports its strict-mode error, as in BrowserGym
    return Actionability(
        ok=bool(value.get("ok")),
        x=float(value.get("x", 0.0)),
        y=float(value.get("y", 0.0)),
        code=value.get("code", ""),
        reason=value.get("reason", ""),
        transient=bool(value.get("transient")),
        elapsed_ms=elapsed,
    )


async def require_actionable(page: Any, bid: str, action: str, timeout_ms: float) -> Actionability | None:
    """`check_element`, raising when the element is not actionable: a ValueError with
    BrowserGym's text for a bid that is not on the page, `ElementNotActionable` otherwise."""
    result = await check_element(page, bid, action, timeout_ms)
    if result is None or result.ok:
        return result
    if result.code == "missing":
        raise ValueError(result.reason)
    raise ElementNotActionable(result.reason)


async def pointer_action(
    page: Any,
    bid: str,
    action: str,
    *,
    button: str = "left",
    modifiers: tuple[str, ...] = (),
    timeout_ms: float,
) -> bool:
    """Check, then click / double-click / hover at the element's point with ``page.mouse``.
    False: not decided here (the caller uses Playwright's locator instead)."""
    result = await require_actionable(page, bid, action, timeout_ms)
    if result is None:
        return False
    if action == "hover":
        await page.mouse.move(result.x, result.y)
        return True
    keys = [_MODIFIER_KEYS[m] for m in modifiers]
    for key in keys:
        await page.keyboard.down(key)
    try:
        await page.mouse.click(
            result.x, result.y, button=button, click_count=2 if action == "dblclick" else 1
        )
    finally:
        for key in reversed(keys):
            await page.keyboard.up(key)
    return True
