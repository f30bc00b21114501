"""The browser observation: BrowserGym's bids, AXTree text, pruned HTML, element properties, screenshot.

Same steps as BrowserGym's ``env._get_obs`` (0.14.3), on an async Playwright page:

1. mark every frame with BrowserGym's own script (``js/frame_mark_elements.js``): each standard
   HTML element keeps a ``bid`` attribute for the page's life, so bids match BrowserGym's on the
   same page, and the bid is copied into ARIA attributes so that it shows in the AXTree;
2. take the DOM snapshot (only when pruned HTML or element properties are asked for) and the
   accessibility tree of every frame, over one CDP session kept per page;
3. unmark (remove the ARIA copies; the same script returns the focused element's bid);
4. close a ``<select>``'s open popup, as BrowserGym's screenshot does (see `close_select_popup`);
5. take the screenshot, if asked for, as base64 PNG or JPEG straight from CDP (never decoded).

The text formats live in `observation_text` (ported from BrowserGym, and equal to its output).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from envharness.envs.browsergym.observation_text import (
    BID_ATTR,
    SOM_ATTR,
    VIS_ATTR,
    drop_inline_text_boxes,
    extra_element_properties,
    flatten_axtree_to_str,
    flatten_dom_to_str,
    pop_bids_from_attribute,
    prune_html,
    take_bids_from_aria,
)

logger = logging.getLogger(__name__)

#: BrowserGym's ``EXTRACT_OBS_MAX_TRIES`` and the errors it retries on (frames coming and going).
MAX_TRIES = 5
_RETRY_ON = (
    "Frame was detached",
    "Frame with the given frameId is not found",
    "Execution context was destroyed",
    "Frame has been detached",
    "Cannot mark a child frame without a bid",
    "Cannot read properties of undefined",
)
_JS_DIR = Path(__file__).parent / "js"
#: Whether a <select>'s popup is open in the main frame (a Chromium without `:open` answers false).
_SELECT_OPEN = (
    "(() => { try { return document.querySelector('select:open') !== null; } catch { return false; } })()"
)


@dataclass
class ObservationParts:
    """Which parts of the observation a session wants; what is not asked for is not computed."""

    axtree: bool = True
    pruned_html: bool = True
    extra_properties: bool = True
    screenshot: bool = False
    screenshot_format: str = "png"  # or "jpeg"


class MarkingError(RuntimeError):
    """A child frame could not be marked (it has no bid yet); retried, as in BrowserGym."""


@cache
def _script(name: str) -> str:
    return (_JS_DIR / f"{name}.js").read_text()


def _call(name: str, *args: Any) -> str:
    """One JS expression that defines the vendored function `name` and calls it with `args`."""
    return f"(() => {{\n{_script(name)}\nreturn {name}(...{json.dumps(args)});\n}})()"


async def _cdp(page: Any) -> Any:
    """The page's CDP session, opened once and reused (opening one costs a round trip or two).

    Its ``send`` is the implementation's: Playwright's public wrapper walks every reply, item by
    item, to turn its own objects into API objects, which CDP's plain JSON never holds; for the
    AXTree's thousands of items that walk was a tenth of the server's CPU per step.
    """
    session = getattr(page, "_envharness_cdp", None)
    if session is None:
        opened = await page.context.new_cdp_session(page)
        session = getattr(opened, "_impl_obj", opened)  # same `send(method, params)`, no walk
        page._envharness_cdp = session
    return session


async def _evaluate(cdp: Any, expression: str, await_promise: bool = False) -> Any:
    """Run `expression` in the main frame over our CDP session (ordered with our other requests)."""
    reply = await cdp.send(
        "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": await_promise}
    )
    if "exceptionDetails" in reply:
        details = reply["exceptionDetails"]
        raise RuntimeError(details.get("exception", {}).get("description") or details.get("text", "JS error"))
    return reply["result"].get("value")


async def _child_frames(frame: Any) -> list[tuple[Any, str | None]]:
    """(child frame, its frame element's bid) for the child frames BrowserGym would mark."""
    children = []
    for child in frame.child_frames:
        if child.is_detached():
            continue
        element = await child.frame_element()
        if await element.content_frame() != child:  # e.g. a PDF viewer in <embed>
            continue
        sandbox = await element.get_attribute("sandbox")
        if sandbox is not None and "allow-scripts" not in sandbox.split():
            continue
        children.append((child, await element.get_attribute(BID_ATTR)))
    return children


async def _mark_child_frames(frame: Any, lenient: bool, wait_visibility: bool) -> None:
    """Mark the descendant frames of `frame` (already marked), as BrowserGym, depth first."""
    for child, child_bid in await _child_frames(frame):
        if child_bid is None:
            if lenient:
                logger.warning("Cannot mark a child frame without a bid. Skipping frame.")
                continue
            raise MarkingError("Cannot mark a child frame without a bid.")
        if not re.match(r"^[a-z][a-zA-Z]*$", child_bid):
            raise MarkingError(f"unexpected frame bid {child_bid!r}")
        warnings = await child.evaluate(
            _call("frame_mark_elements", child_bid, BID_ATTR, "standard_html", wait_visibility)
        )
        for msg in warnings:
            logger.warning(msg)
        await _mark_child_frames(child, lenient, wait_visibility)


async def mark_elements(page: Any, lenient: bool = False) -> None:
    """Give every element of every frame its BrowserGym ``bid`` (kept across steps).

    Also leaves the bids in ARIA attributes, for the AXTree; `extract_page_observation`
    removes them again.
    """
    cdp = await _cdp(page)
    await _evaluate(cdp, _call("frame_mark_elements", "", BID_ATTR, "standard_html", False))
    await _mark_child_frames(page.main_frame, lenient, wait_visibility=True)


#: Undo what marking leaves in a frame (bids, visibility and set-of-marks attributes, the
#: counters), so that the next marking numbers the page as BrowserGym does on a fresh load.
_FORGET_JS = """() => {
  const todo = [document];
  while (todo.length) {
    for (const el of todo.pop().querySelectorAll('*')) {
      for (const name of ['%s', '%s', '%s']) el.removeAttribute(name);
      if (el.shadowRoot) todo.push(el.shadowRoot);
    }
  }
  delete window.browsergym_elem_counter;
  delete window.browsergym_frame_id_generator;
}""" % (BID_ATTR, VIS_ATTR, SOM_ATTR)  # noqa: UP031 - the JavaScript's braces make % the readable format


async def forget_marks(page: Any) -> None:
    """Make `page`'s next observation match BrowserGym's on a freshly loaded page; called before
    an episode restarts in place.

    Removes the bids of every frame, and drops Chromium's accessibility cache: while that cache
    lives, the nodes a task creates get their accessibility objects before our marking sets the
    ARIA attributes (and some keep a different state, e.g. a label's text turns presentational),
    whereas on a fresh page they are created by the first AXTree request, after marking.
    ``Accessibility.enable`` + ``disable`` tears the cache down (``disable`` alone does not).
    """
    cdp = await _cdp(page)
    await asyncio.gather(
        cdp.send("Accessibility.enable"),
        cdp.send("Accessibility.disable"),
        *(frame.evaluate(_FORGET_JS) for frame in page.frames if not frame.is_detached()),
    )


async def _unmark_child_frames(frame: Any, focused: dict[str, Any]) -> str:
    """Unmark the child frames of `frame`; the focused bid, followed into the focused frame."""
    focused_bid = focused["focused_bid"]
    for child, child_bid in await _child_frames(frame):
        if child_bid is None:
            continue
        try:
            inner = await child.evaluate(_call("frame_unmark_elements", BID_ATTR))
        except Exception as e:  # a frame that went away has nothing left to clean
            if "detached" in str(e):
                continue
            raise
        inner_bid = await _unmark_child_frames(child, inner)
        if focused["is_frame"] and child_bid == focused_bid and inner_bid:
            focused_bid = inner_bid
    return focused_bid


async def _merged_axtree(cdp: Any, single_frame: bool) -> list[dict[str, Any]]:
    """The AXTree nodes of all frames, each iframe node linked to its frame's root (BrowserGym's merge)."""
    if single_frame:  # the common case: skip the frame tree's round trip
        return (await cdp.send("Accessibility.getFullAXTree"))["nodes"]
    tree = (await cdp.send("Page.getFrameTree"))["frameTree"]
    frame_ids, todo = [], [tree]
    while todo:
        frame = todo.pop()
        todo.extend(frame.get("childFrames", []))
        frame_ids.append(frame["frame"]["id"])
    trees = await asyncio.gather(
        *(cdp.send("Accessibility.getFullAXTree", {"frameId": f}) for f in frame_ids)
    )
    by_frame = dict(zip(frame_ids, (t["nodes"] for t in trees)))
    merged: list[dict[str, Any]] = []
    for nodes in by_frame.values():
        merged.extend(nodes)
        for node in nodes:
            if node["role"]["value"] != "Iframe":
                continue
            described = await cdp.send("DOM.describeNode", {"backendNodeId": node["backendDOMNodeId"]})
            frame_id = described.get("node", {}).get("frameId")
            if frame_id in by_frame:
                node["childIds"].append(by_frame[frame_id][0]["nodeId"])
    return merged


async def _dom_snapshot(cdp: Any) -> dict[str, Any]:
    snapshot = await cdp.send(
        "DOMSnapshot.captureSnapshot",
        {"computedStyles": [], "includeDOMRects": True, "includePaintOrder": True},
    )
    pop_bids_from_attribute(snapshot, "aria-roledescription")
    pop_bids_from_attribute(snapshot, "aria-description")
    return snapshot


async def screenshot_base64(page: Any, fmt: str = "png", scale_factor: float = 1.0) -> str:
    """The viewport as a base64 PNG/JPEG, at BrowserGym's scale factor (1.5 for MiniWoB)."""
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"screenshot_format must be 'png' or 'jpeg', got {fmt!r}")
    viewport = page.viewport_size or await page.evaluate("() => ({width: innerWidth, height: innerHeight})")
    clip = {"x": 0, "y": 0, "width": viewport["width"], "height": viewport["height"], "scale": scale_factor}
    shot = await (await _cdp(page)).send("Page.captureScreenshot", {"format": fmt, "clip": clip})
    return shot["data"]


