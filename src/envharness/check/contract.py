"""The contract of an environment, checked as Gymnasium's `check_env` checks a gym: each check
a short function with a name, PASS / FAIL / SKIP and the reason in words.

Episodes run as eval runs them, through a `Playground` (the environment's harness, its
session factory and tools, a local server) with a client that keeps a tape of the wire, so
the same episode played twice can be compared frame by frame and replayed on a bare client. What
needs a harness (tools, tasks, a scripted policy) is skipped, with the reason, for an
environment that registers none; the rest talks to its server alone (reset/step/state and
`/schema`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envharness.check.floor import (
    FloorPolicy,
    HostilePolicy,
    RandomPolicy,
    bad_payloads,
    hostile_attacks,
    random_call,
    respond,
    schema_action,
)
from envharness.check.playground import (
    OBSERVATION_FLOAT_TOLERANCE,
    CheckSetupError,
    Frame,
    Play,
    Playground,
    ScriptedPolicy,
    TapeClient,
    compare_tapes,
    episode_success,
    first_difference,
    plain,
    play,
    playground,
    short,
    stable,
)
from envharness.check.report import FAIL, PASS, SKIP, CheckReport
from envharness.harness.adapter import tool_message_content
from envharness.harness.types import LLMResponse, Message

BUG = (
    "by the contract an exception other than InvalidAction (or ValueError) is the environment's bug "
    "and ends the episode: reject a bad action with `raise InvalidAction(message)`"
)
NO_HARNESS = "registers no harness (EnvSpec.harness): no tools, tasks or scripted policy to check"


# -- playing through the harness, or over the bare wire -----------------------------------
def reference_policy(pg: Playground, task: str, seed: int) -> Any:
    """The scripted policy when there is one (it reaches the end of episodes), else a seeded random one."""
    randomly = RandomPolicy(random.Random(f"check|{task}|{seed}"), pg.harness.tool_call_parser)
    if pg.harness.scripted_policy is not None:
        return ScriptedPolicy(pg.harness.scripted_policy, pg.harness.tool_call_parser, fallback=randomly)
    return randomly


@dataclass
class Wire:
    """How to start an episode and one action known to be valid, over the bare client."""

    reset_kwargs: dict[str, Any]
    valid: dict[str, Any]
    schema: dict[str, Any]
    seed: int


async def wire_of(pg: Playground, plays: list[Play], seed: int) -> Wire:
    schema = await pg.action_schema()
    for p in plays:
        steps = [f for f in p.tape if f.kind == "step"]
        if p.tape and steps:
            kwargs = {k: v for k, v in p.tape[0].sent.items() if k not in ("episode_id", "seed")}
            return Wire(kwargs, steps[0].sent, schema, p.seed)
    kwargs = dict(plays[0].tape[0].sent) if plays and plays[0].tape else pg.reset_kwargs()
    kwargs = {k: v for k, v in kwargs.items() if k not in ("episode_id", "seed")}
    async with pg.wire_client() as client:
        first = await client.reset(seed=seed, **kwargs)
    return Wire(
        kwargs, schema_action(schema, plain(first.observation), random.Random(f"wire|{seed}")), schema, seed
    )


async def check_server_api(pg: Playground, wire: Wire) -> tuple[str, str]:
    async with pg.wire_client() as client:
        first = await client.reset(seed=wire.seed, episode_id="envharness-check", **wire.reset_kwargs)
        if first.done:
            return FAIL, "reset returned done=True: the episode is over before it began"
        state = await client.state()
        if state.episode_id != "envharness-check":
            return (
                FAIL,
                f"state().episode_id is {state.episode_id!r} after reset(episode_id='envharness-check')",
            )
        before = state.step_count
        result = await client.step(dict(wire.valid))
        if result.reward is not None and not isinstance(result.reward, (int, float)):
            return FAIL, f"step's reward is {result.reward!r}, not a number"
        after = (await client.state()).step_count
        if after <= before:
            return FAIL, f"state().step_count stayed {after} after a step"
    return PASS, f"reset, step ({short(wire.valid, 60)}) and state answer; step_count {before} -> {after}"


async def check_wire_determinism(pg: Playground, wire: Wire, steps: int) -> tuple[str, str]:
    """No harness: two bare clients, the same seed, the same random schema actions."""
    tapes: list[list[Frame]] = []
    for _ in range(2):
        rng, tape = random.Random(f"wire|{wire.seed}"), []
        async with pg.wire_client() as client:
            client = TapeClient(client, tape)
            result = await client.reset(seed=wire.seed, **wire.reset_kwargs)
            for _ in range(steps):
                if result.done:
                    break
                result = await client.step(schema_action(wire.schema, plain(result.observation), rng))
        tapes.append(tape)
    found = compare_tapes(*tapes)
    return (
        (FAIL, f"seed {wire.seed}: {found}")
        if found
        else (PASS, f"seed {wire.seed}, {len(tapes[0]) - 1} step(s) replayed alike")
    )


async def check_bad_wire_actions(pg: Playground, wire: Wire) -> tuple[str, str]:
    from envharness.core.client import EnvServerError

    refused = answered = 0
    async with pg.wire_client() as client:
        result = await client.reset(seed=wire.seed, **wire.reset_kwargs)
        for label, payload in bad_payloads(wire.schema):
            try:
                result = await client.step(payload)
                answered += 1
            except EnvServerError as exc:
                if not exc.message.strip():
                    return FAIL, f"{label}: the server's error has no message (code {exc.code})"
                if exc.code == "EXECUTION_ERROR" and not isinstance(exc, ValueError):
                    return FAIL, f"{label}: step raised {exc.message}; {BUG}"
                refused += 1
            except (ConnectionError, TimeoutError) as exc:
                return FAIL, f"{label} ended the session: {exc}"
            if result.done:
                result = await client.reset(seed=wire.seed, **wire.reset_kwargs)
            try:
                result = await client.step(dict(wire.valid))
            except Exception as exc:
                return (
                    FAIL,
                    f"after {label}, a well-formed action ({short(wire.valid, 50)}) failed: {type(exc).__name__}: {exc}",
                )
            if result.done:
                result = await client.reset(seed=wire.seed, **wire.reset_kwargs)
    return (
        PASS,
        f"{refused} bad action(s) refused with a message, {answered} answered; a well-formed action worked after each",
    )


async def check_reset_after_done(
    pg: Playground, wire: Wire, plays: list[Play], max_steps: int
) -> tuple[str, str]:
    """Replay an episode that ended on a bare client, then reset that same client."""
    ended = next((p for p in plays if p.tape and p.tape[-1].done), None)
    async with pg.wire_client() as client:
        if ended is not None:
            kwargs = {k: v for k, v in ended.tape[0].sent.items() if k != "episode_id"}
            first = await client.reset(**kwargs)
            actions = [f.sent for f in ended.tape[1:]]
        else:  # no harness episode ended: random schema actions on the bare client
            kwargs = {"seed": wire.seed, **wire.reset_kwargs}
            first = await client.reset(**kwargs)
            actions = []
        result, rng, steps = first, random.Random(f"done|{wire.seed}"), 0
        while not result.done and steps < max_steps:
            action = (
                actions[steps]
                if steps < len(actions)
                else schema_action(wire.schema, plain(result.observation), rng)
            )
            result = await client.step(dict(action))
            steps += 1
        if not result.done:
            return SKIP, f"no episode ended within {max_steps} step(s), so there was no done to reset after"
        again = await client.reset(**kwargs)
        if again.done:
            return FAIL, "reset after done returned done=True"
        found = first_difference(
            stable(plain(first.observation)),
            stable(plain(again.observation)),
            "",
            OBSERVATION_FLOAT_TOLERANCE,
        )
        if found:
            return FAIL, f"reset after done (same seed) gave another first observation: {found.lstrip('.')}"
        count = (await client.state()).step_count
        if count:
            return FAIL, f"state().step_count is {count} right after reset"
        await client.step(dict(actions[0] if actions else wire.valid))
    return (
        PASS,
        f"episode ended after {steps} step(s); reset on the same client started it afresh and a step worked",
    )


# -- the harness, for environments that register one --------------------------------------
ATTACK_LABELS = (
    "an unknown tool",
    "wrong argument types",
    "enormous arguments",
    "code-injection arguments",
    "injection text through the reply parser",
    "garbage text through the reply parser",
)


class BadThenValid(FloorPolicy):
    """The hostile policy's attacks, one per turn (those the parser turns into no call are
    skipped: no call is the harness's stop), then one valid action."""

    name = "bad-then-valid"

    def __init__(self, rng: random.Random, parser: Any, valid: FloorPolicy) -> None:
        super().__init__(rng, parser)
        self.valid, self.sent = valid, []  # sent: (label, calls) per reply
        self._queue: list[tuple[str, Any]] | None = None

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        if self._queue is None:
            hostile = HostilePolicy(self.rng, self.parser)
            attacks = [
                *hostile_attacks(hostile, tools),
                lambda: hostile.parsed("%$#@!~ \x07\u202e garbage ]]][[ {{"),
            ]
            self._queue = list(zip(ATTACK_LABELS, attacks))
        while self._queue:
            label, attack = self._queue.pop(0)
            reply = attack()
            if reply.tool_calls:
                self.sent.append((label, len(reply.tool_calls)))
                return reply
        reply = self.valid(messages, tools)
        if not reply.tool_calls:
            reply = respond(random_call(tools, messages, self.rng, "check-valid"))
        self.sent.append(("the valid action", len(reply.tool_calls)))
        return reply


