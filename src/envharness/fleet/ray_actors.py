"""A fleet of environment servers on Ray: Ray places, restarts and advertises them;
sessions go straight from client to server.

`EnvServerActor` runs one `envharness serve` (a `WatchedServer`) on its node. When the
server exits or stops answering, the actor kills what it started and exits, and Ray
restarts it (`max_restarts=-1`): the new server has a new port and a higher generation.
Calls are never retried (`max_task_retries=0`): a `step` is not idempotent.

`EnvFleet` places `servers` actors through one placement group (`STRICT_SPREAD`: one per
node, or `SPREAD`), with no surplus actors (a pending one would take a restarted actor's
slot), and hands out `FleetRouter`s that re-read the actors' addresses on every poll.

    ray.init(address="auto")
    fleet = EnvFleet(ENV, servers=4, server_args=["--max-sessions", "16"])
    fleet.wait_ready(timeout_s=180)
    rollout_func = build_env_rollout_func(ENV, fleet.client_pool(), max_concurrency=fleet.capacity)
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from envharness.core.registry import DEFAULT_ENV
from envharness.fleet.placement import Endpoint
from envharness.fleet.router import FleetRouter, default_client_class
from envharness.fleet.server_process import TAG_ENV_VAR, WatchedServer, kill_tagged

log = logging.getLogger(__name__)


class _EnvServerActor:
    """One watched `envharness serve` on this node (use through `EnvServerActor`)."""

    def __init__(
        self,
        name: str,
        server_args: Sequence[str] = (),
        *,
        tag: str,
        host: str | None = None,
        token: str | None = None,
        startup_timeout_s: float = 120.0,
        health_poll_s: float = 2.0,
    ) -> None:
        self.tag = tag
        kill_tagged(tag, 0.0)  # what a killed predecessor of this actor left on this node
        self.node_id = ray.get_runtime_context().get_node_id()
        self.generation = time.time_ns() // 1_000_000  # grows with every restart
        bind = host or ray.util.get_node_ip_address()
        self.server = WatchedServer(
            name,
            host=bind,
            server_args=list(server_args),
            tag=f"{tag}{self.generation}",
            token=token,
            startup_timeout_s=startup_timeout_s,
            poll_interval_s=health_poll_s,
            on_death=self._died,
        )

    def _died(self, reason: str) -> None:
        log.warning(
            "environment server %s died (%s); the actor exits for Ray to restart it",
            self.server.base_url,
            reason,
        )
        os._exit(1)  # a Ray restart; exit_actor() would end the actor for good

    def address(self) -> dict[str, Any]:
        """Where the server listens, on which node, which restart; its pid (tests kill it)."""
        return {
            "url": self.server.base_url,
            "node_id": self.node_id,
            "generation": self.generation,
            "pid": self.server.process.pid,
        }

    def stop(self) -> None:
        """End the server (and its browser); the actor stays until killed."""
        self.server.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.server.kill(grace_s=1.0)


#: The Ray actor class: restarted without limit, calls never retried, no CPU claimed itself
#: (the placement group's bundle holds the node's resources).
EnvServerActor = ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0)(_EnvServerActor)


class EnvFleet:
    """`servers` environment servers spread over a running Ray cluster (`ray.init` first)."""

    def __init__(
        self,
        env: str = DEFAULT_ENV,
        servers: int = 2,
        *,
        one_per_node: bool = True,
        server_args: Sequence[str] = (),
        resources: dict[str, float] | None = None,
        host: str | None = None,
        token: str | None = None,
        client_class: Any = None,
        startup_timeout_s: float = 180.0,
        health_poll_s: float = 2.0,
    ) -> None:
        if servers < 1:
            raise ValueError("servers must be at least 1")
        if not ray.is_initialized():
            raise RuntimeError("EnvFleet needs a Ray cluster: call ray.init(address=...) first")
        self.env = env
        self.token = token
        self.client_class = client_class or default_client_class(env)
        base = os.environ.get(TAG_ENV_VAR, "")
        self.tag = f"{base}/fleet-{uuid.uuid4().hex[:8]}" if base else f"fleet-{uuid.uuid4().hex[:8]}"
        bundle = dict(resources or {"CPU": 1})
        self.placement = placement_group(
            [dict(bundle) for _ in range(servers)], strategy="STRICT_SPREAD" if one_per_node else "SPREAD"
        )
        self.actors = [
            EnvServerActor.options(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self.placement, placement_group_bundle_index=i
                ),
                **_actor_resources(bundle),
            ).remote(
                env,
                list(server_args),
                tag=f"{self.tag}/{i}/",
                host=host,
                token=token,
                startup_timeout_s=startup_timeout_s,
                health_poll_s=health_poll_s,
            )
            for i in range(servers)
        ]
        self._known: dict[int, Endpoint] = {}
        self._routers: list[FleetRouter] = []

    def endpoints(self, timeout_s: float = 2.0) -> list[Endpoint]:
        """The servers' current addresses. An actor that errors (dead, restarting) is left
        out; one that is only slow to answer keeps its last known address."""
        refs = {a.address.remote(): i for i, a in enumerate(self.actors)}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        for ref in ready:
            i = refs[ref]
            try:
                data = ray.get(ref)
                self._known[i] = Endpoint(data["url"], data["node_id"], int(data["generation"]))
            except Exception:
                self._known.pop(i, None)
        return [self._known[i] for i in sorted(self._known)]

    def addresses(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Every actor's `address()` (url, node_id, generation, pid), waiting for all."""
        return ray.get([a.address.remote() for a in self.actors], timeout=timeout_s)

    def client_pool(self, **router_options: Any) -> FleetRouter:
        """A `FleetRouter` over the fleet (a drop-in `ClientPool`); closed by `shutdown()`."""
        router_options.setdefault("client_class", self.client_class)
        router = FleetRouter(endpoints=self.endpoints, token=self.token, **router_options)
        self._routers.append(router)
        return router

    def wait_ready(self, timeout_s: float = 180.0) -> list[Endpoint]:
        """Block until every actor has a server up; their endpoints."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.endpoints(timeout_s=min(10.0, max(0.1, deadline - time.monotonic())))
            if len(found) == len(self.actors):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(found)} of {len(self.actors)} environment servers up after {timeout_s:.0f}s "
                    f"(placement group: {ray.util.placement_group_table(self.placement).get('state')})"
                )
            time.sleep(0.2)

    @property
    def capacity(self) -> int:
        """Sessions the fleet's healthy servers take (from its first router's polls)."""
        return self._routers[0].capacity if self._routers else 0

    def shutdown(self) -> None:
        """Close the routers, stop every server, kill the actors, free the placement group."""
        for router in self._routers:
            router.close()
        self._routers.clear()
        with contextlib.suppress(Exception):
            ray.get([a.stop.remote() for a in self.actors], timeout=30)
        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        with contextlib.suppress(Exception):
            remove_placement_group(self.placement)
        self.actors = []
        kill_tagged(self.tag, 0.0)  # leftovers on this machine (a removed node's detached browser)

    def __enter__(self) -> EnvFleet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _actor_resources(bundle: dict[str, float]) -> dict[str, Any]:
    """The actor claims its whole bundle, so Ray's accounting matches what runs there."""
    custom = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
    out: dict[str, Any] = {"num_cpus": bundle.get("CPU", 0)}
    if "GPU" in bundle:
        out["num_gpus"] = bundle["GPU"]
    if "memory" in bundle:
        out["memory"] = bundle["memory"]
    if custom:
        out["resources"] = custom
    return out
