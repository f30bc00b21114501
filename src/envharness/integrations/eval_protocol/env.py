"""Environment clients for Eval Protocol rollouts: how they are made, and every call bounded.

`EpisodeEnv` makes any client async for the rollout loop: async clients are awaited,
sync ones (OpenEnv's `EnvClient`, envharness's `EnvClient`) run in worker threads, so a
slow environment never blocks the event loop that the other rows share. Each call has a
timeout (`EnvTimeoutError`), and calls that fail for transient reasons (refused or
dropped connections) are retried with exponential backoff. A timed-out call is never
retried: the action may already have run.

`EnvConnector` makes one client per episode, as OpenEnv's processor did: from your
`env_factory`, from `env_client_cls` with `env_base_url`, `hub_repo_id` or `docker_image`
(one server per episode; its task goes in `env_vars[task_var]` because such servers read
their task at start), or -- new -- from a local envharness server that the connector
starts once (`envharness serve NAME`, NAME the client's `env_name`) and shares between all episodes, one session
each; there the task goes to `reset(task=...)`. A `docker_image` of an OpenEnv environment that
envharness serves itself (an image named after one of its environments, `NAME-env`) runs the same
way where no Docker engine is at hand, one local server per distinct `env_vars` (a warning
says so): the seed's Docker-based examples run here with only their imports changed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from envharness.core.concurrency import call_maybe_async

logger = logging.getLogger(__name__)


class EnvTimeoutError(TimeoutError):
    """An environment call (reset/step) took longer than its timeout."""


def is_transient(exc: BaseException) -> bool:
    """Errors where trying again may work: the connection, not the request, failed."""
    if isinstance(exc, TimeoutError):
        return False
    if isinstance(exc, (ConnectionError, EOFError)):
        return True
    try:
        import httpx

        if isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.TimeoutException):
            return True
    except ImportError:  # pragma: no cover - httpx is a dependency
        pass
    try:
        from websockets.exceptions import ConnectionClosedError, InvalidHandshake

        if isinstance(exc, (ConnectionClosedError, InvalidHandshake)):
            return True
    except ImportError:  # pragma: no cover - websockets is a dependency
        pass
    return False


class EpisodeEnv:
    """One episode's client: async, every call bounded by a timeout, transient failures retried."""

    def __init__(
        self,
        client: Any,
        *,
        step_timeout_s: float,
        reset_timeout_s: float,
        retries: int = 2,
        backoff_s: float = 0.5,
    ):
        self.client = client
        self.step_timeout_s = step_timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self.retried = 0  # how many calls were tried again, for the row's metadata

    async def reset(self, **kwargs: Any) -> Any:
        return await self._call("reset", self.reset_timeout_s, **kwargs)

    async def step(self, action: Any) -> Any:
        return await self._call("step", self.step_timeout_s, action)

    async def close(self) -> None:
        """Close the client; a close that fails or hangs is logged, never raised."""
        close = getattr(self.client, "aclose", None) or getattr(self.client, "close", None)
        if close is None:
            return
        try:
            await asyncio.wait_for(call_maybe_async(close), self.reset_timeout_s)
        except Exception as exc:  # the episode's outcome matters more than its clean-up
            logger.warning("closing the environment client failed: %s: %s", type(exc).__name__, exc)

    async def _call(self, name: str, timeout_s: float, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.client, name)
        for attempt in range(self.retries + 1):
            try:
                return await asyncio.wait_for(call_maybe_async(method, *args, **kwargs), timeout_s)
            except TimeoutError as exc:
                raise EnvTimeoutError(f"env.{name}() did not answer within {timeout_s:g} s") from exc
            except Exception as exc:
                if attempt == self.retries or not is_transient(exc):
                    raise
                delay = self.backoff_s * 2**attempt
                logger.warning(
                    "env.%s() failed (%s: %s); retrying in %.1f s", name, type(exc).__name__, exc, delay
                )
                self.retried += 1
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The kwargs `fn` accepts (all of them if it takes **kwargs); None values dropped."""
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


class EnvConnector:
    """Makes the client of each episode; see the module docstring for the ways."""

    def __init__(
        self,
        *,
        env_factory: Callable[[], Any] | None,
        env_client_cls: type | None,
        env_base_url: str | None,
        hub_repo_id: str | None,
        docker_image: str | None,
        env_vars: dict[str, str],
        task_var: str | None,
        provider: Any,
        docker_port: int | None,
        request_timeout_s: float,
        default_headers: dict[str, str] | None,
        launch_options: dict[str, Any],
    ):
        if env_factory is None and env_client_cls is None:
            raise ValueError(
                "OpenEnvRolloutProcessor needs env_factory or env_client_cls to make environments"
            )
        self.env_factory = env_factory
        self.env_client_cls = env_client_cls
        self.env_base_url = env_base_url
        self.hub_repo_id = hub_repo_id
        self.docker_image = docker_image
        self.env_vars = env_vars
        self.task_var = task_var
        self.provider = provider
        self.docker_port = docker_port
        self.request_timeout_s = request_timeout_s
        self.default_headers = default_headers
        self.launch_options = launch_options
        self._servers: dict[tuple[tuple[str, str], ...], Any] = {}
        self._server_lock: asyncio.Lock | None = None

    @property
    def mode(self) -> str:
        if self.env_factory is not None:
            return "factory"
        if self.env_base_url:
            return "base_url"
        if self.hub_repo_id:
            return "hub"
        if self.docker_image:
            return "docker"
        return "local"

    @property
    def task_in_env_vars(self) -> bool:
        """Whether a task is chosen by starting a server with `env_vars[task_var]` (else by reset)."""
        return self.mode in ("hub", "docker")

    async def open(self, task: str | None) -> Any:
        """A connected client for one episode (its own server in hub/docker mode)."""
        mode = self.mode
        if mode == "factory":
            return await call_maybe_async(self.env_factory)
        cls = self.env_client_cls
        if mode == "base_url":
            return cls(
                base_url=self.env_base_url,
                **_accepted(
                    cls,
                    {"request_timeout_s": self.request_timeout_s, "default_headers": self.default_headers},
                ),
            )
        if mode == "local":
            server = await self._local_server()
            return cls(base_url=server.base_url)
        env_vars = dict(self.env_vars)
        if task is not None:
            env_vars[self.task_var] = task  # type: ignore[index]  # task_var checked by the processor
        launch = cls.from_hub if mode == "hub" else cls.from_docker_image
        target = self.hub_repo_id if mode == "hub" else self.docker_image
        kwargs = _accepted(
            launch, {"provider": self.provider, "env_vars": env_vars or None, "port": self.docker_port}
        )
        try:
            return await call_maybe_async(launch, target, **kwargs)
        except Exception as exc:
            from envharness.core.launchers import DockerUnavailableError

            if (
                mode != "docker"
                or not isinstance(exc, DockerUnavailableError)
                or not self._serves_image(self.docker_image)
            ):
                raise
            server = await self._local_server(env_vars)
            return cls(base_url=server.base_url)

    def _env_name(self) -> str | None:
        """The envharness environment the client names (`env_name`), if any."""
        cls = self.env_client_cls
        return getattr(cls, "env_name", None) or getattr(
            getattr(cls, "async_client_class", None), "env_name", None
        )

    def _serves_image(self, image: str | None) -> bool:
        """Whether `image` is OpenEnv's image of the environment the client names
        (`<name>-env[:tag]`, optionally under a registry path)."""
        name = self._env_name()
        base = (image or "").rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
        return bool(name) and base in (f"{name}-env", f"{name}_env", f"openenv-{name}-env")

    async def _local_server(self, env_vars: dict[str, str] | None = None) -> Any:
        """Start a local server (`envharness serve NAME`, with `env_vars` in its environment)
        on first use of those variables; later episodes share it."""
        key = tuple(sorted((env_vars or {}).items()))
        if key in self._servers:
            return self._servers[key]
        if self._server_lock is None:
            self._server_lock = asyncio.Lock()
        async with self._server_lock:
            if key not in self._servers:
                from envharness.core.launchers import launch_local

                name = self._env_name()
                if not name:
                    raise ValueError(
                        f"{self.env_client_cls.__name__} names no envharness environment to start locally; pass "
                        "env_base_url, docker_image, hub_repo_id or env_factory"
                    )
                if env_vars:
                    logger.warning(
                        "no Docker engine: serving %s for image %s locally (envharness serve %s) with %s",
                        name,
                        self.docker_image,
                        name,
                        ", ".join(f"{k}={v}" for k, v in key),
                    )
                server = await asyncio.to_thread(
                    launch_local, name, options=self.launch_options, env_vars=dict(key)
                )
                self._servers[key] = server
                logger.info("started a local %s server at %s", name, server.base_url)
        return self._servers[key]

    async def aclose(self) -> None:
        """Stop the local servers that were started."""
        servers, self._servers, self._server_lock = list(self._servers.values()), {}, None
        for server in servers:
            await asyncio.to_thread(server.stop)
