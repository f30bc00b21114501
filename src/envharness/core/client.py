"""Clients: `AsyncEnvClient` (the one implementation, over the WebSocket) and
`EnvClient` (the same names, synchronous, running the async client on a private
event-loop thread).

Env-specific clients set `observation_type` / `state_type`, or override
`_step_payload`, `_parse_result` and `_parse_state` (OpenEnv's hooks). Their sync twin
only names the async class: `class EchoEnv(EnvClient): async_client_class = AsyncEchoEnv`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
from collections.abc import Coroutine
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from envharness.core import launchers
from envharness.core.errors import InvalidAction
from envharness.core.types import Observation, State, StepResult

ActT = TypeVar("ActT")
ObsT = TypeVar("ObsT", bound=Observation)
StateT = TypeVar("StateT", bound=State)
T = TypeVar("T")
ClientT = TypeVar("ClientT", bound="AsyncEnvClient")

#: Error codes after which the server has closed the connection.
_SESSION_ENDING = {
    "CAPACITY_REACHED",
    "UNAUTHORIZED",
    "IDLE_TIMEOUT",
    "SHUTTING_DOWN",
    "FACTORY_ERROR",
    "SESSION_ERROR",
}


class AnyObservation(Observation):
    """What a client without an `observation_type` returns: every field the server sent."""

    model_config = ConfigDict(extra="allow")


class EnvServerError(RuntimeError):
    """An error frame from the server; `code` is one of `protocol.ErrorCode`'s values."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.code: str = str(data.get("code", "UNKNOWN"))
        self.message: str = str(data.get("message", "Unknown error"))
        #: The environment's machinery failed (e.g. its browser died), not the episode.
        self.infrastructure: bool = bool(data.get("infrastructure", False))
        super().__init__(f"Server error: {self.message} (code: {self.code})")  # OpenEnv's wording


class ActionRefused(EnvServerError, InvalidAction):
    """The environment refused the action (`InvalidAction` on the server): the agent's
    mistake, which the harness shows as the tool's error; the session goes on."""

    def __str__(self) -> str:
        return self.message


def websocket_url(base_url: str) -> str:
    """http(s)://host[/prefix] or ws(s)://... -> ws(s)://host[/prefix]/ws."""
    url = base_url.rstrip("/")
    for old, new in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(old):
            url = new + url[len(old) :]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url if url.endswith("/ws") else url + "/ws"


def _error_code(reply: dict[str, Any]) -> str | None:
    """An error frame's code (None for any other frame)."""
    return str((reply.get("data") or {}).get("code", "UNKNOWN")) if reply.get("type") == "error" else None


