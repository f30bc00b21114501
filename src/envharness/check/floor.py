"""The adversarial floor: policies that should not win, and how often they still do.

Four generic policies, none of which knows an environment: `random` (a random tool of the
session's, with arguments drawn from its JSON schema; strings prefer tokens of the latest
observation, so a random click hits real elements), `noop` (no tool call: the harness's stop),
`hostile` (unknown tools, wrong argument types, enormous strings, code injection, then
garbage, some of it as text through the environment's own reply parser) and `repeat` (its
first random action, every turn). Each plays N episodes per task through the machinery eval
uses: a local server, the environment's harness and session factory, `run_episodes`. A task
that one of them wins is a task a model can win by chance; the report lists its episodes.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envharness.check.playground import CheckSetupError, PolicyStep, episode_success, playground
from envharness.check.report import FloorEpisode, FloorReport
from envharness.harness.rollout import run_episodes
from envharness.harness.session import create_session
from envharness.harness.tool_parsing import ToolCallParser, normalize_parsed
from envharness.harness.tools import tool_name, tool_schema
from envharness.harness.types import HarnessRolloutResult, HarnessRunLimits, LLMResponse, Message, ToolCall

# -- arguments from a JSON schema -------------------------------------------------------
_BRACKET_ID = re.compile(r"\[(\w{1,40})\]")
_QUOTED = re.compile(r"'([^'\n]{1,60})'")
_WORD = re.compile(r"[A-Za-z0-9_]{2,40}")
_NUMBER = re.compile(r"-?\d{1,9}")


def message_text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def latest_observation(messages: list[Message]) -> str:
    """The newest text the environment said (the last user or tool message)."""
    return next((message_text(m) for m in reversed(messages) if m.get("role") in ("user", "tool")), "")


@dataclass
class Tokens:
    """What a random argument is drawn from: the ids in brackets, quoted names, words and
    numbers of the latest observation."""

    ids: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, text: str) -> Tokens:
        unique = lambda items: list(dict.fromkeys(items))  # noqa: E731
        return cls(
            unique(_BRACKET_ID.findall(text)),
            unique(_QUOTED.findall(text)),
            unique(_WORD.findall(text)),
            unique(int(n) for n in _NUMBER.findall(text)),
        )

    def string(self, rng: random.Random) -> str:
        for pool in (self.ids, self.quoted):
            if pool and rng.random() < 0.5:
                return rng.choice(pool)
        return rng.choice(self.words) if self.words else rng.choice(string.ascii_lowercase)

    def integer(self, rng: random.Random) -> int:
        return rng.choice(self.numbers) if self.numbers and rng.random() < 0.5 else rng.randint(0, 100)


def random_value(schema: dict[str, Any], tokens: Tokens, rng: random.Random, depth: int = 0) -> Any:
    """A value that fits `schema` (type, enum, items), drawn at random."""
    if "enum" in schema and schema["enum"]:
        return rng.choice(list(schema["enum"]))
    options = [
        s
        for s in schema.get("anyOf") or schema.get("oneOf") or []
        if isinstance(s, dict) and s.get("type") != "null"
    ]
    if options:  # pydantic's Optional[X] and unions
        return random_value(rng.choice(options), tokens, rng, depth)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = rng.choice(kind) if kind else "string"
    if kind == "integer":
        return tokens.integer(rng)
    if kind == "number":
        return tokens.integer(rng)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {"type": "string"}
        return (
            [random_value(items, tokens, rng, depth + 1) for _ in range(rng.randint(1, 2))]
            if depth < 3
            else []
        )
    if kind == "object":
        return {}
    if kind == "null":
        return None
    return tokens.string(rng)


def tool_properties(tool: Any) -> tuple[dict[str, Any], set[str]]:
    schema = tool_schema(tool)
    return dict(schema.get("properties") or {}), set(schema.get("required") or [])


def random_arguments(tool: Any, tokens: Tokens, rng: random.Random) -> dict[str, Any]:
    """Every required argument, and each optional one a quarter of the time (an optional
    argument drawn at random, a mouse button named '14', mostly spoils the call)."""
    props, required = tool_properties(tool)
    return {
        k: random_value(p if isinstance(p, dict) else {}, tokens, rng)
        for k, p in props.items()
        if k in required or rng.random() < 0.25
    }


def random_call(
    tools: list[Any], messages: list[Message], rng: random.Random, call_id: str = "floor"
) -> ToolCall:
    """A random tool of `tools` with random arguments that fit its schema."""
    tool = rng.choice(tools)
    return ToolCall(
        id=call_id,
        name=tool_name(tool),
        args=random_arguments(tool, Tokens.of(latest_observation(messages)), rng),
    )


def action_properties(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An action schema's fields (the base class's free-form `metadata` left out)."""
    return {
        k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata" and isinstance(v, dict)
    }


