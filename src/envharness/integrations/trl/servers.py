"""Where a training run's episodes are played: clients of a server of the environment, started
on loopback for the run or already running, a fleet of them, or one server's URL for agents
that play through its `/mcp`.

The fleet and the local server are imported when a run asks for them (Ray and the server's
dependencies are optional; the command line starts faster without them).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from envharness.core.client import sync_client_class
from envharness.core.client_pool import ClientPool
from envharness.core.registry import DEFAULT_ENV, resolved, servable_elsewhere
from envharness.integrations.trl import ranks
from envharness.integrations.trl.prompting import EnvRef


def train_server_options(env: EnvRef = DEFAULT_ENV) -> dict[str, Any]:
    """The options `train` starts its own server of `env` with (`EnvHarness.train_server_options`)."""
    return dict(resolved(env).require_harness().train_server_options)


@contextlib.contextmanager
def env_clients(
    env: EnvRef = DEFAULT_ENV,
    env_url: str | None = None,
    *,
    env_urls: list[str] | None = None,
    servers: int = 0,
    ray_address: str | None = None,
    env_options: dict[str, Any] | None = None,
) -> Iterator[Callable[[], Any]]:
    """A factory of pooled clients of `env` (one lease per episode) on `env_url`, or on a server
    started on loopback for the duration of the block; with `env_urls` or `servers`, a fleet
    router spreading the episodes over many servers (`envharness.fleet`). Under a launcher the
    server on loopback is one per machine, shared by its ranks."""
    env = resolved(env, env_options)
    options = {**train_server_options(env), **(env_options or {})}
    if env_urls or servers:
        from envharness.fleet.start import open_fleet  # Ray, only when asked for

        with open_fleet(
            env.name, env_urls=env_urls or [], servers=servers, ray_address=ray_address, env_options=options
        ) as router:
            yield router
        return
    with contextlib.ExitStack() as stack:
        if not env_url:  # under a launcher: one server per machine, shared by its ranks
            env_url = stack.enter_context(ranks.one_per_machine(lambda: _server_url(env.name, options)))
        pool = ClientPool(functools.partial(sync_client_class(env.client_class), base_url=env_url))
        stack.callback(pool.close)
        yield pool


@contextlib.contextmanager
def agent_env_url(
    env: EnvRef, env_url: str | None, env_options: dict[str, Any] | None = None
) -> Iterator[str]:
    """The URL of a server of `env` (with `/mcp`) for agents that play through MCP: `env_url`,
    or a server started on loopback for the duration of the block. The agent's tools may not
    choose a seat or a seed there (`AGENT_FIXED`): the seat is the server's, the seed the
    rollout's (its MCP URL, `policy/agents.py`), so no rollout replays a deal from another seat."""
    if env_url:
        yield env_url
        return
    env = resolved(env, env_options)
    options = {**train_server_options(env), **(env_options or {}), "mcp_fixed": AGENT_FIXED}
    with _local_server(env.name, options) as server:
        yield server.base_url


#: The reset options `train --agent`'s own server keeps from the agent's MCP tools.
AGENT_FIXED = "seat,seed"


@contextlib.contextmanager
def mix_clients(
    envs: dict[str, Any], options: dict[str, dict[str, Any]] | None = None
) -> Iterator[dict[str, Callable[[], Any]]]:
    """A client factory per environment of a mix, each on a server of its own (`env_clients`),
    started with that environment's `options` (an opponent the server plays) and no other's."""
    options = options or {}
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(env_clients(env, env_options=options.get(name)))
            for name, env in envs.items()
        }


@contextlib.contextmanager
def _server_url(name: str, options: dict[str, Any]) -> Iterator[str]:
    with _local_server(name, options) as server:
        yield server.base_url


def _local_server(name: str, options: dict[str, Any]) -> Any:
    """A server of `name` on loopback for this run, as a context manager with `base_url`: a
    process of its own where a new process can serve `name` (`servable_elsewhere`), so that
    the environment's Python work (game logic, observations, the browser's driver) never holds
    the interpreter lock that the decoding thread and the rollout's event loop need; else (an
    environment the program registered itself, or settings only a thread takes) a thread."""
    from envharness.core import launchers  # the server's stack (uvicorn), only when started here

    settings = {k for k in options if k in launchers.SERVER_SETTINGS}
    if not servable_elsewhere(name) or settings - set(launchers.SERVE_FLAGS):
        return launchers.LocalServer(name, **options)
    return _server_process(name, options)


@contextlib.contextmanager
def _server_process(name: str, options: dict[str, Any]) -> Iterator[Any]:
    from envharness.core.launchers import SERVE_FLAGS, SERVER_SETTINGS, ServerProcess

    flags = [
        str(part) for key, flag in SERVE_FLAGS.items() if key in options for part in (flag, options[key])
    ]
    environment = {k: v for k, v in options.items() if k not in SERVER_SETTINGS}
    path = os.pathsep.join(p for p in sys.path if p)  # a `module:attribute` imports there as here
    server = ServerProcess(name, options=environment, server_args=flags, env_vars={"PYTHONPATH": path})
    try:
        yield server
    finally:
        server.stop()