async def check_bad_tool_calls(
    pg: Playground, task: str, seed: int, timeout_s: float | None
) -> tuple[str, str]:
    rng = random.Random(f"bad|{task}|{seed}")
    policy = BadThenValid(rng, pg.harness.tool_call_parser, reference_policy(pg, task, seed))
    done = await play(pg, task, seed, policy, len(ATTACK_LABELS) + 2, timeout_s)
    labels = [label for label, n in policy.sent for _ in range(n)]
    result = done.result
    if result.error is not None:
        last = (
            labels[len(result.tool_trace)]
            if len(result.tool_trace) < len(labels)
            else (labels[-1] if labels else "the start")
        )
        bug = f"; {BUG}" if result.metrics.get("env_error") else ""
        return FAIL, f"{task} seed {seed}: the episode died at {last}: {result.error}{bug}"
    for label, entry in zip(labels, result.tool_trace):
        if label != "the valid action" and not str(tool_message_content(entry.result)).strip():
            return FAIL, f"{task} seed {seed}: {label} ({entry.tool_name}) got no message back"
    if labels and labels[-1] == "the valid action" and len(result.tool_trace) == len(labels):
        last = result.tool_trace[-1].result
        if last.error and isinstance(policy.valid, ScriptedPolicy):
            return FAIL, f"{task} seed {seed}: after the bad actions the scripted action failed: {last.error}"
        return (
            PASS,
            f"{task}: {len(labels) - 1} bad call(s) answered in words; the valid action after them worked",
        )
    ended = labels[len(result.tool_trace) - 1] if result.tool_trace else "the start"
    return (
        PASS,
        f"{task}: bad calls answered in words; the episode ended (done) at {ended}, as the game's rules may say",
    )


