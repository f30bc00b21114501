"""The core: types, the `Environment` base, the server, sessions, clients, launchers.

Names are resolved lazily so `import envharness.core.types` stays light.
"""

from __future__ import annotations

from envharness.core.lazy import lazy_exports

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


__getattr__ = lazy_exports(__name__, _EXPORTS)