class AsyncEnvClient(Generic[ActT, ObsT, StateT]):
    """One environment session on a server, over one WebSocket (opened on first use)."""

    observation_type: ClassVar[type[Observation]] = AnyObservation
    state_type: ClassVar[type[State]] = State
    #: The registry name `from_local()` starts when no name is given.
    env_name: ClassVar[str | None] = None

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 60.0,
        max_message_size_mb: float = 100.0,
        ping_interval_s: float | None = 20.0,
        ping_timeout_s: float | None = 20.0,
        request_timeout_s: float | None = None,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        # `request_timeout_s` / `default_headers`: the names eval-protocol passes.
        self.base_url = base_url.rstrip("/")
        self.ws_url = websocket_url(base_url)
        self.headers = {**(default_headers or {}), **(headers or {}), **launchers.auth_headers(token)}
        self.connect_timeout_s = connect_timeout_s
        self.message_timeout_s = request_timeout_s or message_timeout_s
        self.max_message_bytes = int(max_message_size_mb * 1024 * 1024)
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self._ws: ClientConnection | None = None
        self._lock = asyncio.Lock()
        self._owned: Any = None  # a launched server (subprocess, container) this client stops on close
        self._closing: set[asyncio.Task] = set()

    # -- the session ------------------------------------------------------------------
    async def connect(self) -> AsyncEnvClient[ActT, ObsT, StateT]:
        """Open the WebSocket now (otherwise the first call does)."""
        if self._ws is None:
            try:
                self._ws = await connect(
                    self.ws_url,
                    open_timeout=self.connect_timeout_s,
                    max_size=self.max_message_bytes,
                    ping_interval=self.ping_interval_s,
                    ping_timeout=self.ping_timeout_s,
                    additional_headers=self.headers or None,
                )
            except (TimeoutError, OSError, InvalidHandshake) as exc:
                raise ConnectionError(
                    f"Could not connect to {self.ws_url}: {type(exc).__name__}: {exc}"
                ) from exc
        return self

    async def reset(self, **kwargs: Any) -> StepResult[ObsT]:
        """Start an episode: `seed`, `episode_id` and env options (e.g. `task=`)."""
        return self._parse_result(await self._request("reset", kwargs))

    async def step(self, action: ActT) -> StepResult[ObsT]:
        return self._parse_result(await self._request("step", self._step_payload(action)))

    async def state(self) -> StateT:
        return self._parse_state(await self._request("state", {}))

    async def reset_and_state(self, **kwargs: Any) -> tuple[StepResult[ObsT], StateT]:
        """`reset`, then `state`, in one round trip: both frames go out before either reply
        is read (the server answers a session's messages in order)."""
        result, state = await self._exchange([("reset", kwargs), ("state", {})])
        return self._parse_result(result), self._parse_state(state)

    async def step_and_state(self, action: ActT) -> tuple[StepResult[ObsT], StateT]:
        """`step`, then `state`, in one round trip (see `reset_and_state`)."""
        result, state = await self._exchange([("step", self._step_payload(action)), ("state", {})])
        return self._parse_result(result), self._parse_state(state)

    async def close(self) -> None:
        """End the session (the server closes its environment) and stop an owned server."""
        ws, self._ws = self._ws, None
        try:
            if ws is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.send(json.dumps({"type": "close"})), 2.0)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(ws.close(), 5.0)
            if self._closing:
                await asyncio.wait(list(self._closing), timeout=5.0)
        finally:
            owned, self._owned = self._owned, None
            if owned is not None:
                await asyncio.to_thread(owned.stop)

    async def __aenter__(self: ClientT) -> ClientT:
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _request(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        return (await self._exchange([(kind, data)]))[0]

    async def _exchange(self, requests: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Send every request, then read their replies in order; the first error frame is
        raised once every reply is in (so the next exchange pairs with its own replies)."""
        async with self._lock:  # one exchange in flight per session: replies come in order
            await self.connect()
            ws = self._ws
            assert ws is not None
            for kind, data in requests:
                try:  # OpenEnv's servers reject a `data` field on state messages
                    await ws.send(
                        json.dumps({"type": kind} if kind == "state" else {"type": kind, "data": data})
                    )
                except ConnectionClosed:
                    break  # a refusal (capacity, token) is queued before the close: read it below
            replies = []
            for kind, _ in requests:
                replies.append(await self._reply(ws, kind))
                if _error_code(replies[-1]) in _SESSION_ENDING:
                    break  # the server has closed the connection: nothing more comes
        errors = [reply.get("data") or {} for reply in replies if reply.get("type") == "error"]
        if errors:
            error = ActionRefused(errors[0]) if errors[0].get("invalid_action") else EnvServerError(errors[0])
            if error.code in _SESSION_ENDING:
                self._drop(ws)
            raise error
        return [reply.get("data") or {} for reply in replies]

    async def _reply(self, ws: ClientConnection, kind: str) -> dict[str, Any]:
        try:
            return json.loads(await asyncio.wait_for(ws.recv(), self.message_timeout_s))
        except (TimeoutError, asyncio.CancelledError) as exc:
            self._drop(ws)  # a late reply would pair with the next request
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise TimeoutError(
                f"No reply to {kind!r} from {self.ws_url} within {self.message_timeout_s}s"
            ) from None
        except ConnectionClosed as exc:
            self._drop(ws)
            raise ConnectionError(f"The server closed the connection ({exc}); the session is gone") from None

    def _drop(self, ws: ClientConnection) -> None:
        """Forget a socket now and close it in the background (`close()` waits for that)."""
        if self._ws is ws:
            self._ws = None
        task = asyncio.get_running_loop().create_task(ws.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- env-specific hooks (OpenEnv's names) -----------------------------------------
    def _step_payload(self, action: ActT) -> dict[str, Any]:
        if isinstance(action, BaseModel):
            return action.model_dump(mode="json")
        if isinstance(action, dict):
            return action
        raise TypeError(f"Cannot send {type(action).__name__} as an action; pass a pydantic Action or a dict")

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ObsT]:
        fields = {
            **payload.get("observation", {}),
            "reward": payload.get("reward"),
            "done": payload.get("done", False),
        }
        observation = self.observation_type.model_validate(fields)
        reward = payload.get("reward")
        return StepResult(
            observation=observation,
            reward=None if reward is None else float(reward),
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: dict[str, Any]) -> StateT:
        return self.state_type.model_validate(payload)

    # -- ways to get one --------------------------------------------------------------
    @classmethod
    async def from_local(
        cls: type[ClientT],
        name: str | None = None,
        *,
        token: str | None = None,
        server_args: list[str] | None = None,
        startup_timeout_s: float = 60.0,
        client_options: dict[str, Any] | None = None,
        env_vars: dict[str, str] | None = None,
        **env_options: Any,
    ) -> ClientT:
        """Start `envharness serve NAME` (a subprocess on a free loopback port) and connect;
        `close()` stops the process. `server_args`: e.g. `["--max-sessions", "4"]`; `env_vars`:
        the server's environment variables, as `from_docker_image` takes them."""
        server = await asyncio.to_thread(
            launchers.launch_local,
            cls._name(name),
            token=token,
            options=env_options,
            server_args=server_args,
            startup_timeout_s=startup_timeout_s,
            env_vars=env_vars,
        )
        return cls._owning(server, token=token, **(client_options or {}))

    launch = from_local

    @classmethod
    async def from_docker_image(
        cls: type[ClientT],
        image: str,
        *,
        env_vars: dict[str, str] | None = None,
        port: int | None = None,
        token: str | None = None,
        provider: Any = None,
        startup_timeout_s: float = 120.0,
        client_options: dict[str, Any] | None = None,
    ) -> ClientT:
        """`docker run -d -p PORT:8000 -e K=V IMAGE`, wait for /health, connect; `close()`
        removes the container. Raises `DockerUnavailableError` where no engine runs."""
        if provider is not None:
            raise ValueError("envharness starts containers itself; `provider` must be None")
        container = await asyncio.to_thread(
            launchers.launch_docker,
            image,
            env_vars=env_vars,
            port=port,
            token=token,
            startup_timeout_s=startup_timeout_s,
        )
        return cls._owning(container, token=token, **(client_options or {}))

    @classmethod
    async def from_hub(
        cls: type[ClientT],
        repo_id: str,
        *,
        use_docker: bool = True,
        tag: str = "latest",
        env_vars: dict[str, str] | None = None,
        port: int | None = None,
        token: str | None = None,
        provider: Any = None,
        client_options: dict[str, Any] | None = None,
    ) -> ClientT:
        """A Hugging Face Space: its image `registry.hf.space/OWNER-NAME:TAG` run with Docker
        (OpenEnv's default), or with `use_docker=False` the Space itself at
        `https://OWNER-NAME.hf.space` (`token`: an HF token for private Spaces)."""
        if not use_docker:
            return cls(launchers.hub_url(repo_id), token=token, **(client_options or {}))
        return await cls.from_docker_image(
            launchers.hub_image(repo_id, tag),
            env_vars=env_vars,
            port=port,
            provider=provider,
            client_options=client_options,
        )

    @classmethod
    def _name(cls, name: str | None) -> str:
        name = name or cls.env_name
        if not name:
            raise ValueError(f"{cls.__name__}.from_local needs an environment name (e.g. 'echo')")
        return name

    @classmethod
    def _owning(cls: type[ClientT], server: Any, **options: Any) -> ClientT:
        client = cls(server.base_url, **options)
        client._owned = server
        return client


class _LoopThread:
    """A private event loop on a daemon thread; `run(coro)` blocks for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="envharness-client-loop", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if not self.thread.is_alive():
            coro.close()
            raise RuntimeError("This client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(_cancel_other_tasks())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


async def _cancel_other_tasks() -> None:
    """Leftovers (a socket's keepalive) end cleanly instead of dying with the loop."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class EnvClient(Generic[ActT, ObsT, StateT]):
    """The synchronous client: `AsyncEnvClient`'s names, blocking."""

    async_client_class: ClassVar[type[AsyncEnvClient]] = AsyncEnvClient

    def __init__(self, base_url: str, **options: Any) -> None:
        """Same options as `AsyncEnvClient` (token, headers, timeouts, ...)."""
        self._loop = _LoopThread()
        self.async_client = self.async_client_class(base_url, **options)

    @property
    def base_url(self) -> str:
        return self.async_client.base_url

    def connect(self) -> EnvClient[ActT, ObsT, StateT]:
        self._loop.run(self.async_client.connect())
        return self

    def reset(self, **kwargs: Any) -> StepResult[ObsT]:
        return self._loop.run(self.async_client.reset(**kwargs))

    def step(self, action: ActT) -> StepResult[ObsT]:
        return self._loop.run(self.async_client.step(action))

    def state(self) -> StateT:
        return self._loop.run(self.async_client.state())

    def reset_and_state(self, **kwargs: Any) -> tuple[StepResult[ObsT], StateT]:
        return self._loop.run(self.async_client.reset_and_state(**kwargs))

    def step_and_state(self, action: ActT) -> tuple[StepResult[ObsT], StateT]:
        return self._loop.run(self.async_client.step_and_state(action))

    async def call_async(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Await `async_client.<method>(...)` from another event loop: one hop to this client's
        loop thread and back, with no worker thread blocked in between (`ClientPool`'s async
        leases call their clients so)."""
        if not self._loop.thread.is_alive():
            raise RuntimeError("This client is closed")
        coro = getattr(self.async_client, method)(*args, **kwargs)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop.loop))

    def close(self) -> None:
        try:
            if self._loop.thread.is_alive():
                self._loop.run(self.async_client.close())
        finally:
            self._loop.stop()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def from_local(cls, name: str | None = None, **kwargs: Any) -> EnvClient[ActT, ObsT, StateT]:
        """See `AsyncEnvClient.from_local`."""
        return cls._wrap(lambda: cls.async_client_class.from_local(name, **kwargs))

    launch = from_local

    @classmethod
    def from_docker_image(cls, image: str, **kwargs: Any) -> EnvClient[ActT, ObsT, StateT]:
        """See `AsyncEnvClient.from_docker_image`."""
        return cls._wrap(lambda: cls.async_client_class.from_docker_image(image, **kwargs))

    @classmethod
    def from_hub(cls, repo_id: str, **kwargs: Any) -> EnvClient[ActT, ObsT, StateT]:
        """See `AsyncEnvClient.from_hub`."""
        return cls._wrap(lambda: cls.async_client_class.from_hub(repo_id, **kwargs))

    @classmethod
    def _wrap(cls, make: Any) -> EnvClient[ActT, ObsT, StateT]:
        client = cls.__new__(cls)
        client._loop = _LoopThread()
        try:
            client.async_client = client._loop.run(make())
        except BaseException:
            client._loop.stop()
            raise
        return client


def with_state(client: Any, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """(`client.reset` or `client.step`'s result, the state after it): in one round trip where
    the client offers it (`step_and_state`), else two calls (OpenEnv's clients, a user's; None
    for the state of a client without `state`)."""
    both = getattr(client, f"{method}_and_state", None)
    if callable(both):
        return both(*args, **kwargs)
    result, state = getattr(client, method)(*args, **kwargs), getattr(client, "state", None)
    return result, state() if callable(state) else None


async def with_state_async(client: Any, method: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """`with_state` for an async client."""
    both = getattr(client, f"{method}_and_state", None)
    if callable(both):
        return await both(*args, **kwargs)
    result, state = await getattr(client, method)(*args, **kwargs), getattr(client, "state", None)
    return result, await state() if callable(state) else None


@functools.cache
def sync_client_class(async_class: type[AsyncEnvClient]) -> type[EnvClient]:
    """The sync client over `async_class` (an environment that names only its async client);
    one class per async class."""
    return type(
        async_class.__name__.removeprefix("Async") or "SyncClient",
        (EnvClient,),
        {"async_client_class": async_class},
    )
