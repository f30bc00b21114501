"""Features mounted on a server app (`/mcp`, `/web`), found by name, never imported here.

A mount is ``(app, manager, env_name) -> None | (() -> async context manager)``: it adds
routes, and may hand back something to run while the app runs (MCP's session manager). The
core server asks this table for the features it was told to mount, so it depends on none of
them; a new feature is one line here or a mount passed to `create_app(mounts=[...])`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from envharness.core.registry import load_target

AppMount = Callable[[Any, Any, str], Any]

#: name -> "module:function" of the mount.
MOUNTS: dict[str, str] = {
    "mcp": "envharness.mcp.mount:mount_mcp",
    "web": "envharness.web:mount_web",
}


def resolve_mounts(*, mcp: bool, web: bool, extra: Iterable[AppMount] = ()) -> list[AppMount]:
    """The mount functions for the features switched on, then `extra`."""
    names = [name for name, on in (("mcp", mcp), ("web", web)) if on]
    return [load_target(MOUNTS[name]) for name in names] + list(extra)
