"""Soak: open/act/close cycles with hostile input mixed in, against each serving part, beside
the plain echo environment server as the reference. Prints markdown tables.

    PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/bench_soak.py            # 500 cycles each
    .venv/bin/python bench/bench_soak.py --quick --surfaces echo,textarena,policy

Every surface is a server in a child process (its PID is what is measured), driven over
loopback by this process, one cycle after another with no pause:

- **echo** (reference): `envharness serve echo`, `AsyncEchoEnv`.
- **textarena**: `envharness serve textarena` (Wordle-v0), `AsyncTextArenaEnv`.
- **browsergym**: `envharness serve browsergym` with `train`'s server options and the warm pool
  off (`warm_sessions=0`): every session opens its own browser context.
- **warm pool**: the same server with its warm pool (`warm_sessions=2`, the default); each
  session's first reset says whether it took a warm context (served as
  `bench_soak:counted_browsergym`, the real factory with its pool's `take` counted).
- **gym engine**: `--option engine=browsergym`: every session runs BrowserGym's own code in a
  worker process of its own.
- **policy**: `envharness policy --model tiny` with a token and small limits.

A cycle opens a session (a rollout), acts (a few valid actions or model calls) and closes it;
every `--hostile-every`-th cycle also sends one hostile input, the kinds in turn: malformed
frames, unknown message types, wrong action schemas, oversize messages, bad moves and action
strings (Python code, unknown functions, missing bids, unbalanced quotes), bad tokens, a client
that vanishes mid-call. A hostile input is *clear* when it gets an error (an error frame, a 4xx
with a reason, the action's error in the observation, an invalid move said by the game) or, for
a vanished client, its session is freed, and the same session (or server) then serves a valid
action. *errors* counts what was not the input's fault: an unexpected exception, a 5xx, an
error frame for a valid action, a lost session, a server that died.

RSS (MB), open file descriptors (`/proc/PID/fd`) and descendant processes of the server are
sampled once the first `--warmup` cycles are done and again at the end, each after the
server went quiet (no session left, the same fds and processes for 1.5 s: a warm pool
refilled, a worker gone).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from envharness.core.launchers import ServerProcess  # noqa: E402
from envharness.core.lifecycle import set_parent_death_signal  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
TASKS = ("click-test", "click-button")
#: What `train` starts its browser server with (`agent.py`'s `train_server_options`).
TRAIN_BROWSER_OPTIONS: dict[str, Any] = {
    "pruned_html": False,
    "extra_properties": False,
    "action_timeout_ms": 1000.0,
}
POLICY_TOKEN = "soak-token"
POLICY_MAX_REQUEST_BYTES = 1 << 20
POLICY_MAX_CALLS = 4


# -- the warm pool's counters, inside the server ------------------------------------------------
def counted_browsergym(**options: Any) -> Any:
    """`envharness serve bench_soak:counted_browsergym`: the browsergym server's own factory,
    whose pool's `take` is counted. The server reports no pool counters; this says, in each
    reset's metadata (`warm_pool`), whether that reset took a warm context."""
    from envharness.envs.browsergym.factory import make_environment_factory

    return _CountingFactory(make_environment_factory(**options))


class _CountingFactory:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.took = self.missed = 0
        take = inner.pool.take

        def counted_take(task: str | None, *, exact: bool = False) -> Any:
            warm = take(task, exact=exact)
            if not exact:  # a new session's first reset (exact: a task change named in advance)
                if warm is None:
                    self.missed += 1
                else:
                    self.took += 1
            return warm

        inner.pool.take = counted_take

    def __call__(self) -> Any:
        env = self.inner()
        reset = env.reset_async

        async def reset_async(*args: Any, **kwargs: Any) -> Any:
            took, missed = self.took, self.missed
            observation = await reset(*args, **kwargs)
            observation.metadata = {
                **(observation.metadata or {}),
                "warm_pool": {
                    "took": self.took - took,
                    "missed": self.missed - missed,
                    "ready": self.inner.pool.ready,
                },
            }
            return observation

        env.reset_async = reset_async
        return env

    def task_list(self) -> Any:
        return self.inner.task_list()

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- what is measured ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    rss_mb: float
    fds: int
    children: int


