"""Batched model steps on a real backend: the tiny transformers model serving many episodes.

Episodes play against the real echo server on loopback; every reply of the random model is
sent back as an `echo` call. The backend counts the decoding batches it really runs, so the
tests see how many model calls served how many model steps.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import torch
from test_harness_step_session import EchoSessionFactory
from test_harness_tokens import CountingTransformersBackend, assert_exact_turns, echo_text

from envharness.envs.echo.client import AsyncEchoEnv
from envharness.harness import (
    ArrivingSessions,
    BatchingModelStep,
    HarnessRunLimits,
    MCPHarnessAdapter,
    build_harness_rollout_func,
    run_episodes,
)
from envharness.harness.session import create_session
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.transformers_backend import IDLE_WAIT_CPU_S

TURNS = 3
LIMITS = HarnessRunLimits(max_turns=TURNS, sampling={"max_tokens": 5, "temperature": 1.0})


@pytest.fixture(scope="module")
def tiny_backend():
    yield from CountingTransformersBackend.fixture()


@pytest.fixture
def echo_factory(echo_server):
    return EchoSessionFactory(lambda: AsyncEchoEnv(echo_server.base_url))


def test_rollout_func_decodes_the_episodes_together(tiny_backend, echo_factory):
    """8 episodes in flight through the TRL rollout function: 24 model steps, each sent to the
    backend once as it comes (it batches continuously), episodes decoded together, and every
    episode's tokens exactly what its own model steps produced."""
    tiny_backend.calls.clear()
    tiny_backend._decoder.most_rows = 0
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False, max_wait_s=2.0)
    results = {}
    rollout_func = build_harness_rollout_func(
        session_factory=echo_factory,
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: batcher.for_episode(),
        limits=LIMITS,
        max_concurrency=8,
        on_result=lambda i, r: results.__setitem__(i, r),
    )
    prompts = [f"w{i}" for i in range(8)]
    out = rollout_func(prompts, None)

    steps = 8 * TURNS
    assert [results[i].error for i in range(8)] == [None] * 8
    assert sum(len(results[i].turns) for i in range(8)) == steps
    assert sum(tiny_backend.calls) == steps  # every model step decoded exactly once...
    assert tiny_backend._decoder.most_rows > 1  # ...rows of several episodes in one forward pass
    assert sorted(tiny_backend.calls) == sorted(
        batcher.batch_sizes
    )  # each batch one call (sent concurrently)
    for i in range(8):  # in prompt order, each the episode's own exact tokens
        r = results[i]
        assert r.task == prompts[i]
        assert (out["prompt_ids"][i], out["completion_ids"][i], out["logprobs"][i], out["env_mask"][i]) == (
            r.prompt_ids,
            r.completion_ids,
            r.logprobs,
            r.env_mask,
        )
        assert out["env_reward"][i] == r.tool_trace[-1].result.metadata["reward"]
        assert_exact_turns(r, tiny_backend.tokenizer)


async def test_max_batch_size_caps_each_backend_call(tiny_backend, echo_factory):
    tiny_backend.calls.clear()
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False, max_batch_size=3)
    results = await run_episodes(
        echo_factory, [f"w{i}" for i in range(6)], backend=batcher, limits=LIMITS, max_concurrency=6
    )
    assert [r.error for r in results] == [None] * 6
    assert sum(tiny_backend.calls) == 6 * TURNS and max(tiny_backend.calls) <= 3


async def test_a_cancelled_step_leaves_its_batch_alone(tiny_backend):
    """An episode cancelled (timed out) while its request waits for a batch, or while that
    batch decodes, never takes the other requests down, and the batcher keeps serving."""
    tiny_backend.calls.clear()
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False, max_wait_s=2.0)
    messages = [{"role": "user", "content": "Say: hi"}]
    sampling = {"max_tokens": 4}

    # queued: cancelled before the batch leaves; the batch goes out without it
    steps = [batcher.for_episode() for _ in range(3)]
    calls = [asyncio.create_task(step(messages, [], sampling)) for step in steps]
    await asyncio.sleep(0)  # all three requests are queued
    calls[1].cancel()
    steps[1].close()
    done = await asyncio.gather(calls[0], calls[2])
    assert all(len(r.completion_ids) == len(r.logprobs) > 0 for r in done)
    assert tiny_backend.calls == [2] and calls[1].cancelled()

    for step in steps:
        step.close()

    # decoding: cancelled while its batch is in the model; the other request still gets its turn
    steps = [batcher.for_episode() for _ in range(2)]
    calls = [asyncio.create_task(step(messages, [], sampling)) for step in steps]
    while len(tiny_backend.calls) < 2:
        await asyncio.sleep(0.001)
    calls[1].cancel()
    assert len((await calls[0]).completion_ids) > 0
    assert tiny_backend.calls == [2, 2]

    for step in steps:
        step.close()
    assert batcher._live == 0
    [again] = await asyncio.gather(batcher.for_episode()(messages, [], sampling))
    assert again.completion_ids and tiny_backend.calls == [2, 2, 1]


