"""OpenEnv 0.10's Task API: the server says which tasks it serves, from its factory's listing.

An environment factory that knows its tasks has ``task_list()`` returning an object with
``tasks`` (names, in a stable order) and ``splits`` (split name -> names), such as
`envharness.harness.TaskList`; the listing follows the server's options (a browser server
started with ``tasks=mypkg.webtasks`` lists those tasks). The routes are OpenEnv's:

    GET  /list_environments
    GET  /{env}/splits                      [{"name", "type", "num_tasks"}]
    POST /{env}/tasks      {"split"}        {"tasks": [{"id", "index", "split"}], "env_name"}
    POST /{env}/num_tasks  {"split"}        {"num_tasks"}
    POST /{env}/task       {"split","index"}  {"task": {...}}
    POST /{env}/task_range {"split","start","stop"}  {"tasks": [...]}

The split ``""`` (or ``all``) is every task. ``reset(split=..., index=...)`` plays that task,
as OpenEnv's guide says to select one. A factory without a listing answers 501, as OpenEnv does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from fastapi import FastAPI

#: The split names OpenEnv gives a type of their own; others are reported as "validation".
_SPLIT_TYPES = {"train", "validation", "test"}


class SplitRequest(BaseModel):
    split: str = Field(default="", max_length=200)


class TaskRequest(SplitRequest):
    index: int = Field(ge=0)


class RangeRequest(SplitRequest):
    start: int | None = Field(default=None, ge=0)
    stop: int | None = Field(default=None, ge=0)


def listing_of(factory: Any) -> Callable[[], Any] | None:
    """The factory's ``task_list`` method, or None when it lists no tasks."""
    method = getattr(factory, "task_list", None)
    return method if callable(method) else None


def split_tasks(listing: Any, split: str) -> list[str]:
    """The task names of `split` ("" or "all": every task); KeyError naming the splits."""
    if split in ("", "all"):
        return list(listing.tasks)
    if split not in listing.splits:
        raise KeyError(f"unknown split {split!r}; splits: {', '.join(['all', *listing.splits])}")
    return list(listing.splits[split])


def task_spec(name: str, index: int, split: str) -> dict[str, Any]:
    return {"id": name, "index": index, "split": split or "all"}


def resolve_task_reference(options: dict[str, Any], listing: Callable[[], Any] | None) -> dict[str, Any]:
    """Reset options with OpenEnv's ``split``/``index`` replaced by ``task`` (ValueError when
    the listing has no such task); other options pass through unchanged."""
    if "index" not in options and "split" not in options:
        return options
    if listing is None:
        raise ValueError("this environment lists no tasks: reset(split=..., index=...) is not supported")
    options = dict(options)
    split, index = str(options.pop("split", "") or ""), options.pop("index", 0)
    if "task" in options:
        raise ValueError("give either task or split/index, not both")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ValueError(f"index must be a non-negative integer, got {index!r}")
    try:
        names = split_tasks(listing(), split)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    if index >= len(names):
        raise ValueError(f"index {index} is out of range: split {split or 'all'!r} has {len(names)} task(s)")
    options["task"] = names[index]
    return options


def mount_task_api(app: FastAPI, listing: Callable[[], Any] | None, env_name: str) -> None:
    """Add OpenEnv's Task API routes to `app`. (FastAPI loads here, with the server: sessions
    and clients use the listing without it.)"""
    from fastapi import HTTPException

    def names(env: str, split: str) -> list[str]:
        if env.lower() != env_name.lower():
            raise HTTPException(404, f"unknown environment {env!r}; this server runs {env_name!r}")
        if listing is None:
            raise HTTPException(501, f"{env_name} lists no tasks")
        try:
            return split_tasks(listing(), split)
        except KeyError as exc:
            raise HTTPException(400, exc.args[0]) from None

    @app.get("/list_environments", tags=["Task API"])
    async def list_environments() -> list[str]:
        return [env_name]

    @app.get("/{env}/splits", tags=["Task API"])
    async def splits(env: str) -> list[dict[str, Any]]:
        names(env, "")
        current = listing()
        return [{"name": "all", "type": "validation", "num_tasks": len(current.tasks)}] + [
            {"name": name, "type": name if name in _SPLIT_TYPES else "validation", "num_tasks": len(tasks)}
            for name, tasks in current.splits.items()
        ]

    @app.post("/{env}/tasks", tags=["Task API"])
    async def tasks(env: str, request: SplitRequest) -> dict[str, Any]:
        return {
            "tasks": [task_spec(n, i, request.split) for i, n in enumerate(names(env, request.split))],
            "env_name": env_name,
        }

    @app.post("/{env}/num_tasks", tags=["Task API"])
    async def num_tasks(env: str, request: SplitRequest) -> dict[str, Any]:
        return {"num_tasks": len(names(env, request.split))}

    @app.post("/{env}/task", tags=["Task API"])
    async def task(env: str, request: TaskRequest) -> dict[str, Any]:
        chosen = names(env, request.split)
        if request.index >= len(chosen):
            raise HTTPException(400, f"index {request.index} is out of range: {len(chosen)} task(s)")
        return {"task": task_spec(chosen[request.index], request.index, request.split)}

    @app.post("/{env}/task_range", tags=["Task API"])
    async def task_range(env: str, request: RangeRequest) -> dict[str, Any]:
        chosen = names(env, request.split)
        start = request.start or 0
        stop = len(chosen) if request.stop is None else min(request.stop, len(chosen))
        return {"tasks": [task_spec(chosen[i], i, request.split) for i in range(start, stop)]}
