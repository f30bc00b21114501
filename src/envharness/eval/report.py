"""The run's HTML report: one self-contained file (plot and screenshots inlined as base64).

The summary table first, then every episode of every task: its outcome, and each step's
screenshot (the page the model saw; for vision policies the image in its prompt, as sent),
action, reward, error, the model's raw reply and the prompt it was given. Everything from the run is escaped by Jinja's autoescape: model
output is text on the page, never markup.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from envharness._deprecated import FILE_KEYS
from envharness.eval.config import EvalConfig
from envharness.eval.runfolder import RunFolder
from envharness.eval.stats import (
    TaskStats,
    episode_seconds,
    episode_steps,
    episode_tokens,
    is_partial_credit,
    is_success,
    no_action_replies,
)

_TEMPLATE = Path(__file__).with_name("report_template.html")
_MIME = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png"}


def data_uri(path: Path) -> str | None:
    """The file as a `data:` URI (None when it is missing)."""
    if not path.is_file():
        return None
    return f"data:{_MIME.get(path.suffix.lower(), 'application/octet-stream')};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _content_text(content: Any) -> str:
    if not isinstance(content, list):
        return str(content if content is not None else "")
    return "".join(
        f"[image: {p.get('image')}]\n" if p.get("type") == "image" else str(p.get("text", ""))
        for p in content
        if isinstance(p, dict)
    )


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{m.get('role', '?')}]\n{_content_text(m.get('content'))}" for m in messages)


def _prompt_images(messages: list[dict[str, Any]], folder: RunFolder) -> list[str]:
    """The images of a recorded prompt (file names in the run folder) as data URIs: what a
    vision model was shown."""
    uris = []
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image" and isinstance(part.get("image"), str):
                uri = data_uri(folder.path / part["image"])
                if uri:
                    uris.append(uri)
    return uris


def _opponent_moves(record: dict[str, Any], after_step: int) -> list[dict[str, Any]]:
    """The other seats' moves made after the agent's `after_step`-th move (0: before its first):
    a model opponent's (with its reply and what it was shown), or the server's."""
    name = (record.get("verify_metrics") or {}).get("opponent") or "opponent"
    moves = (record.get("opponent_moves") or []) + (record.get("env_opponent_moves") or [])
    return [m | {"name": name} for m in moves if int(m.get("after_step") or 0) == after_step]


def _episode_view(record: dict[str, Any], folder: RunFolder) -> dict[str, Any]:
    steps = []
    for step in record.get("steps") or []:
        steps.append(
            {
                **step,
                "opponent_moves": _opponent_moves(record, int(step.get("index") or 0)),
                "image": data_uri(folder.path / step["screenshot"]) if step.get("screenshot") else None,
                "prompt_text": _prompt_text(step.get("prompt") or []),
                "prompt_images": _prompt_images(step.get("prompt") or [], folder),
            }
        )
    final = record.get("final_screenshot")
    return {
        "id": record.get("episode_id"),
        "seed": record.get("seed"),
        "goal": record.get("goal") or "",
        "success": is_success(record),
        "partial": is_partial_credit(record),
        "no_action": no_action_replies(record),
        "reward": record.get("env_reward"),
        "error": record.get("error"),
        "stop_reason": (record.get("metrics") or {}).get("stop_reason"),
        "n_steps": episode_steps(record),
        "tokens": episode_tokens(record),
        "seconds": episode_seconds(record),
        "steps": steps,
        "seat": (record.get("verify_metrics") or {}).get("seat"),
        "opening_moves": _opponent_moves(record, 0),
        "final_image": data_uri(folder.path / final) if final else None,
    }


#: Settings that only an environment with screenshots (a browser) uses.
_SCREENSHOT_SETTINGS = ("screenshots", "screenshot_max_side", "vision")


def shown_settings(config: EvalConfig, screenshots: bool) -> dict[str, Any]:
    """config.json's settings as the report lists them: without the screenshot settings for an
    environment that takes none, without `seat` when no opponent sits in the other seats."""
    settings = {k: v for k, v in config.to_json().items() if k not in ("tasks", "out")}
    if not screenshots:
        for key in _SCREENSHOT_SETTINGS:
            settings.pop(key, None)
        old_key = FILE_KEYS["observation_tokens"]  # config.json keeps the name users know
        if old_key in settings:
            settings["observation_tokens"] = settings.pop(old_key)
    if not settings.get("opponent"):
        settings.pop("opponent", None)
        settings.pop("seat", None)
    return settings


def render_report(
    folder: RunFolder,
    config: EvalConfig,
    records: list[dict[str, Any]],
    stats: list[TaskStats],
    *,
    screenshots: bool = True,
) -> str:
    """The report's HTML text. `screenshots`: the environment takes screenshot options (what its
    harness registers, `EnvHarness.screenshots`); without them the report shows nothing of a
    browser (no screenshot places, settings or browser timings)."""
    import jinja2

    env = jinja2.Environment(
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    template = env.from_string(_TEMPLATE.read_text(encoding="utf-8"))
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in config.tasks}
    for record in sorted(records, key=lambda r: (r.get("index") or 0, r.get("seed") or 0)):
        by_task.setdefault(str(record.get("task")), []).append(_episode_view(record, folder))
    return template.render(
        title=f"envharness eval: {config.model}",
        generated=time.strftime("%Y-%m-%d %H:%M:%S"),
        settings=shown_settings(config, screenshots),
        screenshots=screenshots,
        env_bugs=any(s.env_errors for s in stats),
        stats=stats,
        plot=data_uri(folder.plot),
        tasks=by_task,
    )


def write_report(
    folder: RunFolder,
    config: EvalConfig,
    records: list[dict[str, Any]],
    stats: list[TaskStats],
    *,
    screenshots: bool = True,
) -> Path:
    html = render_report(folder, config, records, stats, screenshots=screenshots)
    folder.report.write_text(html, encoding="utf-8")
    return folder.report