def check_reward_range(pg: Playground, plays: list[Play]) -> tuple[str, str]:
    """Every reward the episodes saw lies in the declared `reward_range`."""
    low, high = pg.harness.reward_range
    seen = [(p, k, f.reward) for p in plays for k, f in enumerate(p.tape) if f.reward is not None]
    outside = [(p, k, r) for p, k, r in seen if not low <= r <= high]
    if outside:
        p, k, r = outside[0]
        return FAIL, (
            f"{p.task} seed {p.seed}, {'reset' if k == 0 else f'step {k}'}: reward {r:g} outside the declared "
            f"range [{low:g}, {high:g}] ({len(outside)} of {len(seen)}); declare it: define_environment(reward_range=...)"
        )
    return PASS, f"{len(seen)} reward(s) within [{low:g}, {high:g}]; the full score is {high:g}"


def check_scripted(pg: Playground, plays: list[Play]) -> tuple[str, str]:
    if pg.harness.scripted_policy is None:
        return SKIP, "no scripted policy (EnvHarness.scripted_policy)"
    covered = [p for p in plays if getattr(p.policy, "covers", True)]
    uncovered = sorted({p.task for p in plays} - {p.task for p in covered})
    note = (
        f"; no move at all on {len(uncovered)} task(s), not held to them: {', '.join(uncovered[:5])}"
        if uncovered
        else ""
    )
    if not covered:
        return (
            SKIP,
            f"the scripted policy has no move on any checked task ({getattr(plays[0].policy, 'problem', '')})",
        )
    games = [p for p in covered if _outcome(p) is not None]
    if games:  # against an opponent: a strong policy can lose a game, never by its own fault
        return _check_scripted_games(games, note)
    lost = [p for p in covered if not episode_success(p.result)]
    if lost:
        why = "; ".join(
            f"{p.task} seed {p.seed}: reward {p.result.env_reward or 0:g} after {len(p.result.tool_trace)} action(s), "
            f"{p.result.error or getattr(p.policy, 'problem', '') or 'stopped: ' + str(p.result.metrics.get('stop_reason'))}"
            for p in lost[:5]
        )
        return FAIL, f"it lost {len(lost)}/{len(covered)} episode(s): {why}{note}"
    return (
        PASS,
        f"won {len(covered)}/{len(covered)} episode(s) on {len({p.task for p in covered})} task(s){note}",
    )


