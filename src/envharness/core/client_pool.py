"""Server sessions reused across episodes.

A fresh session costs a new browser context on the server (a renderer process, a page load:
~0.5 s for the first reset on a 2-core machine, ~1.5 s each when eight start at once); a reused
one restarts its page in place (~35 ms for the same task, one page load for another).
`ClientPool` hands out one lease per episode with the sync client's names (`reset`, `step`,
`state`, `close`): `close()` gives the session back instead of ending it. Use it as the
`client_factory` of a session factory when episodes run back to back, as in training and
evaluation. Each lease starts with `reset`, so nothing of the previous episode
is visible to the next but what the environment itself keeps across an in-place reset.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from envharness.core.client import EnvClient, with_state
from envharness.core.concurrency import run_sync


class ClientPool:
    """Sync clients from `make_client`, reused across episodes (each sync client has its own
    loop thread, so it outlives the event loop of any one rollout call). A client whose reset
    fails (a dropped connection) is replaced once by a fresh one. `close()` ends them all."""

    def __init__(self, make_client: Callable[[], Any]):
        self._make = make_client
        self._free: list[Any] = []
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self) -> PooledClient:
        return PooledClient(self)

    def async_lease(self) -> AsyncPooledClient:
        """One episode's lease with the async client's names, for a caller on an event loop
        (`ClientSessionFactory.create_async` takes it when the pool offers it)."""
        return AsyncPooledClient(self)

    def _take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._new()

    def _new(self) -> Any:
        client = self._make()
        with self._lock:
            self._all.append(client)
        return client

    def _give_back(self, client: Any) -> None:
        with self._lock:
            self._free.append(client)

    def _discard(self, client: Any) -> None:
        with self._lock:
            self._all.remove(client)
        with contextlib.suppress(Exception):
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._all, self._free = self._all, [], []
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()


class _Lease:
    """One episode's hold on a pooled client: which one, and giving it back."""

    def __init__(self, pool: ClientPool):
        self._pool = pool
        self._client: Any = None

    def _leased(self) -> Any:
        if self._client is None:
            raise RuntimeError("reset() first: this pooled client holds no session")
        return self._client

    def _release(self) -> None:
        if self._client is not None:
            self._pool._give_back(self._client)
            self._client = None


class PooledClient(_Lease):
    """One episode's lease on a pooled client (the sync client's names)."""

    def reset(self, **kwargs: Any) -> Any:
        return self._reset("reset", kwargs)

    def reset_and_state(self, **kwargs: Any) -> Any:
        return self._reset("reset_and_state", kwargs)

    def step(self, action: Any) -> Any:
        return self._leased().step(action)

    def step_and_state(self, action: Any) -> Any:
        return _invoke(self._leased(), "step_and_state", action)

    def state(self) -> Any:
        return self._leased().state()

    def close(self) -> None:
        self._release()

    def _reset(self, method: str, kwargs: dict[str, Any]) -> Any:
        if self._client is None:
            self._client = self._pool._take()
        try:
            return _invoke(self._client, method, **kwargs)
        except Exception:
            self._pool._discard(self._client)
            self._client = self._pool._new()
            return _invoke(self._client, method, **kwargs)


class AsyncPooledClient(_Lease):
    """One episode's lease on a pooled client with the async client's names. A call hops once
    to the client's own loop thread and back (`EnvClient.call_async`), where a sync lease called
    from an event loop would hold a worker thread for it, a second hop each way; a client that
    is not an `EnvClient` is called in a worker thread."""

    async def reset(self, **kwargs: Any) -> Any:
        return await self._reset("reset", kwargs)

    async def reset_and_state(self, **kwargs: Any) -> Any:
        return await self._reset("reset_and_state", kwargs)

    async def step(self, action: Any) -> Any:
        return await _call(self._leased(), "step", action)

    async def step_and_state(self, action: Any) -> Any:
        return await _call(self._leased(), "step_and_state", action)

    async def state(self) -> Any:
        return await _call(self._leased(), "state")

    async def close(self) -> None:
        self._release()

    async def _reset(self, method: str, kwargs: dict[str, Any]) -> Any:
        if self._client is None:
            self._client = await run_sync(self._pool._take)
        try:
            return await _call(self._client, method, **kwargs)
        except Exception:
            await run_sync(self._pool._discard, self._client)
            self._client = await run_sync(self._pool._new)
            return await _call(self._client, method, **kwargs)


def _invoke(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """`client.<method>(...)`; `reset_and_state` / `step_and_state` through `with_state`, which
    makes two calls of a client without them."""
    if method.endswith("_and_state"):
        return with_state(client, method.removesuffix("_and_state"), *args, **kwargs)
    return getattr(client, method)(*args, **kwargs)


async def _call(client: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    if isinstance(client, EnvClient) and getattr(type(client), method) is getattr(EnvClient, method):
        return await client.call_async(method, *args, **kwargs)  # not a subclass's own sync form
    return await run_sync(_invoke, client, method, *args, **kwargs)
