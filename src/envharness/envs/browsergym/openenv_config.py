"""OpenEnv's BrowserGym configuration variables, read by `envharness serve browsergym`.

OpenEnv's BrowserGym server (``envs/browsergym_env/server/app.py``) is configured with
environment variables; a seed user's ``from_docker_image(..., env_vars={...})`` or shell
exports should carry over. The ones that describe the environment map onto our options:

==============================  =====================================================
``BROWSERGYM_BENCHMARK``        ``benchmark``: ``miniwob`` (default), or a benchmark that
                                BrowserGym's engine runs (``openended``, ``webarena``, ...)
``BROWSERGYM_ENGINE``           ``engine``: ``envharness`` (default) or ``browsergym`` (ours)
``BROWSERGYM_TASK_NAME``        ``task`` (the default task of each session)
``BROWSERGYM_HEADLESS``         ``headless`` (``true``/``false``)
``BROWSERGYM_VIEWPORT_WIDTH``   ``viewport["width"]`` (with HEIGHT; the other one
``BROWSERGYM_VIEWPORT_HEIGHT``  defaults to OpenEnv's 1280x720)
``BROWSERGYM_TIMEOUT``          ``page_timeout_ms`` (Playwright's default timeout, ms)
``BROWSERGYM_INCLUDE_SCREENSHOT``  ``screenshot`` (``true``/``false``)
==============================  =====================================================

Unset variables keep envharness's defaults (MiniWoB's own 332x214 viewport, as BrowserGym's
MiniWoB tasks, rather than OpenEnv's 1280x720). Options given explicitly (``--option``,
``ENVHARNESS_OPTION_*``) win over these variables. ``BROWSERGYM_PORT`` and
``MAX_CONCURRENT_ENVS`` are server settings: ``envharness serve --port/--max-sessions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Every benchmark a server can run (miniwob on either engine, the others on engine=browsergym).
BENCHMARKS = ("miniwob", "openended", "webarena", "visualwebarena", "workarena", "assistantbench")
#: OpenEnv's viewport when only one of width/height is set.
OPENENV_VIEWPORT = {"width": 1280, "height": 720}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class OpenEnvConfigError(ValueError):
    """A BROWSERGYM_* variable holds a value this server cannot honour."""


def _flag(name: str, value: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OpenEnvConfigError(f"{name}={value!r}: expected true or false")


def _number(name: str, value: str, kind: type) -> Any:
    try:
        number = kind(float(value)) if kind is int else kind(value)
    except ValueError:
        raise OpenEnvConfigError(f"{name}={value!r}: expected a number") from None
    if number <= 0:
        raise OpenEnvConfigError(f"{name}={value!r}: must be positive")
    return number


def options_from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The browsergym options that OpenEnv's BROWSERGYM_* variables in `environ` ask for."""
    get = lambda name: (environ.get(name) or "").strip() or None  # noqa: E731 - empty means unset
    options: dict[str, Any] = {}
    benchmark = get("BROWSERGYM_BENCHMARK")
    if benchmark is not None:
        if benchmark.lower() not in BENCHMARKS:
            raise OpenEnvConfigError(
                f"BROWSERGYM_BENCHMARK={benchmark!r}: choose one of {', '.join(BENCHMARKS)}"
            )
        options["benchmark"] = benchmark.lower()
    if (engine := get("BROWSERGYM_ENGINE")) is not None:
        options["engine"] = engine.lower()
    if (task := get("BROWSERGYM_TASK_NAME")) is not None:
        options["task"] = task
    if (headless := get("BROWSERGYM_HEADLESS")) is not None:
        options["headless"] = _flag("BROWSERGYM_HEADLESS", headless)
    width, height = get("BROWSERGYM_VIEWPORT_WIDTH"), get("BROWSERGYM_VIEWPORT_HEIGHT")
    if width is not None or height is not None:
        options["viewport"] = {
            "width": _number("BROWSERGYM_VIEWPORT_WIDTH", width, int) if width else OPENENV_VIEWPORT["width"],
            "height": _number("BROWSERGYM_VIEWPORT_HEIGHT", height, int)
            if height
            else OPENENV_VIEWPORT["height"],
        }
    if (timeout := get("BROWSERGYM_TIMEOUT")) is not None:
        options["page_timeout_ms"] = _number("BROWSERGYM_TIMEOUT", timeout, int)
    if (screenshot := get("BROWSERGYM_INCLUDE_SCREENSHOT")) is not None:
        options["screenshot"] = _flag("BROWSERGYM_INCLUDE_SCREENSHOT", screenshot)
    return options
