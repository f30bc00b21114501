"""The rendezvous of `train --processes N`: every socket its ranks meet on listens on loopback.

torch.distributed's TCPStore has no address to bind to: given any host name, its server
listens on every interface (`*:PORT`), and it has no authentication, so anyone who reaches
the port can read and write the run's keys. torchrun's `--standalone` starts two of them (the
rendezvous and the store it shares with the ranks). A store can instead be handed a socket
already listening (`master_listen_fd`); this module registers a rendezvous backend that does
that for both stores, on 127.0.0.1, and tells gloo and NCCL to use the loopback interface.
Across machines the launcher's own rendezvous is used instead (docs/security.md says how to
restrict it).
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta
from typing import Any

LOOPBACK = "127.0.0.1"
BACKEND = "envharness-loopback"


def loopback_store(timeout: timedelta = timedelta(seconds=60)) -> Any:
    """A TCPStore server listening on 127.0.0.1 only, on a port the system picks."""
    from torch.distributed import TCPStore

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind((LOOPBACK, 0))
        listener.listen(socket.SOMAXCONN)
        port = listener.getsockname()[1]
    except OSError:
        listener.close()
        raise
    return TCPStore(LOOPBACK, port, is_master=True, multi_tenant=True, wait_for_workers=False,
                    timeout=timeout, master_listen_fd=listener.detach())  # fmt: skip


def _create_handler(params: Any) -> Any:
    """torchrun's c10d dynamic rendezvous, with both of its stores on loopback."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    class LoopbackRendezvous(DynamicRendezvousHandler):
        def _create_tcp_store_server(self, master_addr: str, master_port: int) -> Any:
            return loopback_store()  # the store the ranks share (MASTER_ADDR:MASTER_PORT)

    class LoopbackBackend(C10dRendezvousBackend):
        @property
        def name(self) -> str:  # the registry checks the handler answers to the name asked for
            return BACKEND

    store = loopback_store(timedelta(seconds=params.get_as_int("read_timeout", 60) or 60))
    backend = LoopbackBackend(store, params.run_id)
    return LoopbackRendezvous.from_backend(params.run_id, store, backend, params.min_nodes, params.max_nodes,
                                           LOOPBACK)  # fmt: skip


def register() -> None:
    """Make the backend known to torch.distributed.run in this process (the launcher's agent)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(BACKEND, _create_handler)


def launcher_args(processes: int) -> list[str]:
    """torch.distributed.run's arguments for `processes` ranks on this machine, met on loopback."""
    return ["--nnodes=1", f"--nproc-per-node={processes}", f"--rdzv-backend={BACKEND}",
            f"--rdzv-endpoint={LOOPBACK}:0", f"--rdzv-id={uuid.uuid4().hex}", f"--local-addr={LOOPBACK}"]  # fmt: skip


def loopback_interface() -> str | None:
    """The name of the interface that holds 127.0.0.1 (`lo` on Linux, `lo0` on macOS)."""
    import psutil  # accelerate's dependency, so there wherever training is

    for name, addresses in psutil.net_if_addrs().items():
        if any(address.family == socket.AF_INET and address.address == LOOPBACK for address in addresses):
            return name
    return None


def loopback_sockets_env() -> dict[str, str]:
    """Gloo's and NCCL's interface for a one-machine run: loopback, unless the user chose one.
    Without it gloo listens on whatever the host name resolves to."""
    interface = loopback_interface()
    if interface is None:
        return {}
    return {var: interface for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if var not in os.environ}