async def close_select_popup(page: Any) -> None:
    """Close the open popup of a ``<select>``, as every BrowserGym observation does.

    BrowserGym's screenshot (taken for every observation) overrides the page's device metrics on a
    CDP session of its own and detaches it: the page is resized for a moment, which closes an open
    ``<select>`` popup. Its observation still shows the list ``expanded=True`` (the AXTree is taken
    first), but the next action finds it closed: keys typed then pick an option in the closed list
    (no Enter needed, the list stays ``expanded=False``). Here an Escape key-down closes it: a
    popup takes the keys while open, so the page sees no event, and nothing is resized.
    """
    cdp = await _cdp(page)
    await cdp.send(
        "Input.dispatchKeyEvent",
        {"type": "rawKeyDown", "key": "Escape", "code": "Escape", "windowsVirtualKeyCode": 27},
    )


async def _extract(page: Any, parts: ObservationParts, lenient: bool) -> tuple[dict | None, list, str, bool]:
    """Mark, capture and unmark, and ask whether a ``<select>``'s popup is open. The requests go
    out together on one CDP session, which Chromium handles in order, so they cost about one round
    trip (two when visibilities are needed)."""
    cdp = await _cdp(page)
    single_frame = len(page.frames) == 1
    need_dom = parts.pruned_html or parts.extra_properties
    need_visibility = parts.extra_properties
    mark = _evaluate(cdp, _call("frame_mark_elements", "", BID_ATTR, "standard_html", False))
    axtree = _merged_axtree(cdp, single_frame) if parts.axtree else asyncio.sleep(0, [])
    if single_frame:
        first = [mark, axtree]
    else:  # child frames are marked one by one through Playwright, before the AXTree is taken
        await mark
        await _mark_child_frames(page.main_frame, lenient, wait_visibility=need_visibility)
        first = [axtree]
    if need_visibility:  # the IntersectionObserver reports on the next frame, while the AXTree is built
        first.append(_evaluate(cdp, "window.browsergym_visibility_ready", await_promise=True))
        results = await asyncio.gather(*first)
        for msg in results[-1] or ():
            logger.warning(msg)
        second = [
            _dom_snapshot(cdp),
            _evaluate(cdp, _call("frame_unmark_elements", BID_ATTR)),
            _evaluate(cdp, _SELECT_OPEN),
        ]
    else:
        second = [
            *first,
            *([_dom_snapshot(cdp)] if need_dom else []),
            _evaluate(cdp, _call("frame_unmark_elements", BID_ATTR)),
            _evaluate(cdp, _SELECT_OPEN),
        ]
        results = []
    later = await asyncio.gather(*second)
    nodes = (results or later)[1 if single_frame else 0] if parts.axtree else []
    dom = later[-3] if need_dom else None
    focused, popup_open = later[-2], later[-1]
    focused_bid = (
        focused["focused_bid"] if single_frame else await _unmark_child_frames(page.main_frame, focused)
    )
    return dom, nodes, focused_bid, bool(popup_open)


