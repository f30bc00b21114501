"""The harness runtime on the real browser environment: batched model steps and failure isolation.

A browsergym server on loopback drives Debian's Chromium; the model is the scripted MiniWoB
policy (`ScriptedBackend`), a real backend whose calls are counted.
"""

from __future__ import annotations

import asyncio

import pytest

from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymEnv
from envharness.envs.browsergym.sessions import BrowserGymSessionFactory, build_browsergym_action_tool_call
from envharness.harness import (
    BatchingModelStep,
    HarnessRunLimits,
    MCPHarnessAdapter,
    build_harness_rollout_func,
    run_episodes,
)
from envharness.models.base import Generation
from envharness.models.scripted import ScriptedBackend

pytestmark = pytest.mark.timeout(900)  # a hang guard: both tests take well under a minute

# Solved by the scripted policy in one or two actions each.
TASKS = [
    "click-test",
    "click-button",
    "enter-text",
    "focus-text",
    "click-checkboxes",
    "click-tab",
    "click-dialog",
]


class CountingScriptedBackend(ScriptedBackend):
    def __init__(self):
        super().__init__()
        self.calls: list[int] = []

    async def generate(self, requests):
        self.calls.append(len(requests))
        return await super().generate(requests)


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


async def test_waiting_episodes_share_backend_calls_on_the_real_browser(server_url):
    backend = CountingScriptedBackend()
    batcher = BatchingModelStep(
        backend, tool_call_parser=build_browsergym_action_tool_call, send_tools=False, max_wait_s=1.0
    )
    factory = BrowserGymSessionFactory(client_factory=lambda: AsyncBrowserGymEnv(base_url=server_url))
    tasks = TASKS + ["click-test"]
    results = await run_episodes(
        factory,
        tasks,
        backend=batcher,
        max_concurrency=8,
        seeds=list(range(8)),
        limits=HarnessRunLimits(max_turns=5),
    )

    assert [(r.error, r.env_reward) for r in results] == [(None, 1.0)] * 8
    assert [r.verify.metrics["task_name"] for r in results] == tasks
    steps = sum(len(r.turns) for r in results)
    assert steps > 8  # some tasks need two actions
    assert sum(backend.calls) == steps and len(backend.calls) < steps


class SeededSessionFactory(BrowserGymSessionFactory):
    """Prompts are {"task", "seed"} dicts: every episode's page is fixed, so are its rewards."""

    async def create_async(self, task=None, seed=None, episode_id=None):
        return await super().create_async(task, task["seed"], episode_id)


def test_a_session_dying_mid_episode_leaves_the_other_15_intact(server_url):
    """16 episodes, 8 in flight, through the TRL rollout function and the tutorial's sync
    client. One episode's connection to the server is closed after its first model turn, so
    its first tool call raises: its reward is 0 and its metrics carry the error; the other 15
    earn their rewards, in prompt order. Seeds are fixed and the turn limit leaves room for the
    longest of them (click-checkboxes ticks up to 6 boxes, then submits)."""
    backend = CountingScriptedBackend()
    batcher = BatchingModelStep(backend, tool_call_parser=build_browsergym_action_tool_call, send_tools=False)
    doomed = "click-dialog"  # the one prompt with this task
    tasks = [TASKS[i % 6] for i in range(16)]
    tasks[9] = doomed
    prompts = [{"task": task, "seed": i} for i, task in enumerate(tasks)]

    class CutsTheConnection:
        """The episode's own batched step, which closes the session's client after its turn."""

        def __init__(self, session):
            self.session, self.step = session, batcher.for_episode()

        async def __call__(self, messages, tools, sampling):
            result = await self.step(messages, tools, sampling)
            await asyncio.to_thread(self.session.client.close)
            return result

        def close(self):
            self.step.close()

    rollout_func = build_harness_rollout_func(
        session_factory=SeededSessionFactory(client_factory=lambda: BrowserGymEnv(base_url=server_url)),
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: (
            CutsTheConnection(session) if session.task == doomed else batcher.for_episode()
        ),
        limits=HarnessRunLimits(max_turns=10),
        max_concurrency=8,
    )
    out = rollout_func(prompts, None)

    assert out["env_reward"] == [0.0 if i == 9 else 1.0 for i in range(16)]
    errors = [m.get("error") for m in out["verify_metrics"]]
    assert errors[:9] + errors[10:] == [None] * 15
    assert errors[9] == "RuntimeError: This client is closed"
    assert [m.get("task_name") for m in out["verify_metrics"]] == tasks[:9] + [None] + tasks[10:]
    assert batcher._live == 0


class Says:
    """A backend that answers every turn with the same text."""

    name = "says"

    def __init__(self, text: str):
        self.text = text

    async def generate(self, requests):
        return [Generation(text=self.text) for _ in requests]

    async def aclose(self):
        pass


@pytest.mark.parametrize("text", ["goto('http://example.com')", "send_msg_to_user('done')"])
async def test_an_action_outside_the_tools_scores_the_first_pages_reward_not_an_error(server_url, text):
    """A real BrowserGym action the session does not offer never reaches the environment; the
    episode is the policy's failure (reward 0, the first page's), not a missing reward."""
    batcher = BatchingModelStep(
        Says(text), tool_call_parser=build_browsergym_action_tool_call, send_tools=False
    )
    factory = BrowserGymSessionFactory(client_factory=lambda: AsyncBrowserGymEnv(base_url=server_url))
    (result,) = await run_episodes(
        factory, ["click-test"], backend=batcher, seeds=[0], limits=HarnessRunLimits(max_turns=2)
    )

    assert result.error is None and result.env_reward == 0.0 and not result.verify.done
    assert [e.result.error.split(";")[0] for e in result.tool_trace] == [
        f"unknown tool {text.split('(')[0]!r}"
    ] * 2
    assert result.verify.metrics["step_count"] == 0
