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


def mount_web(app: FastAPI, manager: SessionManager, name: str = "") -> None:
    """Add `/web` (the page) and `/web/info` (what the page needs to know) to `app`."""

    @app.get("/web", include_in_schema=False)
    async def web_page() -> HTMLResponse:
        return HTMLResponse(_page(), headers={"Cache-Control": "no-store"})

    @app.get("/web/info", include_in_schema=False)
    async def web_info() -> dict[str, Any]:
        description = await manager.describe()
        info: dict[str, Any] = {
            "env": name or app.title.removeprefix("envharness: "),
            "action_schema": description.action_type.model_json_schema(),
        }
        info.update(env_web_info(name))
        if manager.task_listing is not None:  # what this server serves (its options chose it)
            listing = manager.task_listing()
            info["tasks"] = list(listing.tasks)
            if info.get("default_task") not in info["tasks"]:
                info["default_task"] = (listing.splits.get("default") or listing.tasks or [None])[0]
        return info


@lru_cache(maxsize=1)
def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


def env_web_info(name: str) -> dict[str, Any]:
    """What the environment tells the page (`EnvSpec.web_info`): ``tasks`` and ``default_task``
    (a task picker), ``actions`` (name, signature, description, example), ``action_field``
    (the typed text goes into this action field; otherwise the action is typed as JSON),
    ``goal_field`` / ``text_field`` (observation fields shown as goal and page text), ``bids``
    (page text lines with ``[bid]`` are clickable), ``screenshots``, ``action_note``,
    ``reset_options`` (name, choices, hint: more reset arguments the page offers, e.g. an opponent)."""
    from envharness.core.registry import get_spec

    try:
        spec = get_spec(name)
    except (KeyError, ImportError, AttributeError):
        return {}
    provider = spec.load("web_info")
    return dict(provider()) if provider is not None else {}