def sample(pid: int) -> Sample:
    import psutil

    process = psutil.Process(pid)
    return Sample(
        process.memory_info().rss / 2**20,
        len(os.listdir(f"/proc/{pid}/fd")),
        len(process.children(recursive=True)),
    )


class NotClear(Exception):
    """A hostile input was answered without a clear error (accepted, or the wrong refusal)."""


@dataclass
class Tally:
    surface: str
    cycles: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    hostile_sent: int = 0
    hostile_clear: int = 0
    #: (hostile kind, what came back) -> count
    replies: collections.Counter = field(default_factory=collections.Counter)
    warm: Sample | None = None
    end: Sample | None = None
    sessions_left: int | None = None
    tracebacks: int = 0
    notes: list[str] = field(default_factory=list)


class LogTally(collections.deque):
    """A server's output tail (`ServerProcess.output`) that also counts the tracebacks it logged."""

    def __init__(self, lines: Any) -> None:
        super().__init__(lines, maxlen=lines.maxlen)
        self.tracebacks = 0
        self.first: list[str] = []

    def append(self, line: str) -> None:
        if line.startswith("Traceback"):
            self.tracebacks += 1
            self._in_traceback = True
        elif getattr(self, "_in_traceback", False) and line and not line.startswith(" "):
            self._in_traceback = False  # its exception line
            if len(self.first) < 3 and line[:200] not in self.first:
                self.first.append(line[:200])
        super().append(line)


# -- surfaces -----------------------------------------------------------------------------------
class Surface:
    """A server under soak: start it, run valid and hostile cycles, say whether it is quiet."""

    name = ""
    kinds: list[str] = []
    server: Any = None

    @property
    def pid(self) -> int:
        return self.server.process.pid

    def alive(self) -> bool:
        return self.server is not None and self.server.process.poll() is None

    async def start(self) -> None:
        raise NotImplementedError

    async def valid_cycle(self, i: int) -> None:
        raise NotImplementedError

    async def hostile_cycle(self, i: int, kind: str) -> str:
        """Send one hostile input of `kind`; the reply's label, or NotClear."""
        raise NotImplementedError

    async def quiet(self) -> int | None:
        """Wait until no session is left open (None: the server does not say)."""
        return None

    def notes(self) -> list[str]:
        return []

    async def stop(self) -> None:
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)


