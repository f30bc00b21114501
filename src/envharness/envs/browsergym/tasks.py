"""Where the browser's tasks come from: a `TaskSet` (MiniWoB++, or the user's own web tasks).

`BrowserGymEnvironment` plays any task set through the same engine, observation builder and
action executor; what differs between sets is only what this interface names: which tasks
there are (and their splits), which origin's pages the browser context serves itself, how an
episode starts in a page (-> its goal) and how its reward and done are read from the page.

The server option ``tasks`` chooses the set: ``miniwob`` (the default) or a module path of
the user's web tasks (``mypkg.webtasks`` or ``mypkg.webtasks:TASKS``, see `webtasks.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from envharness.envs.browsergym import miniwob, miniwob_pages
from envharness.envs.browsergym.solutions import solve as solve_miniwob
from envharness.envs.browsergym.task_set import RouteHandler, TaskSet, TaskStatus
from envharness.envs.browsergym.webtasks import load_web_tasks

MINIWOB = "miniwob"
#: A small MiniWoB++ set: clicking, typing, forms; all solved by the scripted policy.
MINIWOB_DEFAULT_TASKS = (
    "click-test",
    "click-button",
    "click-checkboxes",
    "click-dialog",
    "focus-text",
    "enter-text",
    "enter-password",
    "login-user",
)


class MiniWoBTaskSet:
    """The 125 MiniWoB++ tasks BrowserGym registers (`miniwob.py`), served from ``miniwob.local``."""

    name = MINIWOB
    viewport = miniwob.MINIWOB_VIEWPORT
    served: Mapping[str, RouteHandler] = {miniwob.MINIWOB_HOST: miniwob_pages.serve_miniwob_request}
    hosts: tuple[str, ...] = ()

    def all_tasks(self) -> tuple[str, ...]:
        return miniwob.all_tasks()

    def splits(self) -> dict[str, tuple[str, ...]]:
        return {"default": MINIWOB_DEFAULT_TASKS}

    def default_tasks(self) -> tuple[str, ...]:
        return MINIWOB_DEFAULT_TASKS

    def check_task(self, task: str) -> str:
        return miniwob.check_task(task)

    def can_restart(self, task: str, url: str) -> bool:
        return task not in miniwob.RELOAD_ON_RESET and url == miniwob.task_url(task)

    def can_switch(self, task: str, url: str) -> bool:
        return miniwob.can_switch(task, url)

    async def start_episode(
        self,
        page: Any,
        task: str,
        seed: int | None,
        *,
        start: miniwob.StartMode,
        episode_max_time_ms: int = miniwob.EPISODE_MAX_TIME_MS,
    ) -> str:
        return await miniwob.start_episode(
            page, task, seed, start=start, episode_max_time_ms=episode_max_time_ms
        )

    async def task_status(self, page: Any, task: str) -> TaskStatus:
        return await miniwob.task_status(page, task)

    def solve(self, goal: str, axtree_txt: str) -> str | None:
        return solve_miniwob(goal, axtree_txt)


MINIWOB_TASKS = MiniWoBTaskSet()


def load_task_set(spec: str | None = None) -> TaskSet:
    """The task set ``tasks=spec`` names: MiniWoB for None/``miniwob``, else the user's web
    tasks at a module path (ValueError saying why when they cannot be loaded)."""
    if spec is None or spec == MINIWOB:
        return MINIWOB_TASKS
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"tasks must be 'miniwob' or a module path of web tasks, got {spec!r}")
    return _load_web_tasks(spec.strip())


@lru_cache(maxsize=32)
def _load_web_tasks(spec: str) -> TaskSet:
    return load_web_tasks(spec)


__all__ = [
    "MINIWOB",
    "MINIWOB_DEFAULT_TASKS",
    "MINIWOB_TASKS",
    "MiniWoBTaskSet",
    "RouteHandler",
    "TaskSet",
    "TaskStatus",
    "load_task_set",
]
