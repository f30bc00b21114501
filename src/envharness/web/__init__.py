"""`/web`: a page to play an environment by hand (`envharness serve NAME --web`).

Static HTML and JavaScript (no framework, nothing to build) talking to the server's own
/ws, so what a person sees is exactly what an agent gets. `/web/info` tells the page the
environment's name, its tasks and its actions with examples. Off unless asked: the page
can drive every session the server allows, so it is for a person at the machine (or
behind the same bearer token: open `/web?token=...`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from envharness.core.sessions import SessionManager

PAGE = Path(__file__).with_name("page.html")
EXAMPLE_VALUES = {"bid": "12", "text": "hello", "direction": "down", "wait_ms": 500, "button": "left", "key": "Enter",
                  "key_comb": "Control+a", "options": "Option 1", "from_bid": "12", "to_bid": "14", "x": 50, "y": 80,
                  "url": "http://miniwob.local/miniwob/click-test.html", "reason": "the page has no such button"}


def mount_web(app: FastAPI, manager: SessionManager) -> None:
    """Add `/web` (the page) and `/web/info` (what the page needs to know) to `app`."""

    @app.get("/web", include_in_schema=False)
    async def web_page() -> HTMLResponse:
        return HTMLResponse(_page(), headers={"Cache-Control": "no-store"})

    @app.get("/web/info", include_in_schema=False)
    async def web_info() -> dict[str, Any]:
        description = await manager.describe()
        info: dict[str, Any] = {"env": app.title.removeprefix("envharness: "), "browser": _is_browser(description.action_type),
                                "action_schema": description.action_type.model_json_schema()}
        if info["browser"]:
            from envharness.envs.browsergym import miniwob

            info["tasks"] = list(miniwob.all_tasks())
            info["actions"] = browser_actions()
        return info


@lru_cache(maxsize=1)
def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def _is_browser(action_type: type) -> bool:
    return any(f"{c.__module__}.{c.__qualname__}" == "envharness.envs.browsergym.models.BrowserGymAction"
               for c in action_type.__mro__)


def browser_actions() -> list[dict[str, str]]:
    """Each BrowserGym action with its signature and an example, the seed's five first."""
    from envharness.envs.browsergym.action_text import ACTION_TOOLS, DEFAULT_TOOL_NAMES

    names = [*DEFAULT_TOOL_NAMES, *(n for n in ACTION_TOOLS if n not in DEFAULT_TOOL_NAMES)]
    actions = []
    for name in names:
        tool = ACTION_TOOLS[name]
        signature = ", ".join(p if p not in tool.optional else f"{p}?" for p, _ in tool.params)
        example = tool.action_string({p: EXAMPLE_VALUES[p] for p, _ in tool.params if p not in tool.optional})
        actions.append({"name": name, "signature": f"{name}({signature})", "description": tool.description, "example": example})
    return actions
