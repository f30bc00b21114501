"""Ways to get a running server: in-process (`LocalServer`), a subprocess
(`launch_local`), a Docker container (`launch_docker`), a Hugging Face Space (`hub_url`).

Launched servers (`ServerProcess`, `DockerContainer`) have `base_url` and `stop()`; the
clients' `from_local` / `from_docker_image` / `from_hub` own one and stop it on close.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import json
import os
import re
import shutil
import subprocess
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from fastapi import FastAPI

TOKEN_ENV_VAR = "ENVHARNESS_TOKEN"
_LISTENING = re.compile(r"listening on (http://\S+)")


class LaunchError(RuntimeError):
    """A server could not be started; the message says why (with its last output)."""


class DockerUnavailableError(LaunchError):
    """No Docker engine answers; use `from_local(...)` or a `base_url` instead."""


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def wait_for_health(
    base_url: str, *, token: str | None = None, timeout_s: float = 60.0, alive: Any = lambda: True
) -> None:
    """Poll GET /health until it answers 200; `alive()` False means give up early."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    with httpx.Client(timeout=2.0, headers=auth_headers(token)) as http:
        while time.monotonic() < deadline:
            if not alive():
                raise LaunchError(f"the server at {base_url} exited before becoming healthy")
            try:
                reply = http.get(f"{base_url}/health")
                if reply.status_code == 200:
                    return
                last = f"HTTP {reply.status_code}: {reply.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
    raise LaunchError(f"{base_url}/health did not answer 200 within {timeout_s:.0f}s (last: {last})")


#: The server's own settings among a server's options (the others configure the environment),
#: and the `envharness serve` flag of each that a child process is given on its command line.
SERVER_SETTINGS = ("max_sessions", "idle_timeout_s", "token", "max_message_bytes", "mcp", "web", "mcp_fixed")
SERVE_FLAGS = {
    "max_sessions": "--max-sessions",
    "idle_timeout_s": "--idle-timeout",
    "max_message_bytes": "--max-message-bytes",
    "mcp_fixed": "--mcp-fixed",
}


# -- in-process -----------------------------------------------------------------------
class LocalServer:
    """uvicorn in a background thread on a free loopback port, for tests and embedding.

    `LocalServer(app)` serves a FastAPI app; `LocalServer("echo", **env_options)` builds
    one from the registry (server settings: max_sessions, idle_timeout_s, token,
    max_message_bytes, mcp, web). Use as a context manager, or call `close()`.
    """

    def __init__(
        self,
        app: FastAPI | str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 30.0,
        ping_interval_s: float = 20.0,
        **options: Any,
    ) -> None:
        # the server framework loads here, not with the module: a client that only connects needs none
        from envharness.core.server import bind_socket, create_app, uvicorn_server

        if isinstance(app, str):
            from envharness.core.registry import make_factory

            settings = {k: options.pop(k) for k in SERVER_SETTINGS if k in options}
            app = create_app(make_factory(app, **options), name=app, **settings)
        elif options:
            raise TypeError(
                f"options {sorted(options)} only apply when LocalServer is given an environment name"
            )
        self.app = app
        self.server = uvicorn_server(app, ping_interval_s=ping_interval_s, ping_timeout_s=ping_interval_s)
        self.loop: asyncio.AbstractEventLoop | None = None
        sock = bind_socket(host, port)
        self.base_url = f"http://{host}:{sock.getsockname()[1]}"
        self._thread = threading.Thread(
            target=self._run, args=(sock,), name=f"envharness-server-{self.base_url}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + startup_timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise LaunchError(f"the in-process server at {self.base_url} did not start")
            time.sleep(0.01)

    def _run(self, sock: Any) -> None:
        async def serve() -> None:
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[sock])

        asyncio.run(serve())
        sock.close()

    @property
    def url(self) -> str:
        return self.base_url

    def close(self) -> None:
        """Graceful shutdown: connections close, every environment and the factory close."""
        self.server.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- subprocess -----------------------------------------------------------------------