def tool_branches(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, its arguments' schema) of an action schema with one branch per tool
    (`core/tool_actions.py`: ``{"tool_name": ..., "arguments": {...}}``); [] for any other."""
    out = []
    for branch in schema.get("oneOf") or []:
        props = (branch.get("properties") or {}) if isinstance(branch, dict) else {}
        name = (props.get("tool_name") or {}).get("const")
        if isinstance(name, str):
            out.append((name, props.get("arguments") or {}))
    return out


def schema_action(schema: dict[str, Any], observation: Any, rng: random.Random) -> dict[str, Any]:
    """A random wire action that fits the server's action schema (its required fields; a call
    of a random tool with random arguments when the schema has one branch per tool)."""
    tokens = Tokens.of(str(observation))
    branches = tool_branches(schema)
    if branches:
        name, arguments = rng.choice(branches)
        tool = {"name": name, "inputSchema": arguments}
        return {"tool_name": name, "arguments": random_arguments(tool, tokens, rng)}
    required = set(schema.get("required") or [])
    return {k: random_value(p, tokens, rng) for k, p in action_properties(schema).items() if k in required}


def render_call(name: str, args: dict[str, Any], limit: int = 60) -> str:
    """`click(bid='12')`, long values cut (with their length), for reports."""

    def short(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= limit else f"{text[:limit]}...({len(text)} chars)"

    return f"{name}({', '.join(f'{k}={short(v)}' for k, v in args.items())})"


def respond(call: ToolCall) -> LLMResponse:
    return LLMResponse(content=render_call(call.name, call.args), tool_calls=[call])


# -- the policies -----------------------------------------------------------------------
class FloorPolicy:
    """One episode's policy: the conversation and the tools -> the next reply."""

    name = ""

    def __init__(self, rng: random.Random, parser: ToolCallParser | None = None) -> None:
        self.rng, self.parser, self.turn = rng, parser, 0

    def __call__(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        reply = self.act(messages, tools)
        self.turn += 1
        return reply

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        raise NotImplementedError

    def parsed(self, text: str) -> LLMResponse:
        """`text` as the model's reply, read by the environment's own parser."""
        calls = normalize_parsed(self.parser(text)) if self.parser is not None else []
        return LLMResponse(content=text, tool_calls=calls)


class RandomPolicy(FloorPolicy):
    name = "random"

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        return respond(random_call(tools, messages, self.rng, f"floor-{self.turn}"))


class NoopPolicy(FloorPolicy):
    """Sends nothing: the episode ends at once, scored on the first observation."""

    name = "noop"

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        return LLMResponse(content="")


class RepeatPolicy(FloorPolicy):
    name = "repeat"
    first: ToolCall | None = None

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        if self.first is None:
            self.first = random_call(tools, messages, self.rng, "floor-repeat")
        return respond(self.first)


INJECTIONS = (
    "__import__('os').system('id')",
    "'); __import__('os').system('id'); ('",
    "\"; exec('import os'); \"",
    "{{7*7}}${7*7}<%= 7*7 %>",
    "<script>alert(document.cookie)</script>",
    "../../../../etc/passwd",
    "'; DROP TABLE users; --",
    "\x00\x1b[2J\ud800",
    "() { :; }; /bin/id",
    "${jndi:ldap://127.0.0.1/a}",
)
INJECTION_TEXTS = (
    "Action: click(__import__('os').system('id'))",
    "```python\nimport os\nos.system('id')\n```",
    '{"name": "__import__", "arguments": {"name": "os"}}',
    "send(open('/etc/passwd').read())",
    "Action: fill('1', 'a' * 10**9)",
    "eval(compile('1', '<x>', 'eval'))",
)
_JUNK = (None, [], {}, [[[]]], {"$gt": ""}, -1, 2**64, "", " ", 1e308, True, ["a", 1, None])


def wrong_type_value(prop: dict[str, Any]) -> Any:
    kind = prop.get("type", "string")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds:
        return 12345 if "integer" not in kinds and "number" not in kinds else {"$ne": 1}
    if kinds and set(kinds) <= {"integer", "number"}:
        return "1; DROP TABLE x"
    return {"__class__": "x"}


def _with_props(tools: list[Any], rng: random.Random, kinds: tuple[str, ...] = ()) -> Any:
    """A tool with arguments (one with a string argument when `kinds` asks), else any tool."""

    def fits(tool: Any) -> bool:
        props, _ = tool_properties(tool)
        return bool(props) and (
            not kinds
            or any(
                (p.get("type") in kinds or (isinstance(p.get("type"), list) and set(p["type"]) & set(kinds)))
                for p in props.values()
                if isinstance(p, dict)
            )
        )

    return rng.choice([t for t in tools if fits(t)] or [t for t in tools if tool_properties(t)[0]] or tools)


def _fill(tool: Any, value_of: Callable[[dict[str, Any]], Any]) -> ToolCall:
    props, _ = tool_properties(tool)
    return ToolCall(
        id="floor-hostile",
        name=tool_name(tool),
        args={k: value_of(p if isinstance(p, dict) else {}) for k, p in props.items()},
    )


def enormous_value(prop: dict[str, Any]) -> Any:
    kind = prop.get("type", "string")
    kinds = kind if isinstance(kind, list) else [kind]
    if "string" in kinds:
        return ("A" * 99 + "\n") * 1000  # 100,000 characters
    if "integer" in kinds or "number" in kinds:
        return 2**64
    return ["A" * 1000] * 100 if "array" in kinds else {}


def bad_payloads(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Malformed and hostile wire actions for an action schema, each with its name."""
    props = action_properties(schema)
    strings = {k: p for k, p in props.items() if _is_string(p)}
    out = [("an empty action", {}), ("an unknown field", {"__no_such_field__": "__import__('os')"})]
    if props:
        out.append(("wrong field types", {k: wrong_type_value(p) for k, p in props.items()}))
    if strings:
        out.append(("enormous strings", {k: enormous_value(p) for k, p in strings.items()}))
        out += [(f"injection {s[:30]!r}", {k: s for k in strings}) for s in INJECTIONS[:4]]
    return out + tool_payloads(schema)


def tool_payloads(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """For an action schema with one branch per tool: an unknown tool, and each tool's
    arguments of the wrong types (every tool checked on the wire)."""
    branches = tool_branches(schema)
    out = [("an unknown tool", {"tool_name": "__import__", "arguments": {"name": "os"}})] if branches else []
    for name, arguments in branches:
        props = action_properties(arguments)
        wrong = {k: wrong_type_value(p) for k, p in props.items()} or {"__no_such_argument__": 1}
        out.append((f"{name} with wrong argument types", {"tool_name": name, "arguments": wrong}))
    return out


class HostilePolicy(FloorPolicy):
    """Malformed and hostile calls in a fixed order, then random garbage."""

    name = "hostile"

    def act(self, messages: list[Message], tools: list[Any]) -> LLMResponse:
        attacks = hostile_attacks(self, tools)
        return attacks[self.turn]() if self.turn < len(attacks) else self.garbage(tools)

    def garbage(self, tools: list[Any]) -> LLMResponse:
        rng = self.rng
        if rng.random() < 0.5:
            if rng.random() < 0.3:
                return self.parsed(rng.choice(INJECTION_TEXTS))
            alphabet = string.printable + "\u00e9\u4e2d\U0001f600\u202e\x00"
            return self.parsed("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))))
        tool = rng.choice(tools)
        props, _ = tool_properties(tool)
        keys = list(props) or ["x"]
        return respond(
            ToolCall(id="floor-garbage", name=tool_name(tool), args={k: rng.choice(_JUNK) for k in keys})
        )


def hostile_attacks(policy: FloorPolicy, tools: list[Any]) -> list[Callable[[], LLMResponse]]:
    """The hostile policy's first moves, in order: each a reply no environment should score on
    and every session should answer in words (also the contract's bad actions)."""
    rng = policy.rng
    return [
        lambda: respond(ToolCall(id="floor-unknown", name="__import__('os').system", args={"command": "id"})),
        lambda: respond(_with_extra(_fill(_with_props(tools, rng), wrong_type_value))),
        lambda: respond(_fill(_with_props(tools, rng, ("string",)), enormous_value)),
        lambda: respond(
            _fill(
                _with_props(tools, rng, ("string",)),
                lambda p: rng.choice(INJECTIONS) if _is_string(p) else -1,
            )
        ),
        lambda: policy.parsed(rng.choice(INJECTION_TEXTS)),
    ]


def _is_string(prop: dict[str, Any]) -> bool:
    kind = prop.get("type", "string")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _with_extra(call: ToolCall) -> ToolCall:
    call.args["__class__"] = "__import__('os')"
    return call


POLICIES: dict[str, type[FloorPolicy]] = {
    p.name: p for p in (RandomPolicy, NoopPolicy, HostilePolicy, RepeatPolicy)
}


def episode_actions(result: HarnessRolloutResult) -> list[str]:
    return [render_call(e.tool_name, e.arguments) for e in result.tool_trace]


class _KeyedFactory:
    """The session factory, noting which job each session plays (its model step is the job's policy)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.jobs: dict[int, str] = {}

    async def create_async(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> Any:
        session = await create_session(self.inner, task, seed, episode_id)
        self.jobs[id(session)] = episode_id or ""
        return session


# -- the runner -------------------------------------------------------------------------
async def run_floor_async(
    env: str,
    options: dict[str, Any] | None = None,
    *,
    tasks: Sequence[str] = (),
    policies: Sequence[str] = tuple(POLICIES),
    episodes: int = 3,
    seed: int = 0,
    max_steps: int = 5,
    concurrency: int = 4,
    env_url: str | None = None,
    episode_timeout_s: float | None = 120.0,
    progress: bool = False,
) -> FloorReport:
    """Every policy for `episodes` episodes (seeds SEED..) on every task; the report of them all."""
    started = time.perf_counter()
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise CheckSetupError(
            f"unknown floor policy {', '.join(unknown) or '(none given)'}; choose from {', '.join(POLICIES)}"
        )
    if episodes < 1 or max_steps < 1 or concurrency < 1:
        raise CheckSetupError("--floor-episodes, --max-steps and --concurrency must be at least 1")
    pg = playground(env, options)
    if pg.harness is None:
        raise CheckSetupError(
            f"environment {env!r} registers no harness (tools, tasks): the floor plays through the "
            "harness's tools; `envharness check` without --floor checks its server"
        )
    chosen = pg.tasks(tasks)
    jobs = {
        f"floor-{p}-{seed + k}-{i}": (p, task, seed + k)
        for k in range(episodes)
        for i, task in enumerate(chosen)
        for p in policies
    }
    ids = list(jobs)
    report = FloorReport(
        env=env,
        tasks=chosen,
        policies=list(policies),
        episodes_per_task=episodes,
        max_steps=max_steps,
        seed=seed,
        options=dict(pg.options),
    )
    await pg.start(
        env_url=env_url,
        server_options=dict(pg.harness.train_server_options),
        max_sessions=max(64, 2 * concurrency),
    )
    try:
        factory = _KeyedFactory(pg.session_factory())
        parser = pg.harness.tool_call_parser

        def make_step(session: Any) -> PolicyStep:
            policy, task, job_seed = jobs[factory.jobs.pop(id(session))]
            return PolicyStep(POLICIES[policy](random.Random(f"{policy}|{task}|{job_seed}"), parser))

        bar = _progress(len(ids), progress)
        results = await run_episodes(
            factory,
            [jobs[i][1] for i in ids],
            model_step_builder=make_step,
            limits=HarnessRunLimits(max_turns=max_steps),
            max_concurrency=concurrency,
            seeds=[jobs[i][2] for i in ids],
            episode_ids=ids,
            on_result=lambda i, r: bar.update(1),
            episode_timeout_s=episode_timeout_s,
        )
        bar.close()
    finally:
        await pg.close()
    for job_id, result in zip(ids, results):
        policy, task, job_seed = jobs[job_id]
        report.episodes.append(
            FloorEpisode(
                policy=policy,
                task=task,
                seed=job_seed,
                reward=float(result.env_reward or 0.0),
                success=episode_success(result),
                actions=episode_actions(result),
                stop_reason=str(result.metrics.get("stop_reason", "")),
                error=result.error,
            )
        )
    report.seconds = time.perf_counter() - started
    return report


def run_floor(env: str, options: dict[str, Any] | None = None, **kwargs: Any) -> FloorReport:
    """Synchronous `run_floor_async`."""
    return asyncio.run(run_floor_async(env, options, **kwargs))


def _progress(total: int, enabled: bool) -> Any:
    import sys

    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="floor episodes",
        unit="ep",
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
    )


__all__ = [
    "INJECTIONS",
    "POLICIES",
    "FloorPolicy",
    "HostilePolicy",
    "NoopPolicy",
    "RandomPolicy",
    "RepeatPolicy",
    "bad_payloads",
    "hostile_attacks",
    "random_call",
    "random_value",
    "render_call",
    "run_floor",
    "run_floor_async",
    "schema_action",
]
