"""MiniWoB++ tasks: the 125 that BrowserGym registers, served from PyPI `miniwob`'s HTML.

The pages are served by the browser context itself (see `serve_miniwob_request`) under
the fixed origin ``http://miniwob.local``; no HTTP server has to be started by hand.

Episode set-up follows ``browsergym/miniwob/base.py`` step by step -- remove the human
display, ``Math.seedrandom(seed)`` with the seed drawn from ``RandomState(seed)``,
``core.EPISODE_MAX_TIME``, ``core.startEpisodeReal()``, wait for ``WOB_TASK_READY`` --
so that the same seed gives the same task instance as BrowserGym. Rewards and done are
read from the page as BrowserGym's ``validate`` does: ``float(WOB_RAW_REWARD_GLOBAL > 0)``
and ``WOB_DONE_GLOBAL``.

An episode starts one of three ways (`StartMode`), the cheapest that gives what a freshly
loaded page gives:

- ``restart``: the task does not change; the episode restarts in the loaded page (re-seed +
  ``startEpisodeReal``, a few ms) after clearing what a fresh page would not have (focus,
  selection, scroll offsets, the pointer's position). Not for the tasks in `RELOAD_ON_RESET`.
- ``switch``: the page shows a MiniWoB document and the task changes (or is one of
  `RELOAD_ON_RESET`), to a task whose page shows no image files (106 of 125): the document is rewritten in place (``document.open`` / ``write`` /
  ``close``, the old task's timers and frames cancelled, the URL replaced in history) with the
  new task's page, its local scripts inlined. No navigation: no new document in Chromium's
  browser process, no request through Playwright's route, the shared scripts compiled once
  per renderer. The observation is the one a page load gives (tests/test_browser_all_tasks.py).
- ``load``: ``page.goto`` (a new page, a page that left MiniWoB, or ``fast_reset=False``).
"""

from __future__ import annotations

import importlib.util
import logging
import mimetypes
import posixpath
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import numpy as np

logger = logging.getLogger(__name__)

#: How an episode starts: in the loaded task's page, in a MiniWoB page rewritten, or by a page load.
StartMode = Literal["restart", "switch", "load"]

MINIWOB_HOST = "miniwob.local"
MINIWOB_ORIGIN = f"http://{MINIWOB_HOST}"
MINIWOB_BASE_URL = f"{MINIWOB_ORIGIN}/miniwob/"
#: BrowserGym's defaults for MiniWoB (``AbstractMiniwobTask.__init__``).
MINIWOB_VIEWPORT = {"width": 332, "height": 214}
MINIWOB_SCALE_FACTOR = 1.5  # BrowserGym's `page._bgym_scale_factor` for MiniWoB
EPISODE_MAX_TIME_MS = 1_000_000

#: HTML tasks shipped by `miniwob` that BrowserGym does not register (real-time tasks).
NOT_REGISTERED_BY_BROWSERGYM = frozenset(
    {"button-delay", "chase-circle", "hover-shape", "moving-items", "simon-says"}
)
#: Tasks whose own restart does not rebuild the page as loading it does, so they are reloaded on
#: every reset: jQuery UI widgets initialised again on kept elements (other classes: sortable items
#: lose ``ui-sortable-handle``, sliders reorder theirs), stock-market, which shows the last
#: episode's price until its timer ticks, and drag-cube, whose restart puts the cube back but keeps
#: its spin: a cube still turning from the last episode's drag turns on in the new one.
RELOAD_ON_RESET = frozenset(
    {
        "drag-items",
        "drag-items-grid",
        "drag-sort-numbers",
        "form-sequence",
        "use-slider",
        "use-slider-2",
        "stock-market",
        "drag-cube",
    }
)
#: Tasks BrowserGym marks ``nondeterministic = True``.
NONDETERMINISTIC_TASKS = frozenset({"click-pie", "click-pie-nodelay", "terminal", "visual-addition"})


