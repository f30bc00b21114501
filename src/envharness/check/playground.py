"""One environment, served and playable, and a tape of what went over its wire.

`Playground` is what every check and every floor episode plays through, the way eval plays:
the environment's server (started on loopback unless one is given), its harness, found in the
registry, and the harness's session factory with eval's default tools and reset options.
`TapeClient` notes each reset and step with the exact payload sent, so the same episode
played twice can be compared frame by frame (`compare_tapes`) and replayed on a bare client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from envharness.harness.rollout import run_episode
from envharness.harness.success import episode_success as verdict_of
from envharness.harness.tool_parsing import normalize_parsed
from envharness.harness.types import (
    HarnessRolloutResult,
    HarnessRunLimits,
    LLMResponse,
    Message,
    ModelStepResult,
)


class CheckSetupError(ValueError):
    """What was asked cannot run: an unknown environment, task or policy, bad options, no server."""


# -- one environment, served and playable -----------------------------------------------
@dataclass
class Playground:
    """An environment's server (started here unless given), its harness (None when it registers
    none) and its client class: what every check and floor episode plays through."""

    env: str
    options: dict[str, Any]
    harness: Any = None
    client_class: Any = None
    base_url: str = ""
    server: Any = None

    async def start(
        self,
        *,
        env_url: str | None = None,
        server_options: dict[str, Any] | None = None,
        max_sessions: int = 64,
    ) -> Playground:
        """Start `envharness serve ENV` on loopback with the options (`server_options` first,
        the user's over them), or use the running server at `env_url`."""
        if env_url:
            self.base_url = env_url.rstrip("/")
            return self
        from envharness.core.launchers import LaunchError, launch_local_async

        try:
            self.server = await launch_local_async(
                self.env,
                options={**(server_options or {}), **self.options},
                server_args=["--max-sessions", str(max_sessions)],
            )
        except LaunchError as exc:
            raise CheckSetupError(f"cannot start `envharness serve {self.env}`: {exc}") from None
        self.base_url = self.server.base_url
        return self

    async def close(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await asyncio.to_thread(server.stop)

    def client(self) -> Any:
        """The environment's own async client (screenshots left encoded where it decodes them)."""
        try:
            return self.client_class(self.base_url, screenshot_array=False)
        except TypeError:
            return self.client_class(self.base_url)

    def wire_client(self) -> Any:
        """The generic client: dict actions, every observation field kept."""
        from envharness.core.client import AsyncEnvClient

        return AsyncEnvClient(self.base_url)

    async def action_schema(self) -> dict[str, Any]:
        """The JSON schema of the server's action (`GET /schema`)."""
        import httpx

        async with httpx.AsyncClient(timeout=30) as http:
            reply = await http.get(f"{self.base_url}/schema")
            reply.raise_for_status()
            return reply.json().get("action") or {}

    async def served_tasks(self) -> list[str] | None:
        """The server's own task listing (OpenEnv's Task API); None when it lists none (501)."""
        import httpx

        async with httpx.AsyncClient(timeout=60) as http:
            names = (await http.get(f"{self.base_url}/list_environments")).json()
            if not names:
                return None
            reply = await http.post(
                f"{self.base_url}/{quote(str(names[0]), safe='')}/tasks", json={"split": ""}
            )
            if reply.status_code == 501:
                return None
            reply.raise_for_status()
            return [t["id"] for t in reply.json()["tasks"]]

    def reset_kwargs(self) -> dict[str, Any]:
        """What eval's resets send, without screenshots (nothing here looks at pixels)."""
        options = dict(self.harness.reset_kwargs) if self.harness is not None else {}
        if self.harness is not None and self.harness.screenshots:
            options["screenshot"] = False
        return options

    def session_factory(self, client_factory: Callable[[], Any] | None = None) -> Any:
        """The harness's session factory with the tools eval offers by default."""
        extra = {"tools": list(self.harness.default_tools)} if self.harness.default_tools else {}
        return self.harness.session_factory(
            client_factory or self.client, reset_kwargs=self.reset_kwargs(), **extra
        )

    def tasks(self, names: Sequence[str] = ()) -> list[str]:
        """Task names, splits and `all` expanded; the harness's default tasks when none are given."""
        try:
            chosen = self.harness.task_list().expand(
                list(names) or self.harness.default_tasks, self.harness.check_task
            )
        except ValueError as exc:
            raise CheckSetupError(str(exc)) from None
        if not chosen:
            raise CheckSetupError(f"{self.env} lists no tasks to play")
        return chosen


def seated_options(
    env: str, options: dict[str, Any], names: Sequence[str], opponent: str, seat_choice: str, running: bool
) -> tuple[dict[str, Any], str | None]:
    """The server options with the opponent a multi-player task is checked against, and that
    opponent's name (None: the tasks are single-player). Without `opponent`, the environment's
    first server-played one (a legal random move for TextArena): a game needs its other seats
    filled before any policy can play it."""
    from envharness.harness.opponents import seated_options as seat

    pg = playground(env, options)
    harness = pg.harness
    if harness is None or harness.players is None:
        if opponent:
            raise CheckSetupError(f"--opponent {opponent}: every task of {env} is played by one agent alone")
        return options, None
    tasks = pg.tasks(names)
    if not opponent and not any(harness.players(task)[0] >= 2 for task in tasks):
        return options, None
    alone = [task for task in tasks if harness.players(task)[1] < 2]
    if alone and not opponent:
        raise CheckSetupError(
            f"{', '.join(alone)}: single-player, beside multi-player games that need an opponent: "
            "check them in separate runs"
        )
    opponent = opponent or (harness.server_opponents[0] if harness.server_opponents else "")
    try:
        seated, plan = seat(harness, tasks, opponent, seat_choice, options, running)
    except ValueError as exc:
        raise CheckSetupError(str(exc)) from None
    if plan.client_opponent is not None:
        raise CheckSetupError(
            f"--opponent {opponent}: check plays an opponent the server plays "
            f"({' or '.join(harness.server_opponents)})"
        )
    return seated, opponent


def playground(env: str, options: dict[str, Any] | None = None) -> Playground:
    """The environment's parts from the registry (no server yet); CheckSetupError when unknown."""
    from envharness.core.registry import env_harness, get_spec

    options = dict(options or {})
    try:
        spec = get_spec(env)
        harness = env_harness(env, options) if spec.harness else None
        client_class = spec.load("client")
    except (KeyError, ValueError, ImportError, AttributeError) as exc:
        raise CheckSetupError(exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)) from None
    return Playground(env=env, options=options, harness=harness, client_class=client_class)


# -- policies as model steps ------------------------------------------------------------
class PolicyStep:
    """A policy as the harness's model step (no model, no tokens)."""

    def __init__(self, policy: Callable[[list[Message], list[Any]], LLMResponse]) -> None:
        self.policy = policy

    async def __call__(
        self, messages: list[Message], tools: list[Any], sampling: dict[str, Any]
    ) -> ModelStepResult:
        return ModelStepResult(response=self.policy(list(messages), list(tools)))


class ScriptedPolicy:
    """The environment's scripted policy (`EnvHarness.scripted_policy`), its reply parsed as eval
    parses it. A policy with no move at the first turn does not cover the task: `fallback`
    plays it instead (the episode still tests determinism), and it is not held to winning it."""

    def __init__(
        self,
        script: Callable[[list[Message]], str | None],
        parser: Any,
        fallback: Callable[[list[Message], list[Any]], LLMResponse],
    ) -> None:
        self.script, self.parser, self.fallback = script, parser, fallback
        self.problem, self.covers, self.turn = "", True, 0

    def __call__(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        self.turn += 1
        if not self.covers:
            return self.fallback(messages, tools)
        try:
            text = self.script(list(messages))
        except ValueError as exc:
            text, self.problem = "", f"the scripted policy had no move: {exc}"
        if not text:
            self.problem = self.problem or "the scripted policy had no move"
            if self.turn == 1:
                self.covers = False
                return self.fallback(messages, tools)
        return LLMResponse(content=text or "", tool_calls=normalize_parsed(self.parser(text)) if text else [])


def episode_success(result: HarnessRolloutResult) -> bool:
    """Eval's verdict (`harness/success.py`): the environment's declared success, never partial
    credit; a crashed episode never succeeds."""
    metrics = result.verify.metrics if result.verify is not None else {}
    return verdict_of(metrics, result.env_reward, result.error)


#: Observation keys that hold clocks, not state: left out when episodes are compared.
VOLATILE_PARTS = frozenset({"elapsed", "time", "timestamp", "timings", "duration", "latency"})


# -- what went over the wire ------------------------------------------------------------
@dataclass
class Frame:
    kind: str  # "reset" | "step"
    sent: dict[str, Any]
    observation: dict[str, Any]
    reward: float | None
    done: bool


def plain(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


class TapeClient:
    """The environment's client, noting every reset and step with the exact payload sent."""

    def __init__(self, client: Any, tape: list[Frame]) -> None:
        self.client, self.tape = client, tape

    def _note(self, kind: str, sent: dict[str, Any], result: Any) -> Any:
        self.tape.append(Frame(kind, sent, plain(result.observation), result.reward, bool(result.done)))
        return result

    async def reset(self, **kwargs: Any) -> Any:
        return self._note("reset", dict(kwargs), await self.client.reset(**kwargs))

    async def step(self, action: Any) -> Any:
        payload = (
            self.client._step_payload(action) if hasattr(self.client, "_step_payload") else plain(action)
        )
        return self._note("step", dict(payload), await self.client.step(action))

    async def state(self) -> Any:
        return await self.client.state()

    async def close(self) -> None:
        await self.client.close()


def stable(value: Any) -> Any:
    """`value` without clock fields and episode ids (they differ between equal episodes)."""
    if isinstance(value, dict):
        return {
            k: stable(v)
            for k, v in value.items()
            if k != "episode_id" and not (VOLATILE_PARTS & set(str(k).lower().split("_")))
        }
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def first_difference(a: Any, b: Any, path: str = "", tol: float = 0.0) -> str | None:
    """Where two plain values first differ (`.observation.goal: 'x' vs 'y'`), None when equal;
    floats within `tol` count as equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(dict.fromkeys([*a, *b])):
            found = first_difference(a.get(key), b.get(key), f"{path}.{key}", tol)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next(
            (d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{path}[{i}]", tol))),
            None,
        )
    if (
        tol
        and isinstance(a, float)
        and isinstance(b, (int, float))
        and not isinstance(b, bool)
        and abs(a - b) <= tol
    ):
        return None
    return None if a == b else f"{path or '(value)'}: {short(a)} vs {short(b)}"


def short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


#: Floats inside observations may differ this much between equal episodes (MiniWoB's
#: time-discounted REWARD_GLOBAL follows the clock); the step's own reward must be equal.
OBSERVATION_FLOAT_TOLERANCE = 0.01


def compare_tapes(a: list[Frame], b: list[Frame]) -> str | None:
    """The first difference between two plays of one task and seed, in words."""
    for i, (x, y) in enumerate(zip(a, b)):
        found = (
            first_difference({"reward": x.reward, "done": x.done}, {"reward": y.reward, "done": y.done})
            or first_difference(stable(x.sent), stable(y.sent), ".sent")
            or first_difference(
                stable(x.observation), stable(y.observation), ".observation", OBSERVATION_FLOAT_TOLERANCE
            )
        )
        if found:
            return f"{'the first observation' if i == 0 else f'step {i}'} differs at {found.lstrip('.')}"
    if len(a) != len(b):
        return f"one play had {len(a) - 1} step(s), the other {len(b) - 1}"
    return None


# -- one episode ------------------------------------------------------------------------
@dataclass
class Play:
    task: str
    seed: int
    result: HarnessRolloutResult
    tape: list[Frame] = field(default_factory=list)
    policy: Any = None


async def play(
    pg: Playground, task: str, seed: int, policy: Any, max_steps: int, timeout_s: float | None
) -> Play:
    """One episode through the harness, with a tape of its wire traffic."""
    tape: list[Frame] = []
    factory = pg.session_factory(lambda: TapeClient(pg.client(), tape))
    result = await run_episode(
        factory,
        task,
        lambda session: PolicyStep(policy),
        limits=HarnessRunLimits(max_turns=max_steps),
        seed=seed,
        timeout_s=timeout_s,
    )
    return Play(task, seed, result, tape, policy)


__all__ = [
    "OBSERVATION_FLOAT_TOLERANCE",
    "CheckSetupError",
    "Frame",
    "Play",
    "Playground",
    "PolicyStep",
    "ScriptedPolicy",
    "TapeClient",
    "compare_tapes",
    "episode_success",
    "first_difference",
    "plain",
    "play",
    "playground",
    "short",
    "stable",
]