class ServerProcess:
    """`envharness serve NAME` in a child process; `stop()` shuts it down gracefully.

    The child never outlives this process: it is stopped at interpreter exit, and it stops
    by itself when this process dies in any way (see `core/lifecycle.py`). Setting `cancel`
    (a `threading.Event`) while it starts stops it and raises `LaunchError`.

    The one way envharness starts a server process and reads its output; a subclass changes
    how the child is tied to its parent (`_parent_death_args`, `_popen_options`) and how it
    ends (`_terminate`), as the fleet's `WatchedServer` does.
    """

    #: The line the child prints once it listens; its group is the URL (`base_url`).
    listening = _LISTENING

    def __init__(
        self,
        name: str,
        *,
        host: str = "127.0.0.1",
        token: str | None = None,
        options: dict[str, Any] | None = None,
        server_args: list[str] | None = None,
        startup_timeout_s: float = 60.0,
        env_vars: dict[str, str] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        command = [
            "serve",
            name,
            "--host",
            host,
            "--port",
            "0",
            *self._parent_death_args(),
            *(server_args or []),
        ]
        for key, value in (options or {}).items():
            command += ["--option", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
        env = {
            **os.environ,
            **{k: str(v) for k, v in (env_vars or {}).items()},
        }  # e.g. OpenEnv's BROWSERGYM_* settings
        env.pop(TOKEN_ENV_VAR, None)
        if token:
            env[TOKEN_ENV_VAR] = token  # not on the command line, where `ps` shows it
        self.token = token
        self._launch(command, env, f"envharness serve {name}", startup_timeout_s, cancel or threading.Event())

    def _launch(
        self,
        cli_args: list[str],
        env: dict[str, str],
        what: str,
        startup_timeout_s: float,
        cancel: threading.Event,
    ) -> None:
        """Start `envharness CLI_ARGS`, read its output, wait for its URL line, then for `_wait_ready`."""
        from envharness.core.child_python import child_environ, python_command
        from envharness.core.lifecycle import spawn

        # -P: nothing is imported from the folder the user stands in (`core/child_python.py`)
        command = python_command(
            "-c", "import sys; from envharness.cli import main; sys.exit(main())", *cli_args
        )
        self.output: collections.deque[str] = collections.deque(maxlen=40)
        self._url_seen = threading.Event()
        self.base_url = ""
        self.process = spawn(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=child_environ(env),
            **self._popen_options(),
        )
        _LIVE.add(self)
        threading.Thread(
            target=self._read_output, name=f"{what.replace(' ', '-')}-output", daemon=True
        ).start()
        try:
            deadline = time.monotonic() + startup_timeout_s
            while not self._url_seen.wait(0.1) and time.monotonic() < deadline and not cancel.is_set():
                pass
            if cancel.is_set():
                raise LaunchError(f"`{what}` start was cancelled")
            if not self.base_url:
                raise LaunchError(f"`{what}` did not start: {self._tail()}")
            self._wait_ready(startup_timeout_s, cancel)
            if cancel.is_set():
                raise LaunchError(f"`{what}` start was cancelled")
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float, cancel: threading.Event) -> None:
        """A server is ready when its `/health` answers."""
        wait_for_health(
            self.base_url,
            token=self.token,
            timeout_s=timeout_s,
            alive=lambda: self.process.poll() is None and not cancel.is_set(),
        )

    def _parent_death_args(self) -> list[str]:
        """`serve` flags that stop the child gracefully once this process is gone."""
        return ["--exit-with-parent", str(os.getpid())]

    def _popen_options(self) -> dict[str, Any]:
        """Extra `Popen` options (a session of its own, a pre-exec hook) for subclasses."""
        return {}

    def _read_output(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line.rstrip())
            match = self.listening.search(line)
            if match and not self.base_url:
                self.base_url = match.group(1)
                self._url_seen.set()
        self._url_seen.set()  # the process exited

    def _tail(self) -> str:
        code = self.process.poll()
        status = "still running" if code is None else f"exit code {code}"
        return f"{status}; last output:\n" + "\n".join(self.output)

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the server (SIGTERM, SIGKILL after `timeout_s`); no longer stopped at exit."""
        self._terminate(timeout_s)
        _LIVE.discard(self)

    def _terminate(self, timeout_s: float) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


#: Servers started by this process and not stopped yet: stopped at interpreter exit.
_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE):
        server.stop(timeout_s=10.0)


def launch_local(name: str, **kwargs: Any) -> ServerProcess:
    """Start `envharness serve NAME` on a free loopback port and wait for /health."""
    return ServerProcess(name, **kwargs)


async def launch_local_async(name: str, **kwargs: Any) -> ServerProcess:
    """`launch_local` for async code, safe to cancel: a cancelled start stops the server
    before the cancellation goes on (nothing is left running for nobody to stop)."""
    cancel = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(
        None, lambda: ServerProcess(name, cancel=cancel, **kwargs)
    )
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        cancel.set()
        try:
            server = await future  # returns (or raises LaunchError) promptly once cancelled
        except BaseException:
            raise asyncio.CancelledError from None
        await asyncio.to_thread(server.stop)
        raise


# -- Docker ---------------------------------------------------------------------------
def _docker(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout_s)


def require_docker() -> None:
    """Raise `DockerUnavailableError` unless the docker CLI reaches an engine."""
    if shutil.which("docker") is None:
        raise DockerUnavailableError(
            "The docker CLI is not installed; use from_local(...) or base_url= instead"
        )
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout_s=20)
    except subprocess.TimeoutExpired:
        raise DockerUnavailableError("`docker info` timed out: no Docker engine answers") from None
    if info.returncode != 0:
        reason = (info.stderr or info.stdout).strip().splitlines()
        raise DockerUnavailableError(
            "No Docker engine is reachable (`docker info` failed: "
            + (reason[-1] if reason else f"exit {info.returncode}")
            + "). "
            "Start Docker, or run the environment without it: from_local(NAME) or base_url=..."
        )


class DockerContainer:
    """`docker run -d -p 127.0.0.1:PORT:8000 -e K=V IMAGE`; `stop()` removes it."""

    def __init__(
        self,
        image: str,
        *,
        env_vars: dict[str, str] | None = None,
        port: int | None = None,
        token: str | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        require_docker()
        if port is None:
            from envharness.core.server import bind_socket

            with bind_socket("127.0.0.1", 0) as probe:
                port = probe.getsockname()[1]
        command = ["run", "-d", "-p", f"127.0.0.1:{port}:8000"]
        for key, value in (env_vars or {}).items():
            command += ["-e", f"{key}={value}"]
        started = _docker(*command, image, timeout_s=600)
        if started.returncode != 0:
            raise LaunchError(f"`docker run {image}` failed: {started.stderr.strip()}")
        self.container_id = started.stdout.strip()
        self.base_url = f"http://127.0.0.1:{port}"
        try:
            wait_for_health(self.base_url, token=token, timeout_s=startup_timeout_s)
        except LaunchError as exc:
            logs = _docker("logs", "--tail", "30", self.container_id)
            self.stop()
            raise LaunchError(f"{exc}\ncontainer logs:\n{logs.stdout}{logs.stderr}") from None

    def stop(self) -> None:
        _docker("rm", "-f", self.container_id)


def launch_docker(image: str, **kwargs: Any) -> DockerContainer:
    return DockerContainer(image, **kwargs)


# -- Hugging Face Spaces --------------------------------------------------------------
def hf_space_subdomain(repo_id: str) -> str:
    """`owner/my_env` -> `owner-my-env` (the Hub's rule for Space hosts and registry names)."""
    return re.sub(r"[^a-z0-9]", "-", repo_id.lower())


def hub_url(repo_id: str) -> str:
    return f"https://{hf_space_subdomain(repo_id)}.hf.space"


def hub_image(repo_id: str, tag: str = "latest") -> str:
    return f"registry.hf.space/{hf_space_subdomain(repo_id)}:{tag}"