class RawSession:
    """A WebSocket to an env server with no client around it: any frame can be sent."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, base_url: str) -> RawSession:
        from websockets.asyncio.client import connect

        from envharness.core.client import websocket_url

        return cls(await connect(websocket_url(base_url), max_size=None, ping_interval=None, open_timeout=30))

    async def ask(self, frame: str | bytes) -> dict[str, Any]:
        await self.ws.send(frame)
        return json.loads(await asyncio.wait_for(self.ws.recv(), 120))

    async def request(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        reply = await self.ask(json.dumps({"type": kind, "data": data}))
        if reply.get("type") == "error":
            raise RuntimeError(f"valid {kind} refused: {reply['data']}")
        return reply["data"]

    async def close(self) -> None:
        await self.ws.send(json.dumps({"type": "close"}))
        await self.ws.close()

    def vanish(self) -> None:
        """Drop the TCP connection: no close frame, no close message."""
        self.ws.transport.abort()


def refusal(reply: dict[str, Any], *codes: str) -> str:
    """The error code of an error frame with one of `codes`; NotClear otherwise."""
    if reply.get("type") != "error":
        raise NotClear(f"answered {reply.get('type')}")
    data = reply.get("data") or {}
    if data.get("infrastructure"):
        raise RuntimeError(f"infrastructure error for a hostile input: {data}")
    if data.get("code") not in codes or not data.get("message"):
        raise NotClear(f"{data.get('code')}: {str(data.get('message'))[:80]}")
    return str(data["code"])


FRAME_KINDS = [
    "malformed JSON",
    "binary garbage",
    "unknown message type",
    "step before reset",
    "oversize frame",
    "vanished mid-step",
]


class EnvServerSurface(Surface):
    """An `envharness serve` server: valid cycles through its typed client; hostile frames on a raw
    WebSocket, hostile actions through the client; after each, the same session plays on."""

    target = ""
    client_class: Any = None
    options: dict[str, Any] = {}
    action_kinds: dict[str, dict[str, Any]] = {}

    def __init__(self) -> None:
        self.kinds = FRAME_KINDS + list(self.action_kinds)
        self.http: Any = None

    async def start(self) -> None:
        import httpx

        env_vars = {"PYTHONPATH": os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")])}
        self.server = await asyncio.to_thread(
            ServerProcess, self.target, options=self.options, env_vars=env_vars, startup_timeout_s=120
        )
        self.server.output = LogTally(self.server.output)
        self.http = httpx.AsyncClient(timeout=60)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.aclose()
        await super().stop()

    def client(self) -> Any:
        return self.client_class(self.server.base_url)

    # what each environment plays
    def reset_data(self, i: int) -> dict[str, Any]:
        return {"seed": i}

    def step_data(self, observation: dict[str, Any], n: int) -> dict[str, Any] | None:
        """The `n`-th valid action after `observation` (a wire dict); None: enough."""
        raise NotImplementedError

    def judge(self, kind: str, result: Any) -> str:
        """A hostile action was answered with an observation: was its error clear?"""
        raise NotClear("accepted")

    def on_first_reset(self, seconds: float, metadata: dict[str, Any] | None) -> None:
        """A new session's first reset took `seconds`; `metadata` is its reply's."""

    async def first_reset(self, env: Any, i: int) -> Any:
        started = time.perf_counter()
        result = await env.reset(**self.reset_data(i))
        self.on_first_reset(time.perf_counter() - started, result.metadata)
        return result

    async def play(self, env: Any, i: int, *, first: bool = False) -> None:
        """An episode: a reset, then the valid actions until `step_data` has none or it is done."""
        result = await (self.first_reset(env, i) if first else env.reset(**self.reset_data(i)))
        for n in range(8):
            data = self.step_data(result.observation.model_dump(), n) if not result.done else None
            if data is None:
                return
            result = await env.step(data)

    async def valid_cycle(self, i: int) -> None:
        async with self.client() as env:
            await self.play(env, i, first=True)

    async def hostile_cycle(self, i: int, kind: str) -> str:
        if kind in FRAME_KINDS:
            return await self.hostile_frame(i, kind)
        from envharness.core.client import EnvServerError

        async with self.client() as env:
            await self.first_reset(env, i)
            try:
                label = self.judge(kind, await env.step(self.action_kinds[kind]))
            except EnvServerError as exc:
                if exc.infrastructure or exc.code in ("SESSION_ERROR", "FACTORY_ERROR", "SHUTTING_DOWN"):
                    raise
                label = exc.code
            await self.play(env, i + 1)  # the session plays on: a new episode
        return label

    async def hostile_frame(self, i: int, kind: str) -> str:
        raw = await RawSession.open(self.server.base_url)
        try:
            if kind == "step before reset":
                label = refusal(
                    await raw.ask(json.dumps({"type": "step", "data": self.step_data({}, 0)})), "NOT_RESET"
                )
            started = time.perf_counter()
            reset = await raw.request("reset", self.reset_data(i))
            self.on_first_reset(time.perf_counter() - started, reset.get("metadata"))
            if kind == "vanished mid-step":
                await raw.ws.send(
                    json.dumps({"type": "step", "data": self.step_data(reset["observation"], 0)})
                )
                raw.vanish()
                left = await self.quiet()
                if left:
                    raise RuntimeError(f"{left} session(s) still open after their client vanished")
                return "session freed"
            if kind == "malformed JSON":
                label = refusal(
                    await raw.ask('{"type": "step", "data": {"action_str": "noop()", '), "INVALID_JSON"
                )
            elif kind == "binary garbage":
                label = refusal(await raw.ask(b"\xff\xfe\x00\x9c garbage \x00"), "INVALID_JSON")
            elif kind == "unknown message type":
                label = refusal(await raw.ask(json.dumps({"type": "explode", "data": {}})), "UNKNOWN_TYPE")
            elif kind == "oversize frame":
                from envharness.core.server import DEFAULT_MAX_MESSAGE_BYTES

                # over the limit, within the frame headroom: refused in words, the session goes on
                # (a message past the headroom closes the connection with 1009, unread)
                huge = json.dumps(
                    {"type": "step", "data": {"message": "x" * (DEFAULT_MAX_MESSAGE_BYTES + 1024)}}
                )
                label = refusal(await raw.ask(huge), "MESSAGE_TOO_LARGE")
            await raw.request("step", self.step_data(reset["observation"], 0))  # the session plays on
            return label
        finally:
            if kind != "vanished mid-step":
                with contextlib.suppress(Exception):
                    await raw.close()

    async def quiet(self) -> int:
        deadline = time.monotonic() + 30
        while True:
            health = (await self.http.get(f"{self.server.base_url}/health")).json()
            if health["active_sessions"] == 0 or time.monotonic() > deadline:
                return int(health["active_sessions"])
            await asyncio.sleep(0.05)


class EchoSurface(EnvServerSurface):
    name = "echo (reference)"
    target = "echo"
    action_kinds = {"wrong fields": {"msg": 1}, "non-string message": {"message": 123}}

    @property
    def client_class(self) -> Any:
        from envharness.envs.echo import AsyncEchoEnv

        return AsyncEchoEnv

    def step_data(self, observation: dict[str, Any], n: int) -> dict[str, Any] | None:
        return {"message": f"hello {n}"} if n < 3 else None


class TextArenaSurface(EnvServerSurface):
    name = "textarena (Wordle-v0)"
    target = "textarena"
    action_kinds = {
        "empty move": {"message": ""},
        "huge move": {"message": "[" + "a" * 100_000 + "]"},
        "garbage move": {"message": "xyzzy ]][[ \u0000 !!"},
        "not an English word": {"message": "[zzzzz]"},
        "non-string move": {"message": ["crane"]},
        "wrong schema": {"move": "[crane]"},
    }

    @property
    def client_class(self) -> Any:
        from envharness.envs.textarena.client import AsyncTextArenaEnv

        return AsyncTextArenaEnv

    def step_data(self, observation: dict[str, Any], n: int) -> dict[str, Any] | None:
        return {"message": ("[crane]", "[slate]")[n]} if n < 2 else None

    def judge(self, kind: str, result: Any) -> str:
        said = [m.content for m in result.observation.messages[-2:] if m.category == "GAME_ADMIN"]
        if result.observation.info.get("invalid_move") or any("invalid" in text.lower() for text in said):
            return "invalid move, said by the game"
        raise NotClear("accepted")


class BrowserSurface(EnvServerSurface):
    name = "browsergym (no pool)"
    target = "browsergym"
    options = {**TRAIN_BROWSER_OPTIONS, "warm_sessions": 0}

    def __init__(self) -> None:
        self.marker = Path(tempfile.gettempdir()) / f"bench-soak-{os.getpid()}-code-ran"
        self.action_kinds = {
            "unknown function": {"action_str": "explode('13')"},
            "Python code": {"action_str": f"__import__('os').system('touch {self.marker}')"},
            "missing bid": {"action_str": "click('99999')"},
            "enormous action": {"action_str": "fill('13', '" + "x" * 1_000_000 + "')"},
            "unbalanced quotes": {"action_str": "click('13)"},
            "wrong schema": {"action": "click('13')"},
        }
        super().__init__()

    @property
    def client_class(self) -> Any:
        from envharness.envs.browsergym.client import AsyncBrowserGymEnv

        return partial(AsyncBrowserGymEnv, screenshot_array=False)

    def reset_data(self, i: int) -> dict[str, Any]:
        return {"task": TASKS[i % len(TASKS)], "seed": i}

    def step_data(self, observation: dict[str, Any], n: int) -> dict[str, Any] | None:
        if n == 0:
            return {"action_str": "noop()"}
        buttons = re.findall(
            r"\[(\w+)\] button", observation.get("axtree_txt") or observation.get("text") or ""
        )
        return {"action_str": f"click('{buttons[0]}')"} if n == 1 and buttons else None

    def judge(self, kind: str, result: Any) -> str:
        if self.marker.exists():
            self.marker.unlink()
            raise RuntimeError("the action's Python code ran on the server")
        if result.observation.error:
            return "action error in the observation"
        raise NotClear("accepted")


class WarmPoolSurface(BrowserSurface):
    name = "warm pool (browsergym)"
    target = "bench_soak:counted_browsergym"
    options = {**TRAIN_BROWSER_OPTIONS, "warm_sessions": 2}

    def __init__(self) -> None:
        super().__init__()
        self.first_resets: list[tuple[bool, float]] = []

    def on_first_reset(self, seconds: float, metadata: dict[str, Any] | None) -> None:
        pool = (metadata or {}).get("warm_pool")
        if pool is None:
            raise RuntimeError("the reset's metadata has no warm_pool counters")
        self.first_resets.append((bool(pool["took"]), seconds))

    def notes(self) -> list[str]:
        took = [s for hit, s in self.first_resets if hit]
        missed = [s for hit, s in self.first_resets if not hit]
        p50 = lambda values: f"{statistics.median(values) * 1e3:.0f} ms" if values else "-"  # noqa: E731
        return [
            f"warm pool: {len(took)} of {len(self.first_resets)} new sessions took a warm context; "
            f"first reset p50 {p50(took)} when they did, {p50(missed)} when they opened their own"
        ]


class GymEngineSurface(BrowserSurface):
    name = "gym engine (browsergym)"
    options = {"engine": "browsergym", "pruned_html": False, "extra_properties": False}


class PolicyProcess(ServerProcess):
    """`envharness policy` in a child process, read and stopped as `ServerProcess` does
    (`ServerProcess` itself starts `serve`); it dies with this process."""

    def __init__(self, args: list[str], token: str) -> None:
        self.token = token
        env = {**os.environ, "ENVHARNESS_TOKEN": token}
        self._launch(
            ["policy", "--host", "127.0.0.1", "--port", "0", *args],
            env,
            "envharness policy",
            180,
            threading.Event(),
        )

    def _popen_options(self) -> dict[str, Any]:
        return {"preexec_fn": partial(set_parent_death_signal, signal.SIGTERM)}


class PolicySurface(Surface):
    """The policy endpoint: a cycle opens a rollout, makes two chat calls (the second continues
    the first), reads the sample and ends the rollout."""

    name = "policy endpoint (tiny)"
    kinds = [
        "no token",
        "wrong api key",
        "oversize body",
        "malformed JSON",
        "bad request schema",
        "unknown rollout",
        "call limit",
        "vanished mid-body",
        "vanished awaiting reply",
    ]

    async def start(self) -> None:
        import httpx

        args = [
            "--model",
            "tiny",
            "--threads",
            "1",
            "--max-new-tokens",
            "4",
            "--max-request-bytes",
            str(POLICY_MAX_REQUEST_BYTES),
            "--max-calls-per-rollout",
            str(POLICY_MAX_CALLS),
        ]
        self.server = await asyncio.to_thread(PolicyProcess, args, POLICY_TOKEN)
        self.server.output = LogTally(self.server.output)
        self.url = self.server.base_url
        self.http = httpx.AsyncClient(timeout=120)
        self.driver = {"Authorization": f"Bearer {POLICY_TOKEN}"}

    async def stop(self) -> None:
        await self.http.aclose()
        await super().stop()

    async def ok(self, reply: Any) -> dict[str, Any]:
        if reply.status_code != 200:
            raise RuntimeError(
                f"{reply.request.method} {reply.request.url.path}: {reply.status_code} {reply.text[:200]}"
            )
        return reply.json()

    async def open(self) -> dict[str, Any]:
        return await self.ok(await self.http.post(f"{self.url}/rollouts", json={}, headers=self.driver))

    async def call(self, rollout: dict[str, Any], messages: list[dict[str, Any]]) -> Any:
        return await self.http.post(
            f"{rollout['base_url']}/chat/completions",
            headers={"Authorization": f"Bearer {rollout['api_key']}"},
            json={"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 1.0},
        )

    async def turn(self, rollout: dict[str, Any], messages: list[dict[str, Any]], n: int) -> None:
        """One valid call, its reply appended to `messages` with the next user message."""
        body = await self.ok(await self.call(rollout, messages))
        messages += [
            body["choices"][0]["message"],
            {"role": "user", "content": f"Observation {n}: the page changed."},
        ]

    @staticmethod
    def conversation(i: int) -> list[dict[str, Any]]:
        return [
            {"role": "system", "content": "You control a web page. Answer with one action."},
            {"role": "user", "content": f"Episode {i}: [13] button 'Click Me!'" + " ..." * (i % 7)},
        ]

    async def end(self, rollout: dict[str, Any]) -> dict[str, Any]:
        return await self.ok(
            await self.http.post(f"{self.url}/rollouts/{rollout['rollout_id']}/end", headers=self.driver)
        )

    async def valid_cycle(self, i: int) -> None:
        rollout, messages = await self.open(), self.conversation(i)
        await self.turn(rollout, messages, 1)
        await self.turn(rollout, messages, 2)
        summary = await self.end(rollout)
        sample = await self.ok(
            await self.http.get(f"{self.url}/rollouts/{rollout['rollout_id']}/sample", headers=self.driver)
        )
        if summary["turns"] != 2 or summary["forks"] or not sample["completion_ids"]:
            raise RuntimeError(f"the rollout recorded {summary}")

    async def hostile_cycle(self, i: int, kind: str) -> str:
        rollout, messages = await self.open(), self.conversation(i)
        await self.turn(rollout, messages, 1)
        base, key = rollout["base_url"], {"Authorization": f"Bearer {rollout['api_key']}"}
        hello = {"model": "tiny", "messages": messages, "max_tokens": 4}
        if kind == "no token":
            label = self.refused(
                await self.http.post(f"{self.url}/rollouts", json={}), 401, "invalid_api_key"
            )
        elif kind == "wrong api key":
            reply = await self.http.post(
                f"{base}/chat/completions", json=hello, headers={"Authorization": "Bearer wrong"}
            )
            label = self.refused(reply, 401, "invalid_api_key")
        elif kind == "oversize body":
            big = {
                **hello,
                "messages": [*messages, {"role": "user", "content": "x" * (POLICY_MAX_REQUEST_BYTES + 1024)}],
            }
            label = self.refused(
                await self.http.post(f"{base}/chat/completions", json=big, headers=key),
                413,
                "request_too_large",
            )
        elif kind == "malformed JSON":
            reply = await self.http.post(
                f"{base}/chat/completions", content=b'{"model": "tiny", "messages": [', headers=key
            )
            label = self.refused(reply, 400, "invalid_json")
        elif kind == "bad request schema":
            reply = await self.http.post(
                f"{base}/chat/completions", json={"model": "tiny", "messages": "hello"}, headers=key
            )
            label = self.refused(reply, 400, "invalid_request")
        elif kind == "unknown rollout":
            reply = await self.http.post(
                f"{self.url}/rollouts/no-such-rollout/v1/chat/completions", json=hello, headers=self.driver
            )
            label = self.refused(reply, 404, "rollout_not_found")
        elif kind == "call limit":
            for n in range(2, POLICY_MAX_CALLS + 1):
                await self.turn(rollout, messages, n)
            label = self.refused(await self.call(rollout, messages), 400, "rollout_call_limit")
        else:
            body = json.dumps(hello).encode()
            await self.vanish(rollout, body, whole=kind == "vanished awaiting reply")
            label = "server serves on"
        if kind != "call limit":
            await self.turn(rollout, messages, 2)  # the rollout plays on
        await self.ok(await self.http.get(f"{self.url}/health"))
        await self.end(rollout)
        return label

    @staticmethod
    def refused(reply: Any, status: int, code: str) -> str:
        if reply.status_code >= 500:
            raise RuntimeError(f"{reply.status_code} for a hostile input: {reply.text[:200]}")
        try:
            error = reply.json()["error"]
        except (ValueError, KeyError, TypeError):
            raise NotClear(f"{reply.status_code} without an OpenAI error body") from None
        if reply.status_code != status or error.get("code") != code or not error.get("message"):
            raise NotClear(f"{reply.status_code} {error.get('code')}")
        return f"{status} {code}"

    async def vanish(self, rollout: dict[str, Any], body: bytes, *, whole: bool) -> None:
        """A client that sends a chat call (all of it, or half its body) and goes away."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        head = (
            f"POST /rollouts/{rollout['rollout_id']}/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {rollout['api_key']}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(head + (body if whole else body[: len(body) // 2]))
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.transport.abort()


