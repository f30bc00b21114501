"""Browser-named helpers from before every environment was served the same way.

Each old name still works (`from envharness.integrations.trl import build_browsergym_rollout_func`)
and warns with the generic call that replaces it. This is the one module outside `envs/` and
`cli/` that names an environment (`tests/test_layers.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

_BROWSER = "browsergym"


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def build_browsergym_rollout_func(
    client_factory: Callable[[], Any], *, default_task: str | None = "click-test", **kwargs: Any
) -> Any:
    """`build_env_rollout_func("browsergym", ...)`."""
    from envharness.integrations.trl.rollout import build_env_rollout_func

    _warn("build_browsergym_rollout_func", 'build_env_rollout_func("browsergym", ...)')
    return build_env_rollout_func(_BROWSER, client_factory, default_task=default_task, **kwargs)


def browser_clients(env_url: str | None = None, **kwargs: Any) -> Any:
    """`env_clients("browsergym", ...)`."""
    from envharness.integrations.trl.training import env_clients

    _warn("browser_clients", 'env_clients("browsergym", ...)')
    return env_clients(_BROWSER, env_url, **kwargs)


def browsergym_environment_factory(
    client_factory: Callable[[], Any], *, task: str = "click-test", **options: Any
) -> Any:
    """`environment_factory("browsergym", ...)`."""
    from envharness.integrations.trl.environment import environment_factory

    _warn("browsergym_environment_factory", 'environment_factory("browsergym", ...)')
    options.pop("max_observation_chars", None)  # the session's own bound applies
    return environment_factory(_BROWSER, client_factory, task=task, **options)


def _train_server_options() -> dict[str, Any]:
    from envharness.integrations.trl.training import train_server_options

    _warn("TRAIN_SERVER_OPTIONS", 'train_server_options("browsergym")')
    return train_server_options(_BROWSER)


_NAMES: dict[str, Callable[[], Any]] = {
    "build_browsergym_rollout_func": lambda: build_browsergym_rollout_func,
    "browser_clients": lambda: browser_clients,
    "browsergym_environment_factory": lambda: browsergym_environment_factory,
    "TRAIN_SERVER_OPTIONS": _train_server_options,
}


def deprecated(module: str, name: str) -> Any:
    """The old object called `name`; AttributeError for any other name (`module`'s `__getattr__`)."""
    if name not in _NAMES:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return _NAMES[name]()


__all__ = ["browser_clients", "browsergym_environment_factory", "build_browsergym_rollout_func", "deprecated"]