def _outcome(play: Play) -> str | None:
    """A seated game's outcome for the checked seat (win, draw, loss, unfinished); None elsewhere."""
    verify = play.result.verify
    return (verify.metrics or {}).get("outcome") if verify is not None else None


def _check_scripted_games(games: list[Play], note: str) -> tuple[str, str]:
    """Games against an opponent: every game finished, without an invalid move or an error of
    the scripted policy's, and at least one won (a win is reachable and reported as one)."""
    faults = [
        f"{p.task} seed {p.seed}: "
        + (
            p.result.error
            or ("an invalid move" if p.result.verify.metrics.get("invalid_move") else "unfinished")
        )
        for p in games
        if p.result.error or p.result.verify.metrics.get("invalid_move") or _outcome(p) == "unfinished"
    ]
    if faults:
        return FAIL, f"against the opponent: {'; '.join(faults[:5])}{note}"
    tally = {o: sum(_outcome(p) == o for p in games) for o in ("win", "draw", "loss")}
    said = f"won {tally['win']}, drew {tally['draw']}, lost {tally['loss']} of {len(games)} game(s) against the opponent"
    if not tally["win"]:
        return FAIL, f"{said}: no win, so success is never reported{note}"
    return PASS, f"{said} (strong play may lose a game; none ended by its own fault){note}"


async def check_task_list(pg: Playground, plays: list[Play]) -> tuple[str, str]:
    listing = pg.harness.task_list()
    tasks = list(listing.tasks)
    if not tasks:
        return FAIL, "task_list() lists no tasks"
    if len(set(tasks)) != len(tasks):
        return FAIL, f"task_list() repeats task(s): {sorted({t for t in tasks if tasks.count(t) > 1})[:5]}"
    stray = {f"{split}:{t}" for split, names in listing.splits.items() for t in names if t not in tasks}
    stray |= {f"default:{t}" for t in pg.harness.default_tasks if t not in tasks and t not in listing.splits}
    if stray:
        return FAIL, f"split or default task(s) missing from the listing: {', '.join(sorted(stray)[:5])}"
    refused = []
    for name in tasks:
        try:
            pg.harness.check_task(name)
        except ValueError as exc:
            refused.append(f"{name} ({exc})")
    if refused:
        return FAIL, f"check_task refuses listed task(s): {'; '.join(refused[:3])}"
    broken = [p for p in plays if p.result.error is not None and not p.tape]
    if broken:
        return FAIL, "listed task(s) do not reset: " + "; ".join(
            f"{p.task}: {p.result.error}" for p in broken[:3]
        )
    served = await pg.served_tasks()
    expected = list(pg.harness.served_tasks().tasks) if pg.harness.served_tasks else tasks
    if served is not None and served != expected:
        missing, extra = set(expected) - set(served), set(served) - set(expected)
        return FAIL, (
            f"the server lists other tasks than the harness: {len(missing)} only in the harness's listing "
            f"{sorted(missing)[:3]}, {len(extra)} only on the server {sorted(extra)[:3]}"
        )
    played = sorted({p.task for p in plays})
    return PASS, (
        f"{len(tasks)} task(s) listed, accepted by check_task"
        + (", the same as the server's Task API" if served is not None else "")
        + f"; {len(played)} reset and played"
    )