SURFACES: dict[str, Callable[[], Surface]] = {
    "echo": EchoSurface,
    "textarena": TextArenaSurface,
    "browsergym": BrowserSurface,
    "warm-pool": WarmPoolSurface,
    "gym-engine": GymEngineSurface,
    "policy": PolicySurface,
}


# -- the soak -----------------------------------------------------------------------------------
async def settle(surface: Surface) -> tuple[Sample, int | None]:
    """A sample once the server went quiet: no session open, and the same fds and processes for
    1.5 s (a closing session's context, a warm pool refilling, a worker exiting)."""
    left = await surface.quiet()
    deadline, last, same = time.monotonic() + 30, None, 0
    while True:
        now = sample(surface.pid)
        same = same + 1 if last is not None and (now.fds, now.children) == (last.fds, last.children) else 0
        last = now
        if same >= 5 or time.monotonic() > deadline:
            return now, left
        await asyncio.sleep(0.3)


async def soak(
    surface: Surface,
    cycles: int,
    warmup: int,
    every: int,
    *,
    cycle_timeout_s: float = 300.0,
    progress: bool = False,
) -> Tally:
    """Run `cycles` cycles on `surface` (started and stopped here); every `every`-th is hostile."""
    tally = Tally(surface.name)
    try:
        await surface.start()
    except Exception as exc:  # noqa: BLE001 - the other surfaces still run
        tally.errors.append(f"the server did not start: {type(exc).__name__}: {exc}"[:500])
        return tally
    try:
        for i in range(cycles):
            if i == warmup:
                tally.warm, _ = await settle(surface)
            hostile = every > 0 and i % every == every - 1
            kind = surface.kinds[(i // every) % len(surface.kinds)] if hostile else ""
            started = time.perf_counter()
            try:
                if hostile:
                    tally.hostile_sent += 1
                    label = await asyncio.wait_for(surface.hostile_cycle(i, kind), cycle_timeout_s)
                    tally.hostile_clear += 1
                    tally.replies[(kind, label)] += 1
                else:
                    await asyncio.wait_for(surface.valid_cycle(i), cycle_timeout_s)
            except NotClear as exc:
                tally.replies[(kind, f"NOT CLEAR: {exc}")] += 1
            except Exception as exc:  # noqa: BLE001 - every failure is counted, the soak goes on
                tally.errors.append(
                    f"cycle {i}{f' ({kind})' if hostile else ''}: {type(exc).__name__}: {exc}"[:300]
                )
            tally.seconds += time.perf_counter() - started
            tally.cycles += 1
            if progress and tally.cycles % 100 == 0:
                print(
                    f"  {surface.name}: {tally.cycles} cycles, {len(tally.errors)} errors",
                    file=sys.stderr,
                    flush=True,
                )
            if not surface.alive():
                tally.errors.append(f"the server died after cycle {i}: {surface.server._tail()[-500:]}")
                break
        if surface.alive():
            tally.end, tally.sessions_left = await settle(surface)
        tally.notes += surface.notes()
    finally:
        output = getattr(surface.server, "output", None)
        if isinstance(output, LogTally):
            tally.tracebacks = output.tracebacks
            tally.notes += [f"{surface.name} logged: {line}" for line in output.first]
        await surface.stop()
    return tally


# -- the report ---------------------------------------------------------------------------------
def verdict(t: Tally, rss_tolerance_mb: float, fd_tolerance: int) -> str:
    if t.warm is None or t.end is None:
        return "no end sample"
    grew = []
    if t.end.rss_mb - t.warm.rss_mb > rss_tolerance_mb:
        grew.append(f"RSS +{t.end.rss_mb - t.warm.rss_mb:.0f} MB")
    if t.end.fds - t.warm.fds > fd_tolerance:
        grew.append(f"fds +{t.end.fds - t.warm.fds}")
    if t.end.children > t.warm.children:
        grew.append(f"processes +{t.end.children - t.warm.children}")
    if t.sessions_left:
        grew.append(f"{t.sessions_left} sessions left open")
    bad = ["errors"] if t.errors else []
    bad += ["unclear refusals"] if t.hostile_clear < t.hostile_sent else []
    return ("flat" if not grew else "grows: " + ", ".join(grew)) + ("; " + ", ".join(bad) if bad else "")


def report(tallies: list[Tally], args: argparse.Namespace) -> str:
    def span(a: float, b: float, digits: int = 0) -> str:
        return f"{a:.{digits}f} → {b:.{digits}f} ({b - a:+.{digits}f})"

    lines = [
        f"\nsoak: {args.cycles} cycles per surface, a hostile input every {args.hostile_every} cycles; "
        f"samples after cycle {args.warmup} and at the end\n",
        "| surface | cycles | cycles/s | errors (not the input's) | hostile sent | clear | RSS MB | fds | processes "
        "| sessions left | tracebacks logged | verdict |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---|",
    ]
    for t in tallies:
        w, e = t.warm, t.end
        rss = span(w.rss_mb, e.rss_mb, 1) if w and e else "-"
        fds = span(w.fds, e.fds) if w and e else "-"
        kids = span(w.children, e.children) if w and e else "-"
        left = "-" if t.sessions_left is None else str(t.sessions_left)
        lines.append(
            f"| {t.surface} | {t.cycles} | {t.cycles / t.seconds if t.seconds else 0:.1f} | {len(t.errors)} "
            f"| {t.hostile_sent} | {t.hostile_clear} | {rss} | {fds} | {kids} | {left} | {t.tracebacks} "
            f"| {verdict(t, args.rss_tolerance_mb, args.fd_tolerance)} |"
        )
    lines += [
        f"\nflat: RSS within +{args.rss_tolerance_mb:g} MB, fds within +{args.fd_tolerance}, no more processes, "
        "no session left open. processes: every descendant of the server (Playwright's driver, Chromium's, "
        "BrowserGym's workers).\n",
        "| surface | hostile input | reply | count |",
        "|---|---|---|---:|",
    ]
    for t in tallies:
        for (kind, label), count in sorted(t.replies.items()):
            lines.append(f"| {t.surface} | {kind} | {label} | {count} |")
    for t in tallies:
        lines += [f"- {note}" for note in t.notes]
        lines += [f"- {t.surface} error: {error}" for error in t.errors[:10]]
        if len(t.errors) > 10:
            lines.append(f"- {t.surface}: {len(t.errors) - 10} more errors")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> list[Tally]:
    tallies = []
    for key in args.surfaces.split(","):
        started = time.monotonic()
        tally = await soak(
            SURFACES[key.strip()](), args.cycles, args.warmup, args.hostile_every, progress=True
        )
        print(
            f"{tally.surface}: {tally.cycles} cycles in {time.monotonic() - started:.0f} s, {len(tally.errors)} errors, "
            f"{tally.hostile_clear}/{tally.hostile_sent} hostile inputs clear",
            file=sys.stderr,
            flush=True,
        )
        tallies.append(tally)
    return tallies


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cycles", type=int, default=500, help="open/act/close cycles per surface (default %(default)s)"
    )
    parser.add_argument(
        "--warmup", type=int, default=50, help="cycles before the first sample (default %(default)s)"
    )
    parser.add_argument(
        "--hostile-every",
        type=int,
        default=5,
        help="every N-th cycle sends a hostile input (default %(default)s)",
    )
    parser.add_argument(
        "--surfaces", default=",".join(SURFACES), help=f"comma-separated, of {', '.join(SURFACES)}"
    )
    parser.add_argument(
        "--rss-tolerance-mb",
        type=float,
        default=20.0,
        help="RSS growth still called flat (default %(default)s)",
    )
    parser.add_argument(
        "--fd-tolerance", type=int, default=2, help="fd growth still called flat (default %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="60 cycles per surface, 20 of them warm-up")
    args = parser.parse_args()
    if args.quick:
        args.cycles, args.warmup = 60, 20
    if not 0 < args.warmup < args.cycles:
        parser.error("--warmup must be between 0 and --cycles")
    started = time.monotonic()
    tallies = asyncio.run(run(args))
    print(report(tallies, args))
    print(
        f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; {time.monotonic() - started:.0f} s in all"
    )
    return 1 if any(t.errors for t in tallies) else 0


if __name__ == "__main__":
    raise SystemExit(main())
