"""The harness runtime: adapter loop, tool errors, concurrency, failure isolation, TRL output, records.

`CounterSession` is a small but real `ResourceSession` (the interface users implement):
`add(n)` adds to a total, `finish()` ends the episode with reward = total. Model steps are
scripted: each reply is a JSON tool call, and its tokens are known ids, so every output
can be checked exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

import pytest

from envharness.core.concurrency import run_sync, worker_threads
from envharness.harness import (
    BatchingModelStep,
    HarnessRunLimits,
    LLMResponse,
    MCPHarnessAdapter,
    ModelStepResult,
    ResourceSession,
    ResourceSessionFactory,
    ToolResult,
    VerifyResult,
    build_harness_rollout_func,
    parse_json_tool_calls,
    read_records,
    run_episodes,
    tool_spec,
    write_records,
)
from envharness.models.base import Generation, GenerationRequest


class CounterSession(ResourceSession):
    def __init__(self, task: str, stats: dict, delay: float = 0.0, fail: str | None = None):
        self.task, self.stats, self.delay, self.fail = task, stats, delay, fail
        self.total, self.reward, self.done, self.closed, self.calls = 0, None, False, False, 0

    def initial_messages(self):
        return [{"role": "user", "content": f"Reach the total for task {self.task}."}]

    def list_tools(self):
        return [
            tool_spec("add", "Add n to the total.", {"n": {"type": "integer"}}, ["n"]),
            tool_spec("finish", "End the episode; the reward is the total."),
        ]

    def call_tool(self, name, arguments):
        with self.stats["lock"]:
            self.stats["in_flight"] += 1
            self.stats["peak"] = max(self.stats["peak"], self.stats["in_flight"])
        try:
            self.calls += 1
            time.sleep(5.0 if self.fail == "hang" else self.delay)  # "hang": an env that stopped answering
            if self.fail == "call_tool" and self.calls == 2:  # mid-episode: the first call worked
                raise RuntimeError("environment server went away")
            if name == "add":
                if arguments["n"] < 0:
                    raise ValueError("n must be >= 0")
                self.total += arguments["n"]
                return ToolResult(data=f"total={self.total}")
            if name == "finish":
                self.reward, self.done = float(self.total), True
                return ToolResult(
                    data=f"final total={self.total}", done=True, metadata={"reward": self.reward}
                )
            raise KeyError(f"Unknown tool: {name}")
        finally:
            with self.stats["lock"]:
                self.stats["in_flight"] -= 1

    def verify(self, transcript, final_state=None):
        if self.fail == "verify":
            raise RuntimeError("grader crashed")
        return VerifyResult(env_reward=self.reward, done=self.done, metrics={"total": self.total})

    def close(self):
        self.closed = True
        self.stats["closed"] += 1


class CounterFactory(ResourceSessionFactory):
    def __init__(self, delay: float = 0.0, fail: dict[str, str] | None = None):
        self.delay, self.fail = delay, fail or {}
        self.stats = {"lock": threading.Lock(), "in_flight": 0, "peak": 0, "closed": 0, "created": 0}

    def create(self, task, seed=None, episode_id=None):
        if self.fail.get(task) == "create":
            raise ConnectionError("could not reach the environment")
        self.stats["created"] += 1
        return CounterSession(task, self.stats, self.delay, self.fail.get(task))


def call(name: str, **args: Any) -> str:
    return json.dumps({"name": name, "arguments": args})


def script_for(task: str) -> list[str]:
    """Task 'ep7' adds 7 then 1, then finishes: reward 8."""
    n = int(task.removeprefix("ep"))
    return [call("add", n=n), call("add", n=1), call("finish")]


class ScriptedTokenStep:
    """A model step that behaves like a tokenizing model with known ids: message i is
    tokenized as [1000 * (i + 1) + len(content)], a reply as its characters' codes, and
    each turn's prompt extends the previous turn's prompt + completion (as a real one must)."""

    def __init__(self, replies: list[str], fail_at: int | None = None):
        self.replies, self.fail_at, self.turn = list(replies), fail_at, 0
        self.records: list[ModelStepResult] = []
        self.sequence: list[int] = []
        self.messages_seen = 0

    def __call__(self, messages, tools, sampling):
        if self.turn == self.fail_at:
            raise RuntimeError("model server crashed")
        text = self.replies[min(self.turn, len(self.replies) - 1)]
        new = [1000 * (i + 1) + len(str(m.get("content"))) for i, m in enumerate(messages)][
            self.messages_seen :
        ]
        prompt, completion = self.sequence + new, [ord(c) for c in text]
        result = ModelStepResult(
            response=LLMResponse(content=text, tool_calls=parse_json_tool_calls(text)),
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=[-0.5] * len(completion),
        )
        self.sequence, self.messages_seen = prompt + completion, len(messages) + 1
        self.turn += 1
        self.records.append(result)
        return result


def tasks(n: int) -> list[str]:
    return [f"ep{i}" for i in range(n)]


def scripted_builder(fail_model_at: dict[str, int] | None = None):
    fail_model_at = fail_model_at or {}
    return lambda trainer, session: ScriptedTokenStep(
        script_for(session.task), fail_at=fail_model_at.get(session.task)
    )


# -- the loop ----------------------------------------------------------------------------


def test_white_box_loop_sync_api_matches_openenv_shape():
    session = CounterFactory().create("ep3")
    result = MCPHarnessAdapter().run_white_box(
        ScriptedTokenStep(script_for("ep3")), session, HarnessRunLimits(max_turns=10)
    )
    roles = [m["role"] for m in result.messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    assert result.messages[1]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"n": 3}'}
    assert result.messages[2] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "name": "add",
        "content": "total=3",
    }
    assert [e.tool_name for e in result.tool_trace] == ["add", "add", "finish"]
    assert result.done and result.error is None
    assert result.metrics["turns"] == 3 and result.metrics["tool_calls"] == 3
    assert result.metrics["stop_reason"] == "done"
    assert [e.type for e in result.events] == ["model_response", "tool_call"] * 3


def test_bad_tool_calls_go_back_to_the_model_and_never_abort():
    replies = [
        call("teleport", to="moon"),  # unknown tool
        call("add", n="five"),  # wrong type
        call("add"),  # missing argument
        call("add", n=-1),  # the session raises ValueError
        "I am not sure what to do.",  # no tool call at all would end the episode, so it comes last
    ]
    replies.insert(4, call("add", n=2))
    replies.insert(5, call("finish"))
    session = CounterFactory().create("ep0")
    result = MCPHarnessAdapter().run_white_box(ScriptedTokenStep(replies), session)
    tool_msgs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert tool_msgs[0].startswith("Error: unknown tool 'teleport'; available tools: add, finish")
    assert tool_msgs[1] == "Error: bad arguments for add: argument 'n' must be of type integer, got str"
    assert tool_msgs[2] == "Error: bad arguments for add: missing required argument(s): n"
    assert tool_msgs[3] == "Error: add failed: n must be >= 0"
    assert tool_msgs[4:] == ["total=2", "final total=2"]
    assert result.metrics["tool_errors"] == 4
    assert result.done and session.reward == 2.0


def test_limits_stop_the_episode_and_say_why():
    session = CounterFactory().create("ep1")
    result = MCPHarnessAdapter().run_white_box(
        ScriptedTokenStep([call("add", n=1)]), session, HarnessRunLimits(max_turns=4)
    )
    assert (result.done, result.metrics["stop_reason"], result.metrics["turns"], session.total) == (
        False,
        "max_turns",
        4,
        4,
    )

    session = CounterFactory().create("ep1")
    two_calls = json.dumps({"name": "add", "arguments": {"n": 1}}) + "\n" + call("add", n=10)
    limits = HarnessRunLimits(max_turns=5, max_tool_calls_per_turn=1, max_total_tool_calls=3)
    result = MCPHarnessAdapter().run_white_box(ScriptedTokenStep([two_calls]), session, limits)
    assert result.metrics["stop_reason"] == "max_total_tool_calls" and result.metrics["truncated"]
    assert session.total == 3  # one call per turn, three in all


def test_no_tool_call_ends_the_episode_like_openenv():
    session = CounterFactory().create("ep1")
    result = MCPHarnessAdapter().run_white_box(ScriptedTokenStep(["All done."]), session)
    assert result.done and result.metrics["stop_reason"] == "no_tool_calls" and not result.tool_trace


# -- many episodes ----------------------------------------------------------------------


def test_rollout_func_returns_trl_shapes_in_prompt_order():
    rollout_func = build_harness_rollout_func(
        session_factory=CounterFactory(),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=scripted_builder(),
        limits=HarnessRunLimits(max_turns=10),
    )
    prompts = tasks(6)
    out = rollout_func(prompts, None)
    assert set(out) == {
        "prompt_ids",
        "completion_ids",
        "logprobs",
        "env_mask",
        "env_reward",
        "verify_metrics",
    }
    assert out["env_reward"] == [float(i + 1) for i in range(6)]
    assert [m["total"] for m in out["verify_metrics"]] == [i + 1 for i in range(6)]
    for ids, lps, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"]):
        assert len(ids) == len(lps) == len(mask)
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(lps, mask))


FAILURES = {
    "create": "ConnectionError: could not reach the environment",
    "call_tool": "RuntimeError: environment server went away",
    "verify": "RuntimeError: grader crashed",
    "model_step": "RuntimeError: model server crashed",
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_one_failing_episode_leaves_the_other_15_intact(failure: str):
    """16 episodes, 8 in flight; ep5 fails (its session at creation, on its 2nd tool call or
    in verify; or its model step on the 2nd turn). Its reward is 0 and its metrics say why;
    the other 15 results are exactly those of a clean run, in prompt order."""
    prompts = tasks(16)
    clean = build_harness_rollout_func(
        session_factory=CounterFactory(), model_step_builder=scripted_builder()
    )(prompts, None)
    assert clean["env_reward"] == [float(i + 1) for i in range(16)]

    factory = CounterFactory(fail={} if failure == "model_step" else {"ep5": failure})
    builder = scripted_builder({"ep5": 1} if failure == "model_step" else None)
    out = build_harness_rollout_func(session_factory=factory, model_step_builder=builder, max_concurrency=8)(
        prompts, None
    )

    assert len(out["env_reward"]) == 16
    assert out["env_reward"][5] == 0.0
    assert out["verify_metrics"][5]["error"] == FAILURES[failure]
    if failure in ("call_tool", "model_step"):  # mid-episode: the exact tokens up to the failure are kept,
        assert 0 < len(out["completion_ids"][5]) < len(clean["completion_ids"][5])
        assert out["completion_ids"][5] == clean["completion_ids"][5][: len(out["completion_ids"][5])]
        assert out["env_mask"][5] == [0] * len(out["completion_ids"][5])  # but masked out: no loss
        kept = build_harness_rollout_func(
            session_factory=CounterFactory(fail={} if failure == "model_step" else {"ep5": failure}),
            model_step_builder=scripted_builder({"ep5": 1} if failure == "model_step" else None),
            train_on_failed=True,
        )(prompts, None)
        assert 0 < sum(kept["env_mask"][5]) < sum(clean["env_mask"][5])
    for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "env_reward", "verify_metrics"):
        assert [v for i, v in enumerate(out[key]) if i != 5] == [
            v for i, v in enumerate(clean[key]) if i != 5
        ], key
    assert factory.stats["closed"] == factory.stats["created"]  # every session that opened was closed


async def test_run_episodes_bounds_concurrency_and_reports_each_result():
    factory = CounterFactory(delay=0.02)
    seen: list[int] = []
    results = await run_episodes(
        factory,
        tasks(12),
        model_step_builder=lambda session: ScriptedTokenStep(script_for(session.task)),
        max_concurrency=4,
        on_result=lambda i, r: seen.append(i),
    )
    assert [r.env_reward for r in results] == [float(i + 1) for i in range(12)]
    assert [r.task for r in results] == tasks(12)
    assert factory.stats["peak"] == 4
    assert sorted(seen) == list(range(12))
    assert all(r.timings["total_s"] > 0 and r.episode_id for r in results)


async def test_a_failing_on_result_callback_is_raised_after_every_episode_finished():
    factory = CounterFactory()
    finished: list[int] = []

    def on_result(i, result):
        finished.append(i)
        if i == 0:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await run_episodes(
            factory,
            tasks(6),
            model_step_builder=lambda s: ScriptedTokenStep(script_for(s.task)),
            on_result=on_result,
        )
    assert sorted(finished) == list(range(6)) and factory.stats["closed"] == 6


async def test_run_episodes_needs_exactly_one_model():
    with pytest.raises(ValueError, match="exactly one"):
        await run_episodes(CounterFactory(), tasks(1))


async def test_rollout_func_works_when_called_inside_a_running_loop():
    rollout_func = build_harness_rollout_func(
        session_factory=CounterFactory(), model_step_builder=scripted_builder()
    )
    assert rollout_func(tasks(2), None)["env_reward"] == [1.0, 2.0]


# -- batched model steps -----------------------------------------------------------------


class CountingBackend:
    """A scripted ModelBackend: replies from `script_for`, records each batch it is given."""

    name = "counting"

    def __init__(self):
        self.batches: list[int] = []

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self.batches.append(len(requests))
        await asyncio.sleep(0.01)
        out = []
        for req in requests:
            task = req.messages[0]["content"].split()[-1].rstrip(".")
            turn = sum(1 for m in req.messages if m["role"] == "assistant")
            text = script_for(task)[turn]
            prefix = req.prefix_ids or []
            prompt = prefix + [len(req.messages)] * 2
            out.append(
                Generation(
                    text=text, prompt_ids=prompt, completion_ids=[7, 8, 9], logprobs=[-1.0, -1.0, -1.0]
                )
            )
        return out

    async def aclose(self) -> None:
        pass


class InlineCounterFactory(CounterFactory):
    """Creates sessions on the event loop itself: all 8 episodes are live before any of
    them asks the model, so the first batch is deterministic."""

    async def create_async(self, task, seed=None, episode_id=None):
        return self.create(task, seed, episode_id)


async def test_concurrent_model_steps_share_one_backend_call():
    backend = CountingBackend()
    batcher = BatchingModelStep(backend, max_wait_s=5.0)
    results = await run_episodes(InlineCounterFactory(), tasks(8), backend=batcher, max_concurrency=8)
    assert [r.env_reward for r in results] == [float(i + 1) for i in range(8)]
    assert backend.batches == [8, 8, 8]  # 24 model steps, each turn of all 8 episodes in one call
    # prefix_ids kept each episode's sequence exact: no break recorded
    assert all("token_break_turn" not in r.metrics for r in results)
    assert results[0].env_mask == [1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1]


async def test_a_failing_backend_batch_fails_only_its_episodes():
    class FlakyBackend(CountingBackend):
        async def generate(self, requests):
            if len(self.batches) == 1:
                self.batches.append(len(requests))
                raise RuntimeError("CUDA out of memory")
            return await super().generate(requests)

    backend = FlakyBackend()  # two episodes at a time: the batch that raises holds two of the four
    results = await run_episodes(CounterFactory(), tasks(4), backend=backend, max_concurrency=2)
    failed = [r for r in results if r.error]
    # exactly the episodes of the batch that raised failed, with its error; every other one finished
    assert len(failed) == backend.batches[1] and 0 < len(failed) < len(results), [r.error for r in results]
    assert all("CUDA out of memory" in r.error for r in failed)
    assert all(r.env_reward == (0.0 if r.error else float(i + 1)) for i, r in enumerate(results))


# -- records ----------------------------------------------------------------------------


async def test_records_round_trip(tmp_path):
    results = await run_episodes(
        CounterFactory(fail={"ep2": "call_tool"}),
        tasks(3),
        model_step_builder=lambda session: ScriptedTokenStep(script_for(session.task)),
    )
    path = tmp_path / "episodes.jsonl"
    written = write_records(path, results, include_tokens=True)
    records = read_records(path)
    assert records == written  # every field survives JSON
    assert records[1].token_ids == {
        "prompt_ids": results[1].prompt_ids,
        "completion_ids": results[1].completion_ids,
        "logprobs": results[1].logprobs,
        "env_mask": results[1].env_mask,
    }
    assert [r.task for r in records] == tasks(3)
    assert [r.env_reward for r in records] == [1.0, 2.0, 0.0]
    assert records[2].error == records[2].metrics["error"] == "RuntimeError: environment server went away"
    assert [c["name"] for c in records[2].tool_calls] == ["add"]  # what happened before the failure is kept
    assert [c["name"] for c in records[1].tool_calls] == ["add", "add", "finish"]
    assert records[1].rewards == [None, None, 2.0]
    assert records[1].tokens["model"] == sum(records[1].token_ids["env_mask"])
    assert records[1].messages[-1]["content"] == "final total=2"

    path.write_text(json.dumps({"version": 99}) + "\n")
    with pytest.raises(ValueError, match="version 99"):
        read_records(path)


async def test_a_hanging_episode_times_out_alone():
    results = await run_episodes(
        CounterFactory(fail={"ep1": "hang"}),
        tasks(3),
        model_step_builder=lambda s: ScriptedTokenStep(script_for(s.task)),
        episode_timeout_s=2.0,  # the other two take milliseconds (room for a busy machine); "hang": 5 s a call
    )
    assert [r.env_reward for r in results] == [1.0, 0.0, 3.0]
    assert results[1].error == "TimeoutError: episode took longer than 2.0 s"


def _threads_of_a_block(hold: threading.Event | None = None) -> set[threading.Thread]:
    """The threads of one `worker_threads(4)` block: 4 calls that wait for each other, so they
    run on 4 threads at once; with `hold`, a call abandoned by its timeout is still running
    as the block ends."""
    barrier = threading.Barrier(4, timeout=30)

    def meet() -> threading.Thread:  # the thread itself: an ident may be reused once it ends
        barrier.wait()
        return threading.current_thread()

    async def block() -> set[threading.Thread]:
        with worker_threads(4):
            idents = await asyncio.gather(*(run_sync(meet) for _ in range(4)))
            if hold is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(run_sync(hold.wait), timeout=0.05)
        return set(idents)

    return asyncio.run(block())


def test_worker_threads_serve_the_next_rollout_unless_one_is_left_busy():
    """A rollout per training step must not start a thread per episode each step: an idle
    block's threads serve the next block of its size; a block that leaves a call running (a
    stuck session) gives its threads up, so no later block queues behind it."""
    first = _threads_of_a_block()
    assert len(first) == 4
    assert _threads_of_a_block() == first  # the same threads again, none started
    stuck = threading.Event()
    try:
        assert _threads_of_a_block(hold=stuck) == first
        assert not (_threads_of_a_block() & first)  # a fresh pool: the busy one was given up
    finally:
        stuck.set()
