"""The fleet's two failures, kept apart from a real reward of 0 (both are `InfrastructureError`s),
and the one test of whether an error means a server or its connection is gone: placement,
health and leases all decide on it, so it lives below them."""

from __future__ import annotations

from envharness.harness.failures import InfrastructureError, is_infrastructure_error


class ServerLostError(InfrastructureError):
    """The server of a running episode went away; the episode cannot go on."""


class NoServerAvailableError(InfrastructureError):
    """No healthy server with room answered within the acquire timeout."""


def connection_lost(exc: BaseException) -> bool:
    """A failure of the server or the connection (a hung server's reply timeout included)."""
    return is_infrastructure_error(exc) or isinstance(exc, TimeoutError)
