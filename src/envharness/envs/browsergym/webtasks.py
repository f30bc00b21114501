"""Your own web tasks: a page, a goal, a reward; played on the same fast engine as MiniWoB.

A task set is a Python module with a list of `WebTask`s (``TASKS``)::

    TASKS = [WebTask(name="greet", page="greet.html", goal="Type {name} and press Send",
                     params=lambda rng: {"name": rng.choice(["Ada", "Alan"])},
                     reward=lambda s: (float(s.data["sent"] == s.params["name"]), True) if s.data else 0.0)]

and ``envharness serve browsergym --option tasks=mypkg.mytasks`` (or ``mypkg.mytasks:TASKS``)
serves it; eval and train take ``--env-option tasks=mypkg.mytasks``.

- The page: a file or folder (``index.html``) under the module's folder (or its ``ROOT``),
  served by the browser context at ``http://webtasks.local/...`` (no HTTP server to run), or
  an ``http(s)://`` URL, loaded as it is (its host is allowed for the session's browser).
- The seed: ``params(random.Random(seed))`` picks the episode's variation (a dict of JSON
  values); the goal is formatted with it; the page gets it as query parameters (``?name=Ada&seed=3``,
  lists and dicts as JSON), so the same seed gives the same episode.
- The reward: a Python function of `PageState` (URL, text, form fields by id/name, whatever the
  page put in ``window.WEBTASK_STATE``, the episode's params) or a JS check (an expression in
  which ``params`` and ``seed`` are bound, evaluated in the page). Either returns a number
  (done when it is > 0), ``(reward, done)`` or ``{reward, done, info}``.
- ``solve(goal, axtree_txt) -> action | None``: optional scripted solution (`--model scripted`).
"""

from __future__ import annotations

import importlib
import json
import math
import mimetypes
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlencode, urlsplit

from envharness.core.environment import InvalidOptions
from envharness.core.registry import cwd_import_allowed
from envharness.envs.browsergym.solutions import Node, parse_axtree
from envharness.envs.browsergym.task_set import RouteHandler, TaskStatus

WEBTASKS_HOST = "webtasks.local"
WEBTASKS_ORIGIN = f"http://{WEBTASKS_HOST}"
DEFAULT_VIEWPORT = {"width": 800, "height": 600}
#: What a reward function or JS check may return.
Reward = float | int | bool | None | Sequence[Any] | Mapping[str, Any]
_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*$")


class WebTaskError(RuntimeError):
    """A task's own code failed (its goal, reward function or JS check): the message says which."""


class TaskPageError(RuntimeError):
    """A task's page did not load (timeout, HTTP error, blocked host)."""


@dataclass(frozen=True)
class PageState:
    """What a Python reward function sees of the page after each step."""

    url: str
    title: str
    text: str  # document.body.innerText
    #: Form controls by id (else name): text value; checkboxes True/False; radio groups by name: the checked value.
    fields: dict[str, Any]
    #: ``window.WEBTASK_STATE`` (whatever the page reported, as JSON), None when unset.
    data: Any
    params: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class WebTask:
    """One task: a page, a goal (formatted with the seed's params), and a reward."""

    name: str
    page: str
    goal: str | Callable[[dict[str, Any]], str]
    params: Callable[[random.Random], dict[str, Any]] | None = None
    reward: Callable[[PageState], Reward] | None = None
    js_check: str | None = None
    solve: Callable[[str, str], str | None] | None = None
    #: Split names this task belongs to (``--tasks NAME`` takes the split).
    splits: tuple[str, ...] = ()
    load_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"WebTask name must be letters, digits, '-', '_' or '.', got {self.name!r}")
        if (self.reward is None) == (self.js_check is None):
            raise ValueError(
                f"WebTask {self.name!r}: give exactly one of reward= (a Python function) and js_check= (JS)"
            )
        if not isinstance(self.page, str) or not self.page:
            raise ValueError(f"WebTask {self.name!r}: page must be a file, folder or http(s) URL")

    def variation(self, seed: int) -> dict[str, Any]:
        """The seed's params (the same seed, the same params)."""
        params = self.params(random.Random(seed)) if self.params else {}
        if not isinstance(params, dict):
            raise WebTaskError(f"task {self.name!r}: params() returned {type(params).__name__}, not a dict")
        return params

    def goal_text(self, params: dict[str, Any]) -> str:
        return self.goal(params) if callable(self.goal) else self.goal.format(**params)

    @property
    def is_url(self) -> bool:
        return self.page.startswith(("http://", "https://"))