@lru_cache(maxsize=1)
def html_root() -> Path:
    """The ``html`` folder of the installed `miniwob` package (found without importing it)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the MiniWoB++ pages come from PyPI's `miniwob` package: pip install 'envharness[browser]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "html"


@lru_cache(maxsize=1)
def all_tasks() -> tuple[str, ...]:
    """The 125 task names BrowserGym registers as ``browsergym/miniwob.<name>``, sorted."""
    names = {p.stem for p in (html_root() / "miniwob").glob("*.html")}
    return tuple(sorted(names - NOT_REGISTERED_BY_BROWSERGYM))


def check_task(task: str) -> str:
    """Return `task` (a name with or without BrowserGym's ``miniwob.`` prefix) or raise ValueError."""
    if not isinstance(task, str):
        raise ValueError(f"task must be a string, got {type(task).__name__}")
    name = task.removeprefix("browsergym/").removeprefix("miniwob.")
    if name not in all_tasks():
        close = [t for t in all_tasks() if name[:5] and t.startswith(name[:5])][:5]
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else "; see envharness.envs.browsergym.miniwob.all_tasks()"
        )
        raise ValueError(f"unknown MiniWoB task {task[:80]!r}{hint}")
    return name


def task_url(task: str) -> str:
    return f"{MINIWOB_BASE_URL}{task}.html"


def can_switch(url: str, task: str) -> bool:
    """Whether a page at `url` holds a MiniWoB task document that `switch_document` can rewrite
    into `task`'s page. Not for a page with images (19 tasks): in a rewritten document the images
    arrive after the load event, so the first observation could see an image missing that a
    loaded page shows."""
    if not url.startswith(MINIWOB_BASE_URL) or not url.endswith(".html"):
        return False
    return url[len(MINIWOB_BASE_URL) : -len(".html")] in all_tasks() and not _shows_images(task)


_IMAGE_FILE = re.compile(rb"\.(png|jpe?g|gif|svg)\b")


@lru_cache(maxsize=None)
def _shows_images(task: str) -> bool:
    found = _read_file(f"miniwob/{task}.html")
    return found is None or _IMAGE_FILE.search(found[0]) is not None


def episode_seed(seed: int | None) -> int:
    """The number passed to ``Math.seedrandom``, drawn exactly as BrowserGym's task does."""
    return int(np.random.RandomState(seed).randint(0, 1000000))


# -- serving the pages ------------------------------------------------------------------
@lru_cache(maxsize=512)
def _read_file(relative: str) -> tuple[bytes, str] | None:
    root = html_root().resolve()
    path = (root / relative).resolve()
    if root not in path.parents or not path.is_file():
        return None
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return path.read_bytes(), content_type


async def serve_miniwob_request(route: Any) -> None:
    """Answer a request to ``http://miniwob.local/...`` from the package's files (404 if absent)."""
    path = urlsplit(route.request.url).path.lstrip("/")
    found = _read_file(path)
    if found is None:
        await route.fulfill(status=404, body=f"not found: /{path}", content_type="text/plain")
    else:
        body, content_type = found
        await route.fulfill(status=200, body=body, content_type=content_type)


_LOCAL_SCRIPT = re.compile(r'<script src="(\.\./[^"]+\.js)"></script>')


