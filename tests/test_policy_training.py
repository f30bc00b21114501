"""Training an agent that owns its loop (issue 24), checked where the trainers use the data.

1. A real `GRPOTrainer` step on the example agent (`examples/openai_mcp_agent/agent.py`, the
   openai and mcp SDKs only) playing MiniWoB through `/mcp` with a tiny model behind the
   policy endpoint: at loss time, the logprob TRL recomputes over each captured multi-turn
   sequence equals the sampling logprob on every model token, and every token the agent added
   between its calls is masked out of the loss.
2. `envharness train --agent ...:play` with the embedded model: one GRPO step, end to end.
3. The same agent as OpenEnv 0.10 `TrainableSession`s, run by TRL 1.16's async GRPO harness
   worker's own session code (the vLLM server it would sample from is replaced by our backend).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from _grpo_helpers import loss_row, one_grpo_step, runs
from _jobs import Job

from envharness.integrations.trl.agent_rollout import build_agent_rollout_func
from envharness.policy.agents import load_agent

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
AGENT = "examples/openai_mcp_agent/agent.py:play"
TURNS = 3


@pytest.fixture(scope="module")
def env_url(compact_browser_url):
    return compact_browser_url


def test_loss_time_logprobs_match_the_endpoints_sampling_and_agent_text_is_masked(env_url, tmp_path):
    rollout_func = build_agent_rollout_func(
        load_agent(str(ROOT / AGENT)),
        env_url=env_url,
        agent_kwargs={"max_turns": TURNS},
        records=tmp_path / "episodes.jsonl",
    )
    try:
        step = one_grpo_step(rollout_func, "click-test", tmp_path)
    finally:
        rollout_func.close()
        rollout_func.records.close()
    handed, loss, tokenizer = step.handed, step.loss, step.tokenizer
    loss_mask = loss["completion_mask"] * loss["tool_mask"]
    used = set()
    for i in range(4):
        ids, sampled, env_mask, prompt = (
            handed[k][i] for k in ("completion_ids", "logprobs", "env_mask", "prompt_ids")
        )
        assert "error" not in handed["verify_metrics"][i], handed["verify_metrics"][i]
        model_turns, agent_parts = runs(env_mask, 1), runs(env_mask, 0)
        assert len(model_turns) == TURNS and len(agent_parts) == TURNS - 1, env_mask
        r = loss_row(loss, ids, prompt, used)
        assert loss_mask[r, : len(ids)].tolist() == env_mask  # every model token in the loss, nothing else
        assert int(loss_mask[r, len(ids) :].sum()) == 0
        recomputed = loss["logps"][r, : len(ids)].tolist()
        for start, end in model_turns:
            diffs = [abs(recomputed[t] - sampled[t]) for t in range(start, end)]
            assert max(diffs) < 1e-3, (i, start, diffs)
        for start, end in agent_parts:  # what the agent wrote between the model's turns (its nudge)
            text = tokenizer.decode(ids[start:end])
            assert "<|im_start|>user\nThat was not a tool call." in text and text.rstrip().endswith(
                "<|im_start|>assistant"
            ), text
        for start, end in model_turns:
            assert "<|im_start|>" not in tokenizer.decode(ids[start:end])
        assert handed["step_rewards"][i] == [] and handed["success"][i] is False  # no click landed: no reward
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(
        rec["metrics"]["forks"] == 0 and rec["task"] == "click-test" for rec in records
    )


@pytest.mark.slow
def test_envharness_train_agent_one_step_with_the_embedded_model(tmp_path, prewarmed):
    out = tmp_path / "run"
    args = [
        "train",
        "--agent",
        str(ROOT / AGENT),
        "--model",
        "embedded",
        "--tasks",
        "click-test",
        "--steps",
        "1",
        "--num-generations",
        "2",
        "--groups-per-step",
        "1",
        "--max-new-tokens",
        "12",
        "--max-turns",
        "2",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    job = Job(args, tmp_path, prewarmed=prewarmed)
    try:
        assert job.wait(800) == 0, job.output[-3000:]
    finally:
        job.kill_all()
    assert "trained 1 steps" in job.output
    assert (out / "final" / "config.json").exists()
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for rec in records:
        assert rec["error"] is None and rec["task"] == "click-test"
        assert rec["metrics"]["model_tokens"] > 0 and rec["metrics"]["turns_assembled"] >= 1
        assert rec["messages"][0]["role"] == "system" and "Click" in rec["messages"][1]["content"]


def test_trl_async_grpo_harness_worker_runs_agent_sessions(env_url):
    from openenv.core.harness import ResourceSession, TrainableSession
    from openenv.core.harness.capture.upstream import training_sampling
    from trl.experimental.async_grpo.openenv_harness import _HarnessRolloutLoop

    from envharness.integrations.trl.agent_sessions import AgentSessionFactory
    from envharness.models import load_backend

    backend = load_backend("tiny")
    factory_builder = functools.partial(
        AgentSessionFactory, load_agent(str(ROOT / AGENT)), backend=backend, env_url=env_url
    )
    # What the worker's constructor does with it in loop-owning mode (no adapter):
    loop = object.__new__(_HarnessRolloutLoop)
    loop._factory = factory_builder(sampling=training_sampling({"temperature": 0.7}))
    loop._adapter, loop._rollout_reward_fn, loop._fork_threshold_tokens = None, None, 0
    loop._live_sessions = set()
    loop._stop_event = __import__("threading").Event()
    try:
        session = loop._factory.create(json.dumps({"task": "click-test", "seed": 5}), seed=0, episode_id="e1")
        assert isinstance(session, ResourceSession) and isinstance(session, TrainableSession)
        assert session.wait_for_completion(timeout_s=300) == 0
        trace = session.fetch_training_trace()
        assert len(trace.turns) == 3 and all(
            t.metadata["sampling"]["temperature"] == 0.7 for t in trace.turns
        )
        session.close()
        # TRL's own per-rollout code: wait, take the trace, verify (the environment's reward), chain into rows
        (completion, completion_ids, sequences, calls, failures, reward), metrics = loop._run_session(
            json.dumps({"task": "click-test", "seed": 6}), group_id=0
        )
    finally:
        loop._factory.close()
    assert reward == 0.0 and calls == 0 and failures == 0
    assert metrics["turns"] == 3 and metrics["sequences"] == 1 and len(sequences) == 1
    assert sum(sequences[0].completion_mask) == len(completion_ids)
    assert completion[0]["role"] == "system" and completion[-1]["role"] == "assistant"


async def compacting_agent(base_url: str, api_key: str) -> None:
    """An agent (openai SDK only) that replaces its history by a summary after two calls."""
    from openai import AsyncOpenAI

    llm = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Move 1"}]
    for move in (2, 3):
        reply = await llm.chat.completions.create(model="m", messages=messages, max_tokens=4)
        messages += [reply.choices[0].message.model_dump(), {"role": "user", "content": f"Move {move}"}]
    summary = [
        {"role": "system", "content": "Play."},
        {"role": "user", "content": "Moves 1 and 2 done. Move 3"},
    ]
    await llm.chat.completions.create(model="m", messages=summary, max_tokens=4)
    await llm.close()


def test_the_rollout_function_reports_an_agents_rewritten_history_and_leaves_it_out():
    from types import SimpleNamespace

    from envharness.core.launchers import LocalServer
    from envharness.models.embedded import tiny_test_model
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = tiny_test_model()
    trainer = SimpleNamespace(
        processing_class=tokenizer,
        args=SimpleNamespace(temperature=1.0, top_p=1.0, top_k=0, max_completion_length=4),
    )
    with LocalServer("echo") as env:
        rollout_func = build_agent_rollout_func(
            compacting_agent,
            env_url=env.base_url,
            backend_factory=lambda _: TransformersBackend(model, tokenizer),
        )
        try:
            out = rollout_func(["a", "b"], trainer)
        finally:
            rollout_func.close()
    assert rollout_func.metrics["forks"] == 2
    for i in range(2):
        metrics = out["verify_metrics"][i]
        assert "error" not in metrics and metrics["forks"] == 1 and metrics["fork_tokens"] > 0
        assert metrics["turns"] == 3 and metrics["turns_assembled"] == 2 and metrics["turns_left_out"] == 1
        assert 0 < metrics["model_tokens_left_out"] <= 4
        # the row holds the two exact calls before the rewrite, and nothing of the call after it
        assert len(out["env_mask"][i]) == len(out["completion_ids"][i]) == len(out["logprobs"][i])
        assert sum(out["env_mask"][i]) == metrics["model_tokens"] <= 8 and out["env_reward"][i] == 0.0