@dataclass
class _Episode:
    task: WebTask
    seed: int
    params: dict[str, Any]


class WebTaskSet:
    """A list of `WebTask`s as a `TaskSet`: pages served from `root`, rewards read after each step."""

    def __init__(
        self, name: str, tasks: Sequence[WebTask], root: Path, *, viewport: dict[str, int] | None = None
    ) -> None:
        self.name = name
        self.root = root.resolve()
        self.viewport = dict(viewport or DEFAULT_VIEWPORT)
        self._tasks: dict[str, WebTask] = {}
        for task in tasks:
            if not isinstance(task, WebTask):
                raise ValueError(f"tasks={name}: {task!r} is not a WebTask")
            if task.name in self._tasks:
                raise ValueError(f"tasks={name}: two tasks are named {task.name!r}")
            if not task.is_url:
                self._local_file(task)  # a missing page fails now, not at the first reset
            self._tasks[task.name] = task
        if not self._tasks:
            raise ValueError(f"tasks={name}: the task list is empty")
        self.served: Mapping[str, RouteHandler] = {WEBTASKS_HOST: self.serve}
        self.hosts = tuple(sorted({urlsplit(t.page).hostname or "" for t in tasks if t.is_url} - {""}))

    # -- listing --------------------------------------------------------------------------
    def all_tasks(self) -> tuple[str, ...]:
        return tuple(self._tasks)

    def splits(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for task in self._tasks.values():
            for split in task.splits:
                out.setdefault(split, []).append(task.name)
        return {k: tuple(v) for k, v in out.items()}

    def default_tasks(self) -> tuple[str, ...]:
        return self.all_tasks()

    def check_task(self, task: str) -> str:
        if not isinstance(task, str):
            raise InvalidOptions(f"task must be a string, got {type(task).__name__}")
        if task not in self._tasks:
            raise InvalidOptions(
                f"unknown task {task[:80]!r} in web tasks {self.name}; choose from {', '.join(self._tasks)}"
            )
        return task

    def task(self, name: str) -> WebTask:
        return self._tasks[self.check_task(name)]

    # -- pages ----------------------------------------------------------------------------
    def _local_file(self, task: WebTask) -> Path:
        path = (self.root / task.page).resolve()
        if path.is_dir():
            path = path / "index.html"
        if (self.root != path and self.root not in path.parents) or not path.is_file():
            raise ValueError(
                f"tasks={self.name}: task {task.name!r}: page {task.page!r} is not a file "
                f"(or a folder with index.html) under {self.root}"
            )
        return path

    def page_url(self, task: WebTask, seed: int, params: dict[str, Any]) -> str:
        """The page with the episode's params (and seed) as query parameters."""
        base = (
            task.page
            if task.is_url
            else f"{WEBTASKS_ORIGIN}/{self._local_file(task).relative_to(self.root).as_posix()}"
        )
        query = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
        query.setdefault("seed", str(seed))
        return f"{base}{'&' if '?' in base else '?'}{urlencode(query)}"

    async def serve(self, route: Any) -> None:
        """Answer a request to ``http://webtasks.local/...`` from files under `root` (404 if absent)."""
        relative = urlsplit(route.request.url).path.lstrip("/")
        path = (self.root / relative).resolve()
        if path.is_dir():
            path = path / "index.html"
        if self.root not in path.parents or not path.is_file():
            await route.fulfill(status=404, body=f"not found: /{relative}", content_type="text/plain")
            return
        content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        await route.fulfill(status=200, body=path.read_bytes(), content_type=content_type)

    # -- episodes ---------------------------------------------------------------------------
    def can_restart(self, task: str, url: str) -> bool:
        return False  # every episode loads its page afresh: the seed's params are in its URL

    def can_switch(self, task: str, url: str) -> bool:
        return False

    async def start_episode(
        self, page: Any, task: str, seed: int | None, *, start: str = "load", episode_max_time_ms: int = 0
    ) -> str:
        web_task = self.task(task)
        seed = random.randrange(2**31) if seed is None else seed
        try:
            params = web_task.variation(seed)
            goal = web_task.goal_text(params)
        except WebTaskError:
            raise
        except Exception as e:
            raise WebTaskError(f"task {task!r}: its params or goal raised {type(e).__name__}: {e}") from e
        url = self.page_url(web_task, seed, params)
        try:
            response = await page.goto(url, timeout=web_task.load_timeout_s * 1000)
        except Exception as e:
            reason = str(e).split("\n", 1)[0][:300]
            raise TaskPageError(
                f"task {task!r}: its page {url} did not load within {web_task.load_timeout_s:g} s: {reason}"
            ) from e
        if response is not None and response.status >= 400:
            raise TaskPageError(f"task {task!r}: its page {url} answered HTTP {response.status}")
        page._bgym_scale_factor = 1.0
        page._webtask_episode = _Episode(web_task, seed, params)
        return goal

    async def task_status(self, page: Any, task: str) -> TaskStatus:
        episode: _Episode | None = getattr(page, "_webtask_episode", None)
        if episode is None or episode.task.name != task:
            return TaskStatus(0.0, True, {"error": "the task's page is gone"}, ready=False)
        try:
            if episode.task.js_check is not None:
                value, ready = await page.evaluate(
                    _js_check_function(episode.task.js_check),
                    {"params": episode.params, "seed": episode.seed},
                )
                source = "JS check"
            else:
                snapshot = await page.evaluate(_SNAPSHOT_JS)
                ready = snapshot.pop("ready")
                state = PageState(params=episode.params, seed=episode.seed, **snapshot)
                source = "reward function"
                value = episode.task.reward(state)  # type: ignore[misc]
        except Exception as e:
            if _navigating(e):  # the page is between documents: read again once it has loaded
                return TaskStatus(0.0, False, {}, ready=False)
            raise WebTaskError(
                f"task {task!r}: its {'JS check' if episode.task.js_check else 'reward function'} "
                f"raised {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            ) from e
        reward, done, info = _as_status(value, task, source)
        return TaskStatus(reward, done, info, ready=bool(ready))

    def solve(self, goal: str, axtree_txt: str) -> str | None:
        """The first task solution that answers this goal (each returns None for goals not its own)."""
        for task in self._tasks.values():
            if task.solve is None:
                continue
            try:
                action = task.solve(goal, axtree_txt)
            except Exception as e:  # the scripted policy answers ValueError with its fallback move
                raise ValueError(f"task {task.name!r}: its solve() raised {type(e).__name__}: {e}") from e
            if action:
                return action
        return None


def find_nodes(
    axtree_txt: str, role: str | tuple[str, ...], name: str | None = None, **props: Any
) -> list[Node]:
    """Elements of BrowserGym's AXTree text (those with a bid) by role, name and properties
    (``checked="true"``, ``selected=True``): what a scripted `solve` reads the page with."""
    roles = (role,) if isinstance(role, str) else role
    wanted = {k: str(v) for k, v in props.items()}
    return [
        n
        for n in parse_axtree(axtree_txt)
        if n.bid
        and n.role in roles
        and (name is None or n.name == name)
        and all(n.prop(k) == v for k, v in wanted.items())
    ]


def _js_check_function(expression: str) -> str:
    return (
        "async ({params, seed}) => { const ready = document.readyState !== 'loading';\n"
        f"return [await ({expression}\n), ready]; }}"
    )


_SNAPSHOT_JS = r"""() => {
  const fields = {};
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'radio') {
      if (!el.name) continue;
      if (el.checked) fields[el.name] = el.value; else if (!(el.name in fields)) fields[el.name] = null;
      continue;
    }
    const key = el.id || el.name;
    if (!key) continue;
    if (el.type === 'checkbox') fields[key] = el.checked;
    else if (el.tagName === 'SELECT' && el.multiple) fields[key] = [...el.selectedOptions].map(o => o.value);
    else fields[key] = el.value;
  }
  let data = null;
  try { data = window.WEBTASK_STATE === undefined ? null : JSON.parse(JSON.stringify(window.WEBTASK_STATE)); } catch (e) {}
  return {url: location.href, title: document.title, text: document.body ? document.body.innerText : '',
          fields, data, ready: document.readyState !== 'loading'};
}"""


def _navigating(error: BaseException) -> bool:
    text = str(error)
    return "Execution context was destroyed" in text or "Cannot find context with specified id" in text


def _as_status(value: Any, task: str, source: str) -> tuple[float, bool, dict[str, Any]]:
    """A check's answer as (reward, done, info): a number (done when > 0), (reward, done) or a mapping."""
    info: dict[str, Any] = {}
    try:
        if value is None:
            reward, done = 0.0, False
        elif isinstance(value, Mapping):
            reward = float(value.get("reward", 0.0) or 0.0)
            done = bool(value["done"]) if "done" in value else reward > 0
            info = dict(value.get("info") or {})
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            reward, done = float(value[0]), bool(value[1])
        elif isinstance(value, (int, float)):
            reward = float(value)
            done = reward > 0
        else:
            raise TypeError
        if not math.isfinite(reward):
            raise TypeError
    except (TypeError, ValueError, KeyError):
        raise WebTaskError(
            f"task {task!r}: its {source} returned {value!r:.100}; return a number, "
            "(reward, done) or {reward, done}"
        ) from None
    return reward, done, info


# -- loading a task set by module path ------------------------------------------------------------
def load_web_tasks(spec: str) -> WebTaskSet:
    """``module.path`` (its ``TASKS``) or ``module.path:attribute``: a list of `WebTask`s, a
    `WebTaskSet`, or a function returning either. The module may set ``ROOT`` (the folder its
    pages are served from; default: the module's own folder) and ``VIEWPORT``."""
    module_name, _, attribute = spec.partition(":")
    try:
        module = _import_here_too(module_name)
    except Exception as e:
        raise ValueError(
            f"tasks={spec}: cannot import {module_name!r} ({type(e).__name__}: {e}); "
            "is it in the current folder or on PYTHONPATH?"
        ) from e
    attribute = attribute or "TASKS"
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"tasks={spec}: module {module_name!r} has no {attribute} (a list of WebTask)")
        value = getattr(value, part)
    if callable(value) and not isinstance(value, WebTaskSet):
        value = value()
    if isinstance(value, WebTaskSet):
        return value
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"tasks={spec}: {attribute} is a {type(value).__name__}, not a list of WebTask")
    return WebTaskSet(spec, value, _root(module), viewport=getattr(module, "VIEWPORT", None))


def _import_here_too(module_name: str) -> ModuleType:
    """Import `module_name`, also from the current folder (the `envharness` script's path lacks it)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        here = str(Path.cwd())
        if (
            e.name != module_name.split(".")[0]
            or here in sys.path
            or "" in sys.path
            or not cwd_import_allowed()
        ):
            raise
    sys.path.append(here)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(here)


def _root(module: ModuleType) -> Path:
    root = getattr(module, "ROOT", None)
    if root is not None:
        return Path(root)
    if getattr(module, "__file__", None):
        return Path(module.__file__).parent  # type: ignore[arg-type]
    return Path.cwd()


__all__ = [
    "DEFAULT_VIEWPORT",
    "Node",
    "PageState",
    "find_nodes",
    "parse_axtree",
    "Reward",
    "TaskPageError",
    "WEBTASKS_HOST",
    "WEBTASKS_ORIGIN",
    "WebTask",
    "WebTaskError",
    "WebTaskSet",
    "load_web_tasks",
]
