"""Beyond one machine: many environment servers behind one `ClientPool`-compatible router.

`FleetRouter(urls)` works over any servers (started by hand, a Kubernetes StatefulSet);
`EnvFleet` (needs `envharness[ray]`) places, restarts and advertises `envharness serve`
processes as Ray actors and hands out the same router.
"""

from envharness.fleet.errors import NoServerAvailableError, ServerLostError
from envharness.fleet.leases import AsyncFleetLease, FleetLease
from envharness.fleet.placement import Endpoint, ServerStatus
from envharness.fleet.router import FleetRouter
from envharness.harness.failures import InfrastructureError

__all__ = [
    "AsyncFleetLease",
    "Endpoint",
    "EnvFleet",
    "EnvServerActor",
    "FleetLease",
    "FleetRouter",
    "InfrastructureError",
    "NoServerAvailableError",
    "ServerLostError",
    "ServerStatus",
]


def __getattr__(name: str):
    if name in ("EnvFleet", "EnvServerActor"):  # imports ray: only when asked for
        from envharness.fleet import ray_actors

        return getattr(ray_actors, name)
    raise AttributeError(name)
