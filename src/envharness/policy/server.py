"""`PolicyServer`: the policy endpoint on a loopback port in a background thread.

What a trainer or a test starts next to its agents: `with PolicyServer(backend) as policy:`
gives `policy.base_url`, `policy.rollout_url(id)` (an agent's OpenAI `base_url`) and the
in-process `policy.store`. Served by `core.launchers.LocalServer` (uvicorn in a thread), the
one way envharness runs an app in-process.
"""

from __future__ import annotations

from typing import Any

from envharness.core.launchers import LocalServer
from envharness.models.base import ModelBackend
from envharness.policy.app import create_policy_app
from envharness.policy.endpoint import PolicyEndpoint


class PolicyServer:
    """`PolicyEndpoint(backend, **options)` served over HTTP on `host` (port 0: a free one)."""

    def __init__(
        self,
        backend: ModelBackend | PolicyEndpoint,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        **options: Any,
    ) -> None:
        self.endpoint = backend if isinstance(backend, PolicyEndpoint) else PolicyEndpoint(backend, **options)
        self.store = self.endpoint.store
        self._server = LocalServer(create_policy_app(self.endpoint), host=host, port=port)
        self.base_url = self._server.base_url

    def rollout_url(self, rollout_id: str) -> str:
        """The OpenAI `base_url` that records into `rollout_id`."""
        return f"{self.base_url}/rollouts/{rollout_id}/v1"

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> PolicyServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
