"""The core: types, the `Environment` base, the server, sessions, clients, launchers.

Names are resolved lazily so `import envharness.core.types` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Action": "types",
    "Observation": "types",
    "State": "types",
    "StepResult": "types",
    "EnvironmentMetadata": "types",
    "Environment": "environment",
    "ErrorCode": "protocol",
    "ProtocolError": "protocol",
    "SessionManager": "sessions",
    "create_app": "server",
    "AsyncEnvClient": "client",
    "EnvClient": "client",
    "EnvServerError": "client",
    "ClientPool": "client_pool",
    "LocalServer": "launchers",
    "LaunchError": "launchers",
    "DockerUnavailableError": "launchers",
    "launch_local": "launchers",
    "make_factory": "registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
