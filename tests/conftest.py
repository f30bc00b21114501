"""Shared test helpers: an in-process echo server on loopback, and polling."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import httpx
import pytest

from envharness.core.launchers import LocalServer


def wait_until(predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.02) -> Any:
    """Poll `predicate` until it is truthy; fail the test with its last value otherwise. The
    limit is a hang guard, far above what a slow or busy machine needs."""
    deadline = time.monotonic() + timeout_s
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval_s)
        value = predicate()
    assert value, f"condition not met within {timeout_s}s"
    return value


def health(server: LocalServer, **headers: str) -> dict[str, Any]:
    reply = httpx.get(f"{server.base_url}/health", headers=headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def server_tasks(server: LocalServer) -> set[asyncio.Task]:
    """The asyncio tasks alive on the server's event loop (not counting this probe)."""

    async def probe() -> set[asyncio.Task]:
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    assert server.loop is not None
    return asyncio.run_coroutine_threadsafe(probe(), server.loop).result(timeout=60)


@pytest.fixture(scope="module")
def echo_server():
    with LocalServer("echo") as server:
        yield server
