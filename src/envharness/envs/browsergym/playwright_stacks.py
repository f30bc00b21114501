"""Playwright's per-call stack capture, made cheap.

On every API call Playwright's Python client records who called it: `inspect.stack()` in
`Connection.wrap_api_call` (for the API name and the caller's file and line, sent to the driver)
and `traceback.extract_stack()` in `_send_message_to_server` (kept for error messages); a route's
`fulfill`/`continue_`/`abort` (`_network`, every MiniWoB file a page loads) and every call of
the sync API (`_sync_base`) take `inspect.stack()` too. Each looks up the source line of every
frame on the stack (`linecache`, and `inspect.getmodule`, which scans all of `sys.modules` for a
frame whose file is no module's): profiled under the RL benchmark, half of the server process's
CPU; in a process that imported torch and transformers (4,000 modules: a training job's
in-process server, a test worker) a page load spent most of its time there.

`install()` gives those Playwright modules versions that walk the frames without reading source:
the API name, the location and the error stacks are the same (lines are read lazily, when an
error is formatted), the cost is a few microseconds. Only Playwright's modules see them;
`inspect` and `traceback` themselves are untouched.
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
    """Swap the stack capture of Playwright's modules for the cheap one (idempotent)."""
    global _installed
    if _installed:
        return
    from playwright._impl import _connection, _network, _sync_base

    playwright_dir = _playwright_dir()

    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        return _caller_frames(playwright_dir)

    def extract_stack(f: Any = None, limit: int | None = None) -> traceback.StackSummary:
        # Built frame by frame: `StackSummary.extract` stats every frame's file even when it
        # reads no line (`linecache.checkcache`).
        frames, frame = [], f or sys._getframe(1)
        while frame is not None and (limit is None or len(frames) < limit):
            code = frame.f_code
            frames.append(
                traceback.FrameSummary(code.co_filename, frame.f_lineno, code.co_name, lookup_line=False)
            )
            frame = frame.f_back
        frames.reverse()
        return traceback.StackSummary.from_list(frames)

    cheap_inspect, cheap_traceback = (
        _shim(inspect, stack=stack),
        _shim(traceback, extract_stack=extract_stack),
    )
    _connection.inspect = _network.inspect = _sync_base.inspect = cheap_inspect
    _connection.traceback = _sync_base.traceback = cheap_traceback
    _installed = True
