"""What the browser environment needs to know about a set of tasks (MiniWoB's, or the user's
web tasks): the `TaskSet` protocol both implement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from envharness.envs.browsergym.miniwob import StartMode, TaskStatus

#: A context-wide route handler answering requests to one host from files.
RouteHandler = Callable[[Any], Awaitable[None]]


@runtime_checkable
class TaskSet(Protocol):
    """What the environment needs to know about a set of tasks."""

    #: The ``tasks=`` value that names this set (``miniwob``, or a module path).
    name: str
    #: Default viewport of its pages (``viewport=`` overrides it).
    viewport: dict[str, int]
    #: Hosts whose requests the browser context answers itself, with their handlers.
    served: Mapping[str, RouteHandler]
    #: Other hosts its pages need (URL tasks): allowed in the engine with `allowed_hosts`.
    hosts: tuple[str, ...]

    def all_tasks(self) -> tuple[str, ...]: ...
    def splits(self) -> dict[str, tuple[str, ...]]: ...
    def default_tasks(self) -> tuple[str, ...]: ...
    def check_task(self, task: str) -> str: ...
    def can_restart(self, task: str, url: str) -> bool:
        """Whether the page at `url`, which shows `task`, can restart its episode in place."""

    def can_switch(self, task: str, url: str) -> bool:
        """Whether the page at `url` can be made to show `task` without a page load."""

    async def start_episode(
        self, page: Any, task: str, seed: int | None, *, start: StartMode, episode_max_time_ms: int
    ) -> str:
        """Start an episode of `task` in `page` (``start``: restart, switch or load; see
        `StartMode`) and return its goal."""

    async def task_status(self, page: Any, task: str) -> TaskStatus: ...
    def solve(self, goal: str, axtree_txt: str) -> str | None: ...


__all__ = ["RouteHandler", "StartMode", "TaskSet", "TaskStatus"]
