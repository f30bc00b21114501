"""`open_fleet(...)`: the router `envharness eval` and `train` use for `--env-urls`,
`--servers N` and `--ray-address`, with everything it started stopped on exit.

- `env_urls`: servers someone else runs (by hand, a Kubernetes Service per pod): no Ray.
- `servers=N`: an `EnvFleet` of N servers on the Ray cluster at `ray_address` ("auto": the
  one this machine belongs to), or on a Ray instance started here for the run when no
  address is given. One server per node when the cluster has enough nodes, else spread.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from envharness.core.registry import DEFAULT_ENV
from envharness.fleet.router import FleetRouter, default_client_class
from envharness.harness.groups import one_fleet


def server_arguments(max_sessions: int, options: dict[str, Any] | None = None) -> list[str]:
    """`envharness serve` flags for each fleet server."""
    args = ["--max-sessions", str(max_sessions)]
    for key, value in (options or {}).items():
        args += ["--option", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args


def split_urls(text: str | Sequence[str] | None) -> list[str]:
    """`a,b` or `["a", "b"]` -> a list of non-empty urls."""
    if not text:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    return [u.strip() for u in items if u and u.strip()]


@contextlib.contextmanager
def open_fleet(
    env: str = DEFAULT_ENV,
    *,
    env_urls: Sequence[str] = (),
    servers: int = 0,
    ray_address: str | None = None,
    max_sessions: int = 64,
    env_options: dict[str, Any] | None = None,
    server_cpus: float = 1.0,
    client_class: Any = None,
    ready_timeout_s: float = 300.0,
) -> Iterator[FleetRouter]:
    """A ready `FleetRouter` over `env_urls`, or over a Ray fleet of `servers` servers."""
    urls = split_urls(env_urls)
    one_fleet(None, urls, servers, ray_address)  # the fleet group's rule (harness/groups.py)
    if urls:
        with FleetRouter(urls, client_class=client_class or default_client_class(env)) as router:
            router.wait_ready(min_servers=1, timeout_s=ready_timeout_s)
            yield router
        return
    if servers < 1:
        raise ValueError("--servers must be at least 1")
    try:
        import ray
    except ImportError:
        raise RuntimeError("--servers needs Ray: pip install 'envharness[ray]'") from None
    from envharness.fleet.ray_actors import EnvFleet

    started_ray = not ray.is_initialized()
    if started_ray:
        import os

        # a Ray of our own gets enough logical CPUs for the servers asked for (they need not match cores)
        own = (
            {} if ray_address else {"num_cpus": max(os.cpu_count() or 1, int(servers * server_cpus + 0.999))}
        )
        ray.init(
            address=ray_address, include_dashboard=False, log_to_driver=False, configure_logging=False, **own
        )
    try:
        nodes = [
            n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= server_cpus
        ]
        one_per_node = len(nodes) >= servers
        host = "127.0.0.1" if started_ray and not ray_address else None  # a Ray of our own: loopback only
        with EnvFleet(
            env,
            servers,
            one_per_node=one_per_node,
            server_args=server_arguments(max_sessions, env_options),
            resources={"CPU": server_cpus},
            host=host,
            client_class=client_class,
        ) as fleet:
            fleet.wait_ready(timeout_s=ready_timeout_s)
            router = fleet.client_pool()
            router.wait_ready(min_servers=servers, timeout_s=ready_timeout_s)
            yield router
    finally:
        if started_ray:
            ray.shutdown()
