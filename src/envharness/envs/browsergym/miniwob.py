"""MiniWoB++ tasks: the 125 that BrowserGym registers, served from PyPI `miniwob`'s HTML.

The pages are served by the browser context itself (`miniwob_pages.py`) under the fixed
origin ``http://miniwob.local``; no HTTP server has to be started by hand.

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
  selection, scroll offsets, the pointer's position, MiniWoB's count of episodes done and its
  reward history). Not for the tasks in `RELOAD_ON_RESET`.
- ``switch``: the page shows a MiniWoB document and the task changes (or is one of
  `RELOAD_ON_RESET`), to a task whose page shows no image files (106 of 125): the document is rewritten in place (``document.open`` / ``write`` /
  ``close``, the old task's timers and frames cancelled, the URL replaced in history) with the
  new task's page, its local scripts inlined. No navigation: no new document in Chromium's
  browser process, no request through Playwright's route, the shared scripts compiled once
  per renderer. The observation is the one envharness's own page load gives, part by part, for
  103 of the 106 (the 3 pages that change by themselves are compared by their goal only; the 19
  with images are loaded, not switched): tests/test_browser_all_tasks.py.
- ``load``: ``page.goto`` (a new page, a page that left MiniWoB, or ``fast_reset=False``).

In a page that had an episode, every start also gives the page the focus back and leaves no
starting point for Tab (`_CLEAR_PAGE_STATE_JS`), and the environment first releases the keys and
buttons the last episode's actions held (`executor.release_held`): a fresh page has none of them.
tests/test_browser_switch_differential.py compares such starts with BrowserGym's after random actions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from envharness.core.environment import InvalidOptions
from envharness.envs.browsergym.miniwob_pages import (
    html_root,
    shows_images,
    switch_document,
)

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
#: lose ``ui-sortable-handle``, sliders reorder theirs, an autocomplete adds its "No search
#: results." to the last one's), fields the task's restart does not clear (the last episode's text
#: or number stays in them), stock-market, which shows the last episode's price until its timer
#: ticks, and drag-cube, whose restart puts the cube back but keeps its spin: a cube still turning
#: from the last episode's drag turns on in the new one.
RELOAD_ON_RESET = frozenset(
    {
        "drag-items",
        "drag-items-grid",
        "drag-sort-numbers",
        "form-sequence",
        "use-slider",
        "use-slider-2",
        "book-flight",
        "book-flight-nodelay",
        "use-autocomplete",
        "use-autocomplete-nodelay",
        "focus-text-2",
        "scroll-text",
        "scroll-text-2",
        "use-spinner",
        "use-colorwheel",
        "use-colorwheel-2",
        "stock-market",
        "drag-cube",
    }
)
#: Tasks whose page changes with the clock, and how: the same seed and actions start the same
#: episode, but a step observes whatever the clock has made of it by then (BrowserGym's too).
CLOCK_DRIVEN_TASKS = {
    "stock-market": "its price moves every 100 ms, so what a step sees depends on when it is taken",
    "terminal": "its caret blinks every 800 ms (and it shows today's date)",
    "click-pie": "its wheel animates as it opens (BrowserGym marks it nondeterministic)",
}
#: Tasks BrowserGym marks ``nondeterministic = True``.
NONDETERMINISTIC_TASKS = frozenset({"click-pie", "click-pie-nodelay", "terminal", "visual-addition"})


@lru_cache(maxsize=1)
def all_tasks() -> tuple[str, ...]:
    """The 125 task names BrowserGym registers as ``browsergym/miniwob.<name>``, sorted."""
    names = {p.stem for p in (html_root() / "miniwob").glob("*.html")}
    return tuple(sorted(names - NOT_REGISTERED_BY_BROWSERGYM))


def check_task(task: str) -> str:
    """Return `task` (a name with or without BrowserGym's ``miniwob.`` prefix) or raise ValueError."""
    if not isinstance(task, str):
        raise InvalidOptions(f"task must be a string, got {type(task).__name__}")
    name = task.removeprefix("browsergym/").removeprefix("miniwob.")
    if name not in all_tasks():
        close = [t for t in all_tasks() if name[:5] and t.startswith(name[:5])][:5]
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else "; see envharness.envs.browsergym.miniwob.all_tasks()"
        )
        raise InvalidOptions(f"unknown MiniWoB task {task[:80]!r}{hint}")
    return name