def _decode_as_browser(data: bytes) -> str:
    """Text as Chromium reads these files: UTF-8 after a byte-order mark; otherwise, as no charset
    is declared, windows-1252 as WHATWG defines it (cp1252, the five bytes it leaves undefined
    kept as C1 controls)."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    return data.decode("latin-1").translate(_WINDOWS_1252)


_WINDOWS_1252 = {
    b: bytes([b]).decode("cp1252") for b in range(0x80, 0xA0) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


@lru_cache(maxsize=None)
def inlined_page(task: str) -> str:
    """The task's HTML with its local scripts inlined, for `switch_document`: the page parses
    and runs them at once, with no request (so no wait in Playwright's route, no event turn)."""
    found = _read_file(f"miniwob/{task}.html")
    if found is None:
        raise ValueError(f"no page for MiniWoB task {task!r}")

    def inline(match: re.Match) -> str:
        script = _read_file(posixpath.normpath(f"miniwob/{match.group(1)}"))
        if script is None:
            return match.group(0)
        return "<script>" + _decode_as_browser(script[0]).replace("</script", "<\\/script") + "</script>"

    return _LOCAL_SCRIPT.sub(inline, _decode_as_browser(found[0]))


# Rewrite the document in place with another task's page: what a page load would end stops first
# (timers, animation frames; `document.open` removes the document's and window's listeners), and
# the URL becomes the task's before `document.open`, which gives the new document that URL.
_SWITCH_DOCUMENT_JS = r"""async ([html, url]) => {
  const lastTimer = setTimeout(() => {}, 0);
  for (let id = window.__envharnessClearedTimers || 0; id <= lastTimer; id++) clearTimeout(id);
  window.__envharnessClearedTimers = lastTimer + 1;
  const lastFrame = requestAnimationFrame(() => {});
  for (let id = window.__envharnessClearedFrames || 0; id <= lastFrame; id++) cancelAnimationFrame(id);
  window.__envharnessClearedFrames = lastFrame + 1;
  history.replaceState(null, '', url);
  document.open();
  document.write(html);
  // The load event comes as a task of its own, after the images: it runs the page's `onload`
  // (registered while the document was written), then this listener.
  const loaded = new Promise((resolve, reject) => {
    window.addEventListener('load', resolve, {once: true});
    setTimeout(() => reject(new Error('no load event within 10 s')), 10000);
  });
  document.close();
  document.documentElement.getBoundingClientRect();  // lay out now: the images it needs hold the load event back
  await loaded;
}"""


async def switch_document(page: Any, task: str) -> bool:
    """Make `page` (a MiniWoB document) show `task`'s page without loading it; False when the page
    would not (its document is not what `can_switch` took it for), so the caller loads it."""
    try:
        await page.evaluate(_SWITCH_DOCUMENT_JS, [inlined_page(task), task_url(task)])
        return page.url == task_url(task)
    except Exception as e:
        if page.is_closed():
            raise
        logger.debug("switching to %s in place failed (%s); loading the page", task, e)
        return False


# -- episode set-up (JavaScript from browsergym/miniwob/base.py and all.py) -------------
_REMOVE_HUMAN_DISPLAY_JS = r"""
let __display_ids = ['reward-display', 'click-canvas', 'sync-task-cover'];
let __display_divs = {};
let __query_div_hidden_copy = null;

removeDisplay = function() {
  core.clearTimer();
  document.body.removeEventListener('click', core.canvasDrawClick);
  __query_div_hidden_copy = document.getElementById('query').cloneNode(true);
  document.getElementById('query').innerHTML = '';
  for (i in __display_ids) {
    elem_id = __display_ids[i];
    elem = document.getElementById(elem_id);
    elem.remove();
    __display_divs[elem_id] = elem;
  }
};

bringBackDisplay = function() {
  document.getElementById('query').innerHTML = __query_div_hidden_copy.innerHTML;
  for (var elem_id in __display_divs){
    document.body.appendChild(__display_divs[elem_id]);
  }
  core.createDisplay();
};

core.endEpisode_legacy = core.endEpisode;
core.startEpisodeReal_legacy = core.startEpisodeReal;
core.getUtterance_legacy = core.getUtterance;

core.getUtterance = function () {
  bringBackDisplay();
  utterance = core.getUtterance_legacy();
  removeDisplay();
  return utterance;
};

core.endEpisode = function(reward, time_proportional, reason){
  bringBackDisplay();
  core.endEpisode_legacy(reward, time_proportional, reason);
  removeDisplay();
};

core.startEpisodeReal = function() {
  bringBackDisplay();
  core.startEpisodeReal_legacy();
  removeDisplay();
};

removeDisplay();
"""

#: Tasks whose goal text BrowserGym recovers with its own ``getUtterance`` (all.py).
_GOAL_OVERRIDES = {
    "click-menu-2": r"""core.getUtterance_legacy = function () {
    query_div = document.getElementById('query');
    if (query_div.children.length > 0) {
        utterance = '';
        utterance = utterance + query_div.childNodes[0].textContent.replace(/\s+/g, ' ').trim();
        utterance = utterance + ' "' + query_div.children[0].getAttribute('class').split(' ')[1] + '"';
        utterance = utterance + ' ' + query_div.childNodes[2].textContent.replace(/\s+/g, ' ').trim();
    }
    else {
        utterance = query_div.textContent.replace(/\s+/g, ' ').trim();
    }
    return utterance;
};""",
    "use-colorwheel-2": r"""core.getUtterance_legacy = function () {
    const rgb2hex = (rgb) => `#${rgb.match(/^rgb\((\d+),\s*(\d+),\s*(\d+)\)$/).slice(1).map(n => parseInt(n, 10).toString(16).padStart(2, '0')).join('')}`;
    query_div = document.getElementById('query');
    utterance = '';
    utterance = utterance + query_div.children[0].textContent.replace(/\s+/g, ' ').trim();
    utterance = utterance + ' ' + rgb2hex(query_div.children[1].style.backgroundColor);
    utterance = utterance + ' ' + query_div.children[2].textContent.replace(/\s+/g, ' ').trim();
    return utterance;
};""",
}

# Seed, start, wait for WOB_TASK_READY (BrowserGym: `wait_for_function`), then read the goal.
_START_EPISODE_JS = r"""async ([seed, maxTime]) => {
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
  const t0 = Date.now();
  while (!WOB_TASK_READY) {
    if (Date.now() - t0 > 10000) throw new Error('MiniWoB task did not become ready within 10 s');
    await new Promise(r => setTimeout(r, 5));
  }
  const goal = core.getUtterance();
  return (goal !== null && typeof goal === 'object') ? goal.utterance : goal;
}"""

# Before an in-place restart: leave no focus, selection or scroll offset behind that a freshly
# loaded page would not have (BrowserGym's every reset is a fresh page).
_CLEAR_PAGE_STATE_JS = r"""() => {
  if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
  const selection = window.getSelection();
  if (selection) selection.removeAllRanges();
  for (const el of document.querySelectorAll('*')) {
    if (el.scrollTop) el.scrollTop = 0;
    if (el.scrollLeft) el.scrollLeft = 0;
  }
  window.scrollTo(0, 0);
}"""

_STATUS_JS = """() => [WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON, WOB_DONE_GLOBAL,
                   WOB_EPISODE_ID, WOB_TASK_READY, document.readyState !== 'loading']"""


async def start_episode(
    page: Any,
    task: str,
    seed: int | None,
    *,
    start: StartMode,
    episode_max_time_ms: int = EPISODE_MAX_TIME_MS,
) -> str:
    """Start an episode of `task` in `page` and return its goal text.

    ``start="restart"`` is only valid when `page` already holds `task`; ``"switch"`` when
    `can_switch(page.url, task)` (it falls back to a page load if the rewrite fails).
    """
    if start != "restart":
        if start == "switch":  # as for a restart: no pointer over the new page, nothing hovered
            await page.mouse.move(-1, -1)
        if start == "load" or not await switch_document(page, task):
            await page.goto(task_url(task))
        await page.evaluate(_REMOVE_HUMAN_DISPLAY_JS + _GOAL_OVERRIDES.get(task, "") + "\n'';")
    else:  # a fresh page has had no pointer over it: move it off the page, so nothing new is hovered
        await page.mouse.move(-1, -1)
        await page.evaluate(_CLEAR_PAGE_STATE_JS)
    page._bgym_scale_factor = MINIWOB_SCALE_FACTOR  # read by coordinate actions and observations
    goal = await page.evaluate(_START_EPISODE_JS, [episode_seed(seed), episode_max_time_ms])
    return str(goal or "")


@dataclass(frozen=True)
class TaskStatus:
    """What BrowserGym's ``validate`` returns for MiniWoB: reward, done, and the raw globals."""

    reward: float
    done: bool
    info: dict[str, Any]
    ready: bool = True  # False: the page's document is still loading (its DOM is not complete)


async def task_status(page: Any, task: str) -> TaskStatus:
    """Reward and done as ``AbstractMiniwobTask.validate``: leaving the task page ends the episode."""
    if page.url != task_url(task):
        return TaskStatus(0.0, True, {"error": "invalid url, terminating task"}, ready=False)
    *values, ready = await page.evaluate(_STATUS_JS)
    keys = ("REWARD_GLOBAL", "RAW_REWARD_GLOBAL", "REWARD_REASON", "DONE_GLOBAL", "EPISODE_ID", "TASK_READY")
    info = dict(zip(keys, values))
    return TaskStatus(
        float(info["RAW_REWARD_GLOBAL"] > 0), bool(info["DONE_GLOBAL"]), info, ready=bool(ready)
    )