async def extract_page_observation(
    page: Any, parts: ObservationParts, scale_factor: float | None = None
) -> dict[str, Any]:
    """The observation of `page` as BrowserGym computes it, limited to the asked-for `parts`.

    Keys: ``axtree_txt``, ``pruned_html``, ``focused_element_bid``, ``extra_element_properties``,
    ``screenshot`` (base64 str or None). Parts not asked for come back empty. `scale_factor`
    (default: ``page._bgym_scale_factor`` as BrowserGym, else 1) scales bboxes and the screenshot.
    """
    if scale_factor is None:
        scale_factor = getattr(page, "_bgym_scale_factor", 1.0)
    for tries_left in reversed(range(MAX_TRIES)):
        try:
            dom, nodes, focused_bid, popup_open = await _extract(page, parts, lenient=tries_left == 0)
            break
        except Exception as e:
            if tries_left == 0 or not any(msg in str(e) for msg in _RETRY_ON):
                raise
            logger.warning("observation failed (%s); retrying (%d tries left)", e, tries_left)
            await asyncio.sleep(0.1)
    axtree_txt = ""
    if parts.axtree:
        take_bids_from_aria(nodes)
        axtree_txt = flatten_axtree_to_str(drop_inline_text_boxes(nodes))
    if popup_open:
        await close_select_popup(page)
    screenshot = None
    if parts.screenshot:
        screenshot = await screenshot_base64(page, parts.screenshot_format, scale_factor)
    return {
        "axtree_txt": axtree_txt,
        "pruned_html": prune_html(flatten_dom_to_str(dom)) if parts.pruned_html and dom else "",
        "focused_element_bid": focused_bid or "",
        "extra_element_properties": extra_element_properties(dom, scale_factor)
        if parts.extra_properties and dom
        else {},
        "screenshot": screenshot,
    }
