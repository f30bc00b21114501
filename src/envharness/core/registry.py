"""Environment names -> factories, for `envharness serve NAME` and `LocalServer(NAME)`.

A registry target is either an `Environment` subclass (options become constructor
arguments) or a function taking the options and returning an environment factory (any
callable returning an `Environment`; an async `aclose()` on it runs at shutdown). Targets
are imported lazily, so `echo` never imports Playwright. Besides the names below,
`module.path:attribute` serves any importable target.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from envharness.core.environment import Environment
from envharness.core.sessions import EnvFactory

ENVIRONMENTS: dict[str, str] = {
    "echo": "envharness.envs.echo.environment:EchoEnvironment",
    "browsergym": "envharness.envs.browsergym.factory:make_environment_factory",
}


def resolve(name: str) -> Any:
    """The registry target for `name` (a registered name or `module:attribute`)."""
    target = ENVIRONMENTS.get(name, name)
    if ":" not in target:
        raise KeyError(f"Unknown environment {name!r}; known: {', '.join(sorted(ENVIRONMENTS))} (or module.path:attribute)")
    module_name, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def make_factory(name: str, **options: Any) -> EnvFactory:
    """The environment factory for `name`; bad options fail here, not at the first session."""
    target = resolve(name)
    if isinstance(target, type) and issubclass(target, Environment):
        if not options:
            return target
        try:
            inspect.signature(target).bind(**options)
        except TypeError as exc:
            raise ValueError(f"Bad options for {name}: {exc}") from None
        return functools.partial(target, **options)
    return target(**options)
