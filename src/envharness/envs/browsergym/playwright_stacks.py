"""Playwright's per-call stack capture, made cheap.

On every API call Playwright's Python client records who called it: `inspect.stack()` in
`Connection.wrap_api_call` (for the API name and the caller's file and line, sent to the driver)
and `traceback.extract_stack()` in `_send_message_to_server` (kept for error messages). Both look
up the source line of every frame on the stack (`linecache`, `inspect.getmodule` over all of
`sys.modules`): profiled under the RL benchmark, half of the server process's CPU.

`install()` gives Playwright's connection module versions that walk the frames without reading
source: the API name, the location and the error stacks are the same (lines are read lazily, when
an error is formatted), the cost is a few microseconds. Only `playwright._impl._connection` sees
them; `inspect` and `traceback` themselves are untouched.
"""

from __future__ import annotations

import inspect
import sys
import traceback
import types
from pathlib import Path
from typing import Any

_installed = False


def _playwright_dir() -> str:
    import playwright

    return str(Path(playwright.__file__).parents[0])


def _caller_frames(playwright_dir: str) -> list[inspect.FrameInfo]:
    """The stack from the caller of `inspect.stack()` outwards, as `FrameInfo`s without source,
    cut after the first frame outside Playwright that follows Playwright's own frames: all that
    `_extract_stack_trace_information_from_stack` reads (the API name and the call's location)."""
    frames: list[inspect.FrameInfo] = []
    seen_playwright = False
    frame = sys._getframe(2)  # skip this function and the shim's `stack`
    while frame is not None:
        filename = frame.f_code.co_filename
        frames.append(inspect.FrameInfo(frame, filename, frame.f_lineno, frame.f_code.co_name, None, None))
        inside = filename.startswith(playwright_dir)
        if inside:
            seen_playwright = True
        elif seen_playwright:
            break
        frame = frame.f_back
    return frames


def _shim(module: types.ModuleType, **overrides: Any) -> types.ModuleType:
    """A module object that is `module` except for `overrides`."""
    shim = types.ModuleType(module.__name__, module.__doc__)
    shim.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    shim.__dict__.update(overrides)
    return shim


def install() -> None:
    """Swap the stack capture of Playwright's connection module for the cheap one (idempotent)."""
    global _installed
    if _installed:
        return
    from playwright._impl import _connection

    playwright_dir = _playwright_dir()

    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        return _caller_frames(playwright_dir)

    def extract_stack(f: Any = None, limit: int | None = None) -> traceback.StackSummary:
        summary = traceback.StackSummary.extract(traceback.walk_stack(f or sys._getframe(1)), limit=limit,
                                                 lookup_lines=False)
        summary.reverse()
        return summary

    _connection.inspect = _shim(inspect, stack=stack)
    _connection.traceback = _shim(traceback, extract_stack=extract_stack)
    _installed = True