async def check_unknown_task(pg: Playground, plays: list[Play]) -> tuple[str, str]:
    from envharness.core.client import EnvServerError

    known = next((p for p in plays if p.tape), None)
    task = known.task if known else pg.harness.default_tasks[0]
    bogus = f"{task}-no-such-task"
    try:
        pg.harness.check_task(bogus)
        return FAIL, f"check_task accepted the unknown task {bogus!r}"
    except ValueError as exc:
        words = str(exc)
    key = next((k for k, v in known.tape[0].sent.items() if v == task), None) if known else None
    if key is None:
        return (
            PASS,
            f"check_task refuses {bogus!r} ({short(words, 60)}); no reset option names the task, so the server was not asked",
        )
    kwargs = {k: v for k, v in known.tape[0].sent.items() if k != "episode_id"}
    async with pg.wire_client() as client:
        try:
            await client.reset(**{**kwargs, key: bogus})
        except EnvServerError as exc:
            return (
                PASS,
                f"refused by check_task ({short(words, 50)}) and by the server ({short(exc.message, 60)})",
            )
    return FAIL, f"the server accepted reset({key}={bogus!r}): an unknown task must be refused with an error"


# -- all of them ------------------------------------------------------------------------
async def _guarded(report: CheckReport, name: str, run: Callable[[], Awaitable[tuple[str, str]]]) -> None:
    """One check; an exception in it (the server refused, a timeout) fails it with the reason."""
    raised = False
    try:
        status, reason = await run()
    except Exception as exc:
        status, reason, raised = FAIL, f"{type(exc).__name__}: {exc}", True
    report.add(name, status, reason, raised=raised)


