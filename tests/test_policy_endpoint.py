"""The policy endpoint (issue 24) over real HTTP, driven by the real `openai` SDK.

What an agent developer relies on: multi-turn calls of one rollout are recorded as one exact
token sequence (each prompt extends the previous prompt + completion; nothing re-tokenised),
tool calls come back in OpenAI's form, a rewritten history is detected as a fork (and the
training data says how many tokens it affected), the reward is the environment's (from the
tagged `/mcp` session), and every bad request gets an OpenAI-style error while the endpoint
stays up.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from envharness.models import load_backend
from envharness.models.base import Generation
from envharness.policy import PolicyServer, trace_sample, training_trace_entries

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def tiny():
    return load_backend("tiny")


@pytest.fixture(scope="module")
def policy(tiny):
    with PolicyServer(tiny, default_max_tokens=6, context_length=400) as server:
        yield server


def client(policy, rollout_id):
    return openai.OpenAI(base_url=policy.rollout_url(rollout_id), api_key="unused", max_retries=0)


def reply_dict(reply):
    return reply.choices[0].message.model_dump()  # as the SDK gives it: None fields included


def test_multi_turn_calls_chain_into_one_exact_sequence(policy, tiny):
    trace = policy.store.open(task="demo")
    llm = client(policy, trace.rollout_id)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    for turn in range(3):
        reply = llm.chat.completions.create(model="any", messages=messages, max_tokens=5)
        assert reply.usage.completion_tokens == len(trace.turns[turn].completion_ids) <= 5
        assert reply.model_extra["envharness"] == {
            "rollout_id": trace.rollout_id,
            "turn": turn,
            "fork": False,
            "fork_tokens": 0,
        }
        messages += [reply_dict(reply), {"role": "user", "content": f"and {turn}?"}]
    policy.store.end(trace.rollout_id)

    turns = trace.turns
    for before, after in zip(turns, turns[1:]):
        assert after.prompt_ids[: len(before.sequence)] == before.sequence  # extends, token for token
        assert after.parent == before.index
    sample = trace_sample(trace)
    assert sample.prompt_ids == turns[0].prompt_ids
    assert sample.metrics["forks"] == 0 and sample.metrics["turns_assembled"] == 3
    # model tokens (mask 1) carry their sampling logprobs; what the agent added between calls is masked
    flat = [tok for t in turns for tok in t.completion_ids]
    assert [t for t, m in zip(sample.completion_ids, sample.env_mask) if m] == flat
    assert [lp for lp, m in zip(sample.logprobs, sample.env_mask) if m] == [
        lp for t in turns for lp in t.logprobs
    ]
    assert all(lp == 0.0 for lp, m in zip(sample.logprobs, sample.env_mask) if not m)
    added = tiny.tokenizer.decode([t for t, m in zip(sample.completion_ids, sample.env_mask) if not m])
    assert "and 0?" in added and "and 1?" in added
    assert (sample.prompt_ids + sample.completion_ids)[: len(turns[-1].prompt_ids)] == turns[-1].prompt_ids
    # the trace over HTTP, as a remote driver reads it
    got = httpx.get(f"{policy.base_url}/rollouts/{trace.rollout_id}").json()
    assert got["turns"][2]["prompt_ids"] == turns[2].prompt_ids and got["metadata"] == {"task": "demo"}


def test_a_rewritten_history_is_a_fork_and_never_mixed_into_the_sample(policy):
    trace = policy.store.open()
    llm = client(policy, trace.rollout_id)
    messages = [{"role": "user", "content": "Step one"}]
    first = llm.chat.completions.create(model="any", messages=messages)
    messages += [reply_dict(first), {"role": "user", "content": "Step two"}]
    second = llm.chat.completions.create(model="any", messages=messages)
    assert second.model_extra["envharness"]["fork"] is False
    # The agent compacts its history: its own summary instead of the model's first reply.
    rewritten = [
        {"role": "user", "content": "Step one (summarised)"},
        {"role": "user", "content": "Step three"},
    ]
    third = llm.chat.completions.create(model="any", messages=rewritten)
    info = third.model_extra["envharness"]
    assert info["fork"] is True and info["fork_tokens"] > 0
    # ... and goes on from the rewritten history: that call extends the fork, it is no new fork
    fourth = llm.chat.completions.create(
        model="any", messages=[*rewritten, reply_dict(third), {"role": "user", "content": "4"}]
    )
    assert fourth.model_extra["envharness"]["fork"] is False
    policy.store.end(trace.rollout_id)

    assert trace.forks == 1 and trace.fork_tokens == info["fork_tokens"] == len(
        trace.turns[1].sequence
    ) - _shared(trace)
    sample = trace_sample(trace)
    assert sample.metrics["turns_assembled"] == 2 and sample.metrics["turns_left_out"] == 2
    assert sample.metrics["forks"] == 1 and sample.metrics["fork_tokens"] == info["fork_tokens"]
    assert sample.metrics["model_tokens_left_out"] == len(trace.turns[2].completion_ids) + len(
        trace.turns[3].completion_ids
    )
    assert sum(sample.env_mask) == len(trace.turns[0].completion_ids) + len(trace.turns[1].completion_ids)
    # TRL's async GRPO worker reads the same capture as two rows: the history before and after the fork
    from openenv.core.harness import TrainingTrace
    from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
    from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

    captured = TrainingTrace.from_entries(training_trace_entries(trace))
    rows, tally = _chain_to_sequences(_turns_from_training_trace(captured), trace.rollout_id, 0)
    assert len(rows) == 2 and tally["fork"] == 1
    assert rows[0].input_ids == sample.prompt_ids + sample.completion_ids
    assert rows[1].input_ids == trace.turns[3].sequence


def _shared(trace):
    seq, prompt = trace.turns[1].sequence, trace.turns[2].prompt_ids
    return next(i for i, (a, b) in enumerate(zip(seq, prompt)) if a != b)


def test_bad_requests_get_openai_errors_and_the_endpoint_stays_up(policy):
    trace = policy.store.open()
    llm = client(policy, trace.rollout_id)
    hello = [{"role": "user", "content": "hi"}]

    with pytest.raises(openai.NotFoundError) as unknown:
        client(policy, "no-such-rollout").chat.completions.create(model="m", messages=hello)
    assert unknown.value.body["code"] == "rollout_not_found"

    with pytest.raises(openai.BadRequestError) as too_long:  # context_length=400 for this server
        llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * 2000}])
    assert (
        too_long.value.body["code"] == "context_length_exceeded" and "400" in too_long.value.body["message"]
    )

    for tools in (
        [{"type": "function", "function": {"name": "has space"}}],
        [{"type": "function"}],
        [{"type": "retrieval", "function": {"name": "x"}}],
        [{"type": "function", "function": {"name": "x", "parameters": "not a schema"}}],
        [{"type": "function", "function": {"name": "x"}}, {"type": "function", "function": {"name": "x"}}],
    ):
        with pytest.raises(openai.BadRequestError) as bad_tools:
            llm.chat.completions.create(model="m", messages=hello, tools=tools)
        assert bad_tools.value.body["code"] == "invalid_tools" and bad_tools.value.body["param"] == "tools"

    with pytest.raises(openai.BadRequestError) as bad_role:
        llm.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "hi"}])
    assert bad_role.value.body["param"] == "messages"
    raw = httpx.post(f"{policy.rollout_url(trace.rollout_id)}/chat/completions", content=b"{not json")
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(f"{policy.base_url}/v1/chat/completions", json={"messages": hello})
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "rollout_id_missing"
    assert not trace.turns  # nothing refused was recorded

    ok = llm.chat.completions.create(model="m", messages=hello)  # still up, still recording
    assert ok.choices[0].message.role == "assistant" and len(trace.turns) == 1
    # the rollout id may also come as a header or as the API key
    header = openai.OpenAI(base_url=f"{policy.base_url}/v1", api_key=trace.rollout_id, max_retries=0)
    header.chat.completions.create(model="m", messages=hello)
    assert len(trace.turns) == 2

    policy.store.end(trace.rollout_id)
    with pytest.raises(openai.ConflictError) as ended:
        llm.chat.completions.create(model="m", messages=hello)
    assert ended.value.body["code"] == "rollout_ended" and len(trace.turns) == 2


class _ClickTeacher:
    """A stand-in for a model that calls tools: always clicks bid 13 (the button of click-test)."""

    name = "click-13"

    async def generate(self, requests):
        return [Generation(text='{"name": "click", "arguments": {"bid": "13"}}') for _ in requests]

    async def aclose(self):
        pass


def test_example_agent_plays_miniwob_through_mcp_and_the_reward_is_the_environments(tiny, browser_server):
    from envharness.models.teacher import TeacherForcedBackend
    from envharness.policy.agents import load_agent, run_agent

    agent = load_agent("examples/openai_mcp_agent/agent.py:play")
    backend = TeacherForcedBackend(tiny.tokenizer, _ClickTeacher())
    env = browser_server
    with PolicyServer(backend) as policy:

        async def both():
            return await asyncio.gather(
                *(
                    run_agent(agent, policy=policy, env_url=env.base_url, task="click-test", seed=s)
                    for s in (1, 2)
                )
            )

        results = asyncio.run(both())
        # read once by the driver, then forgotten by the server; untagged or unknown ids are 404s
        assert httpx.get(f"{env.base_url}/mcp/rollouts/{results[0].trace.rollout_id}").status_code == 404
    for result in results:
        assert result.error is None, result.error
        assert (
            result.outcome["reward"] == 1.0
            and result.outcome["done"] is True
            and result.outcome["resets"] == 1
        )
        assert result.returned == {"reward": 1.0, "done": True}  # what the agent itself saw
        (turn,) = result.trace.turns
        assert [c["function"]["name"] for c in turn.tool_calls] == ["click"]
        assert json.loads(turn.tool_calls[0]["function"]["arguments"]) == {"bid": "13"}
        assert {t["function"]["name"] for t in turn.tools} == {"click", "fill"}


def test_a_remote_driver_opens_ends_and_reads_rollouts_over_http(policy):
    base = policy.base_url
    opened = httpx.post(
        f"{base}/rollouts",
        json={"rollout_id": "episode-7", "metadata": {"task": "click-test", "rollout_id": "x"}},
    )
    assert opened.status_code == 200 and opened.json()["base_url"] == f"{base}/rollouts/episode-7/v1"
    assert (
        httpx.post(f"{base}/rollouts", json={"rollout_id": "episode-7"}).json()["error"]["code"]
        == "rollout_exists"
    )
    for bad in ({"rollout_id": "has/slash"}, {"rollout_id": 7}, {"metadata": [1]}, [1]):
        refused = httpx.post(f"{base}/rollouts", json=bad)
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error", bad
    fresh = httpx.post(f"{base}/rollouts").json()["rollout_id"]  # no body: a fresh id
    assert fresh != "episode-7"

    llm = openai.OpenAI(base_url=opened.json()["base_url"], api_key="unused", max_retries=0)
    llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    ended = httpx.post(f"{base}/rollouts/episode-7/end").json()
    assert ended == {
        "rollout_id": "episode-7",
        "ended": True,
        "turns": 1,
        "forks": 0,
        "fork_tokens": 0,
        "metadata": {"task": "click-test", "rollout_id": "x"},
    }
    sample = httpx.get(f"{base}/rollouts/episode-7/sample").json()
    entries = httpx.get(f"{base}/rollouts/episode-7/training_trace").json()["entries"]
    (turn,) = policy.store.get("episode-7").turns
    assert sample["prompt_ids"] == turn.prompt_ids and sample["env_mask"] == [1] * len(turn.completion_ids)
    assert entries[0]["loss_mask"] == [0] * len(turn.prompt_ids) + [1] * len(turn.completion_ids)
    assert httpx.get(f"{base}/rollouts/nope/sample").json()["error"]["code"] == "rollout_not_found"


def test_tool_calls_round_trip_in_openai_form_and_tool_results_are_environment_tokens(tiny):
    from envharness.models.teacher import TeacherForcedBackend

    click = {
        "type": "function",
        "function": {
            "name": "click",
            "description": "Click an element",
            "parameters": {"type": "object", "properties": {"bid": {"type": "string"}}},
        },
    }
    with PolicyServer(TeacherForcedBackend(tiny.tokenizer, _ClickTeacher())) as policy:
        trace = policy.store.open()
        llm = client(policy, trace.rollout_id)
        messages = [{"role": "user", "content": "[13] button 'Click Me!'"}]
        reply = llm.chat.completions.create(model="m", messages=messages, tools=[click])
        (call,) = reply.choices[0].message.tool_calls
        assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "click"
        assert json.loads(call.function.arguments) == {"bid": "13"}
        # the agent keeps only the tool calls of the reply (no content), then the tool's result
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "clicked; reward 1.0"},
        ]
        second = llm.chat.completions.create(model="m", messages=messages, tools=[click])
        assert second.model_extra["envharness"]["fork"] is False
        no_tools = llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert no_tools.choices[0].message.tool_calls is None  # tool calls only for offered functions
        policy.store.end(trace.rollout_id)
    first, again = trace.turns[:2]
    assert again.prompt_ids[: len(first.sequence)] == first.sequence and again.parent == 0
    sample = trace_sample(trace)
    between = tiny.tokenizer.decode([t for t, m in zip(sample.completion_ids, sample.env_mask) if not m])
    assert "clicked; reward 1.0" in between and sample.metrics["turns_assembled"] == 2


def test_the_example_agent_imports_only_the_openai_and_mcp_sdks():
    import ast
    import sys
    from pathlib import Path

    source = Path(__file__).resolve().parents[1] / "examples" / "openai_mcp_agent" / "agent.py"
    tree = ast.parse(source.read_text())
    roots = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    roots |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {r for r in roots if r not in sys.stdlib_module_names} == {"openai", "mcp"}


def test_vllm_token_extras_satisfy_openenv_captures_upstream_contract(policy):
    from openenv.core.harness.capture.upstream import normalize_response, prepare_request
    from openenv.core.harness.capture.validate import check_upstream_response

    trace = policy.store.open()
    # the request as OpenEnv's capture proxy rewrites it before forwarding it to an engine
    body = prepare_request({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    reply = httpx.post(f"{policy.rollout_url(trace.rollout_id)}/chat/completions", json=body).json()
    report = check_upstream_response(normalize_response(reply))
    assert report.findings == [], report.text()
    (turn,) = trace.turns
    assert (
        reply["prompt_token_ids"] == turn.prompt_ids
        and reply["choices"][0]["token_ids"] == turn.completion_ids
    )
    assert [e["logprob"] for e in reply["choices"][0]["logprobs"]["content"]] == turn.logprobs
    with pytest.raises(openai.BadRequestError) as alternatives:
        client(policy, trace.rollout_id).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, top_logprobs=3
        )
    assert alternatives.value.body["code"] == "unsupported_top_logprobs"