async def test_a_bad_request_fails_alone(tiny_backend):
    """A request the backend refuses (ValueError: here prefix_ids for a conversation with no
    previous turn) fails only its own episode: the batch is retried request by request."""
    tiny_backend.calls.clear()
    batcher = BatchingModelStep(tiny_backend)
    good = GenerationRequest(
        messages=[{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=3)
    )
    bad = GenerationRequest(messages=[{"role": "user", "content": "hi"}], prefix_ids=[1, 2, 3])
    out = await asyncio.gather(
        batcher.generate(good), batcher.generate(bad), batcher.generate(good), return_exceptions=True
    )
    assert isinstance(out[1], ValueError) and "prefix_ids" in str(out[1])
    assert out[0].completion_ids and out[2].completion_ids
    assert batcher.batch_sizes == [3, 1, 1, 1]


@contextlib.contextmanager
def idle_wait(backend, seconds):
    """`backend.idle_wait_s` set to `seconds` for the block (the fixture's backend is shared)."""
    backend.idle_wait_s = seconds
    try:
        yield
    finally:
        backend.idle_wait_s = None


class SlowResets:
    """Echo sessions whose resets end `delays[task]` seconds late, as a browser's resets of one
    step end apart; a task in `held` is held back (60 s at most) until `release()` is true."""

    def __init__(self, inner, delays, held=(), release=lambda: True):
        self.inner, self.delays, self.held, self.release = inner, delays, held, release

    async def create_async(self, task=None, seed=None, episode_id=None):
        await asyncio.sleep(self.delays[task])
        for _ in range(6000 if task in self.held else 0):
            if self.release():
                break
            await asyncio.sleep(0.01)
        return await create_session(self.inner, task, seed, episode_id)


def arriving_rollout(batcher, factory, episodes):
    """TRL's shape of rollout on `batcher`: episodes live from their reset (`ArrivingSessions`),
    seeded rows, so that no episode's turn ends early at an end-of-sequence token."""
    return build_harness_rollout_func(
        session_factory=ArrivingSessions(factory, batcher),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: batcher.for_episode(),
        limits=HarnessRunLimits(max_turns=TURNS, sampling={"max_tokens": 5, "temperature": 1.0, "seed": 3}),
        max_concurrency=episodes,
    )


def test_an_idle_decoder_waits_for_independent_episodes_still_resetting(tiny_backend, echo_factory):
    """Resets that end 0, 0.15 and 0.3 s apart: the first request waits for the other independent
    episodes, live from their reset, so each turn of the three is one prefill and they decode in
    step. The wait is generous here (60 s, never reached: it ends when every live episode waits);
    its default on a CPU, `IDLE_WAIT_CPU_S`, is the test below."""
    assert tiny_backend.idle_wait_s == IDLE_WAIT_CPU_S  # on this CPU, unless set
    batcher = BatchingModelStep(
        tiny_backend, tool_call_parser=echo_text, send_tools=False, independent_episodes=True
    )
    stats = tiny_backend._decoder.stats
    admissions = stats.admissions
    rollout_func = arriving_rollout(batcher, SlowResets(echo_factory, {"w0": 0.0, "w1": 0.15, "w2": 0.3}), 3)
    with idle_wait(tiny_backend, 60.0):
        out = rollout_func(["w0", "w1", "w2"], None)
    assert len(out["completion_ids"]) == 3 and batcher._live == 0
    assert batcher.batch_sizes == [3] * TURNS
    assert stats.admissions - admissions == TURNS


def test_with_a_gpus_short_wait_the_first_episode_back_starts_alone(tiny_backend, echo_factory):
    """With a GPU's 20 ms, the first turn does not wait for resets still under way: the other
    two resets are held until the first batch has been served (a decoder that waited for them
    would wait 60 s, then batch all three, and fail here), then they join."""
    batcher = BatchingModelStep(
        tiny_backend, tool_call_parser=echo_text, send_tools=False, independent_episodes=True
    )
    stats = tiny_backend._decoder.stats
    admissions = stats.admissions
    resets = SlowResets(
        echo_factory,
        {"w0": 0.0, "w1": 0.0, "w2": 0.0},
        held=("w1", "w2"),
        release=lambda: batcher.batch_sizes,
    )
    with idle_wait(tiny_backend, 0.02):
        out = arriving_rollout(batcher, resets, 3)(["w0", "w1", "w2"], None)
    assert len(out["completion_ids"]) == 3 and batcher._live == 0
    assert batcher.batch_sizes[0] == 1  # the first episode back went alone
    assert stats.admissions - admissions > TURNS


def test_how_long_an_idle_decoder_waits(tiny_backend, monkeypatch):
    """Independent episodes: what the backend asks (half a second on this CPU, 20 ms on a GPU,
    where a pass takes no core from the environment), within the caller's `max_wait_s`. Episodes
    that may wait on each other (a game's seats, whose moves come in turn): 20 ms, as any wait
    for one of them may be a wait for a request that follows this one's answer."""
    from envharness.models import transformers_backend

    def bound(**options):
        return BatchingModelStep(tiny_backend, **options)._wait_bound()

    assert bound(independent_episodes=True) == IDLE_WAIT_CPU_S == 0.5
    assert bound(independent_episodes=True, max_wait_s=0.1) == 0.1
    assert bound() == bound(max_wait_s=2.0) == 0.02
    with idle_wait(tiny_backend, 0.3):
        assert bound(independent_episodes=True) == 0.3
    gpu = transformers_backend.Placement(torch.device("cuda"), torch.float32)
    monkeypatch.setattr(transformers_backend, "model_placement", lambda model: gpu)
    assert bound(independent_episodes=True) == transformers_backend.IDLE_WAIT_GPU_S == 0.02


def test_trains_timer_passes_the_backends_wait_on(tiny_backend):
    """`train` times generation through a wrapper, and its rollout's episodes are independent:
    the batcher still sees the backend's own wait."""
    from envharness.integrations.trl.step_timing import StepClock

    timed = StepClock().backend_factory(None, lambda trainer: tiny_backend)
    assert timed is not tiny_backend and timed.continuous
    assert BatchingModelStep(timed, independent_episodes=True)._wait_bound() == IDLE_WAIT_CPU_S
    with idle_wait(tiny_backend, 0.1):
        assert BatchingModelStep(timed, independent_episodes=True)._wait_bound() == 0.1


def test_episodes_that_start_together_go_to_an_idle_decoder_together(tiny_backend, echo_factory, monkeypatch):
    """Sessions made through `ArrivingSessions` count as live from the start of their reset, and
    an idle continuous backend's first request waits for the live episodes: every turn of 8
    episodes that reset together is one prefill (one admission), and they decode in step. (The
    wait's bound is raised so that a slow machine cannot split a turn; seeded rows, so that no
    episode's turn ends early at an end-of-sequence token.)"""
    from envharness.harness import model_step

    monkeypatch.setattr(model_step, "IDLE_CONTINUOUS_WAIT_S", 2.0)
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False, max_wait_s=2.0)
    stats = tiny_backend._decoder.stats
    admissions, forwards = stats.admissions, stats.forwards
    rollout_func = arriving_rollout(batcher, echo_factory, 8)
    out = rollout_func([f"w{i}" for i in range(8)], None)

    assert len(out["completion_ids"]) == 8 and batcher._live == 0
    assert stats.admissions - admissions == TURNS  # one prefill per turn for all 8 episodes
    assert stats.forwards - forwards == TURNS * 4  # 5 tokens a turn: the prefill samples the first
    assert batcher.batch_sizes == [8] * TURNS


async def test_an_episode_whose_reset_fails_is_not_waited_for(tiny_backend, echo_server, monkeypatch):
    """`ArrivingSessions` stops counting an episode whose session cannot be created: the other
    episodes' turns do not wait for it (with a bound of a minute, a wait would stall them)."""
    from envharness.harness import model_step

    monkeypatch.setattr(model_step, "IDLE_CONTINUOUS_WAIT_S", 60.0)

    class OneFails(EchoSessionFactory):
        def create(self, task, seed=None, episode_id=None):
            if task == "broken":
                raise ConnectionError("no server for this one")
            return super().create(task, seed, episode_id)

    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False, max_wait_s=60.0)
    factory = ArrivingSessions(OneFails(lambda: AsyncEchoEnv(echo_server.base_url)), batcher)
    results = await asyncio.wait_for(
        run_episodes(factory, ["w0", "broken", "w1"], backend=batcher, limits=LIMITS, max_concurrency=3), 30
    )
    assert [r.error is None for r in results] == [True, False, True]
    assert "no server for this one" in results[1].error
    assert batcher._live == 0