async def check_environment_async(
    env: str,
    options: dict[str, Any] | None = None,
    *,
    tasks: Sequence[str] = (),
    episodes: int = 2,
    seed: int = 0,
    max_steps: int = 20,
    concurrency: int = 4,
    env_url: str | None = None,
    episode_timeout_s: float | None = 120.0,
) -> CheckReport:
    """Check `env`'s contract on its server (started here on loopback unless `env_url`)."""
    started = time.perf_counter()
    if episodes < 1 or max_steps < 1 or concurrency < 1:
        raise CheckSetupError("--episodes, --max-steps and --concurrency must be at least 1")
    pg = playground(env, options)
    if pg.harness is None and tasks:
        raise CheckSetupError(f"environment {env!r} {NO_HARNESS}: drop --tasks")
    chosen = pg.tasks(tasks) if pg.harness is not None else []
    listed = len(pg.harness.task_list().tasks) if pg.harness is not None and not tasks else 0
    report = CheckReport(env=env, tasks=chosen, listed=listed)
    await pg.start(env_url=env_url, max_sessions=max(64, 4 * concurrency))
    try:
        plays: list[Play] = []
        again: list[Play] = []
        if pg.harness is not None:
            gate = asyncio.Semaphore(concurrency)

            async def one(task: str, s: int) -> Play:
                async with gate:
                    return await play(
                        pg, task, s, reference_policy(pg, task, s), max_steps, episode_timeout_s
                    )

            pairs = [(t, seed + k) for k in range(episodes) for t in chosen]
            done = await asyncio.gather(*(one(t, s) for t, s in pairs for _ in range(2)))
            plays, again = list(done[0::2]), list(done[1::2])
        wire = await wire_of(pg, plays, seed)
        await _guarded(report, "server_api", lambda: check_server_api(pg, wire))
        if pg.harness is not None:
            await _guarded(report, "same_seed_same_episode", lambda: _determinism(pg, plays, again))
        else:
            await _guarded(
                report, "same_seed_same_episode", lambda: check_wire_determinism(pg, wire, min(max_steps, 5))
            )
        await _guarded(report, "bad_wire_actions", lambda: check_bad_wire_actions(pg, wire))
        if pg.harness is not None:
            await _guarded(
                report, "bad_tool_calls", lambda: check_bad_tool_calls(pg, chosen[0], seed, episode_timeout_s)
            )
        else:
            report.add("bad_tool_calls", SKIP, f"{env} {NO_HARNESS}")
        await _guarded(report, "reset_after_done", lambda: check_reset_after_done(pg, wire, plays, max_steps))
        if pg.harness is not None:
            await _guarded(report, "scripted_policy_wins", lambda: _now(check_scripted(pg, plays)))
            await _guarded(report, "reward_range", lambda: _now(check_reward_range(pg, plays + again)))
            await _guarded(report, "task_list", lambda: check_task_list(pg, plays))
            await _guarded(report, "unknown_task", lambda: check_unknown_task(pg, plays))
        else:
            for name in ("scripted_policy_wins", "reward_range", "task_list", "unknown_task"):
                report.add(name, SKIP, f"{env} {NO_HARNESS}")
    finally:
        await pg.close()
    report.seconds = time.perf_counter() - started
    return report


async def _now(value: tuple[str, str]) -> tuple[str, str]:
    return value


async def _determinism(pg: Playground, plays: list[Play], again: list[Play]) -> tuple[str, str]:
    clock = pg.harness.clock_driven or (lambda task: None)
    by_clock: dict[str, str] = {}
    for a, b in zip(plays, again):
        if a.result.error and not a.tape:
            continue  # did not reset: task_list says so
        why = clock(a.task)
        found = _same_goal(pg, a, b) if why else compare_tapes(a.tape, b.tape)
        if found:
            return FAIL, f"{a.task} seed {a.seed}, played twice with the same actions: {found}"
        if why:
            by_clock[a.task] = why
    steps = sum(len(p.tape) - 1 for p in plays if p.tape and p.task not in by_clock)
    note = "".join(f"; {task} compared by its goal only ({why})" for task, why in list(by_clock.items())[:3])
    return (
        PASS,
        f"{len(plays)} (task, seed) pair(s) played twice: the same observations, rewards and done ({steps} step(s)){note}",
    )


def _same_goal(pg: Playground, a: Play, b: Play) -> str | None:
    """A clock-driven task's two plays: the same reset request and the same goal (the seeded
    part; the page around it follows the clock), or the same first observation where the
    harness cannot tell the goal (`EnvHarness.describe_observation`)."""
    if not a.tape or not b.tape:
        return None if len(a.tape) == len(b.tape) else "one play did not reset"
    x, y = a.tape[0], b.tape[0]
    sent = first_difference(stable(x.sent), stable(y.sent), "reset.sent")
    describe = pg.harness.describe_observation
    if describe is None:
        return sent or first_difference(stable(x.observation), stable(y.observation), "the first observation")
    return sent or first_difference(describe(x.observation)[0], describe(y.observation)[0], "the goal")


def check_environment(env: str, options: dict[str, Any] | None = None, **kwargs: Any) -> CheckReport:
    """Synchronous `check_environment_async`: the contract checks of `env`, as a `CheckReport`."""
    return asyncio.run(check_environment_async(env, options, **kwargs))


__all__ = ["ScriptedPolicy", "check_environment", "check_environment_async"]