def task_url(task: str) -> str:
    return f"{MINIWOB_BASE_URL}{task}.html"


def can_switch(task: str, url: str) -> bool:
    """Whether a page at `url` holds a MiniWoB task document that can be rewritten in place into
    `task`'s page (`miniwob_pages.switch_document`); not for a task whose page shows images."""
    if not url.startswith(MINIWOB_BASE_URL) or not url.endswith(".html"):
        return False
    return url[len(MINIWOB_BASE_URL) : -len(".html")] in all_tasks() and not shows_images(task)


def episode_seed(seed: int | None) -> int:
    """The number passed to ``Math.seedrandom``, drawn exactly as BrowserGym's task does."""
    return int(np.random.RandomState(seed).randint(0, 1000000))


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

# Before every episode: leave nothing behind that a freshly loaded page would not have (BrowserGym's
# every reset is a fresh page): the page has the focus (a Tab past the last element, or Shift+Tab
# past the first, takes it to the browser, and neither a rewrite nor a page load gives it back); no
# element is focused and Tab goes to the first element (a focused or clicked element, even one a
# rewrite removed, would be the point it goes on from: the body, focused a moment and blurred,
# becomes that point); no selection, no scroll offsets.
_CLEAR_PAGE_STATE_JS = r"""() => {
  window.focus();
  const body = document.body;
  if (body) {
    const tabIndex = body.getAttribute('tabindex');
    body.tabIndex = -1;
    body.focus({preventScroll: true});
    if (tabIndex === null) body.removeAttribute('tabindex'); else body.setAttribute('tabindex', tabIndex);
  }
  if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
  if (document.activeElement === body && body) body.blur();
  const selection = window.getSelection();
  if (selection) selection.removeAllRanges();
  for (const el of document.querySelectorAll('*')) {
    if (el.scrollTop) el.scrollTop = 0;
    if (el.scrollLeft) el.scrollLeft = 0;
  }
  window.scrollTo(0, 0);
}"""

# Before a restart in place: what the last episodes left in the page's own counters, which a page
# load starts from zero: the count of episodes done (BrowserGym's ``task_info.EPISODE_ID``, 0 after
# its every reset, a fresh page), the reward history, and the reward display that shows them (taken
# out of the page by `_REMOVE_HUMAN_DISPLAY_JS`, brought back for each start and goal).
_FORGET_EPISODES_JS = r"""
WOB_EPISODE_ID = 0;
delete core.wob_latest;
delete core.wob_scores;
bringBackDisplay();
document.getElementById('reward-display').innerHTML = core.DISPLAY_HTML;
removeDisplay();
"""

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
    `can_switch(task, page.url)` (it falls back to a page load if the rewrite fails). Both expect
    the pointer off the page (``page.mouse.move(-1, -1)``: a fresh page has had none over it).
    How it did start is left in ``page._envharness_started`` (a fallback says ``"load"``).
    """
    if start == "switch" and not await switch_document(page, task, task_url(task)):
        start = "load"
    if start == "load":
        await page.goto(task_url(task))
    page._envharness_started = start
    # What the page runs before the episode starts, and the start, in one call: BrowserGym's set-up
    # after a load, or the clean-up before a restart in place.
    before = f"({_CLEAR_PAGE_STATE_JS})();" + (
        _FORGET_EPISODES_JS
        if start == "restart"
        else _REMOVE_HUMAN_DISPLAY_JS + _GOAL_OVERRIDES.get(task, "")
    )
    args = json.dumps([episode_seed(seed), int(episode_max_time_ms)])
    page._bgym_scale_factor = MINIWOB_SCALE_FACTOR  # read by coordinate actions and observations
    goal = await page.evaluate(f"{before}\n({_START_EPISODE_JS})({args});")
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
