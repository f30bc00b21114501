"""The policy endpoint's limits, over real HTTP with the real `openai` SDK: with a token every
route refuses a missing or wrong one (as the environment server does), an agent's key opens
its own rollout only, and oversized requests, runaway agents and idle rollouts are stopped
with OpenAI-style errors while the endpoint stays up."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from conftest import wait_until

from envharness.models import load_backend
from envharness.policy import PolicyServer
from envharness.policy.limits import PolicyLimits

pytestmark = pytest.mark.timeout(300)
TOKEN = "s3cret-token"
HELLO = {"model": "any", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}


@pytest.fixture(scope="module")
def tiny():
    return load_backend("tiny")


@pytest.fixture(scope="module")
def guarded(tiny):
    with PolicyServer(
        tiny, default_max_tokens=3, limits=PolicyLimits(token=TOKEN, max_request_bytes=64_000)
    ) as server:
        yield server


def driver(token: str | None = TOKEN) -> httpx.Client:
    return httpx.Client(headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60)


def refused(reply: httpx.Response, status: int, code: str) -> None:
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["code"] == code, reply.json()


def test_every_route_refuses_a_missing_or_wrong_token(guarded):
    with driver() as d:
        opened = d.post(f"{guarded.base_url}/rollouts", json={}).json()
    rid = opened["rollout_id"]
    routes = [
        ("post", "/rollouts"),
        ("post", f"/rollouts/{rid}/end"),
        ("get", f"/rollouts/{rid}"),
        ("get", f"/rollouts/{rid}/sample"),
        ("get", f"/rollouts/{rid}/training_trace"),
        ("post", "/v1/chat/completions"),
        ("post", f"/rollouts/{rid}/v1/chat/completions"),
        ("get", "/v1/models"),
        ("get", f"/rollouts/{rid}/v1/models"),
    ]
    for token in (
        None,
        "wrong",
        rid,
    ):  # no key, a wrong key, the rollout's id (not its key when there is a token)
        with driver(token) as d:
            for method, path in routes:
                body = {"json": HELLO} if method == "post" else {}
                refused(getattr(d, method)(f"{guarded.base_url}{path}", **body), 401, "invalid_api_key")
    with driver(None) as d:
        assert d.get(f"{guarded.base_url}/health").status_code == 200  # readiness probes need no token
    assert not guarded.store.live(rid).turns  # nothing was recorded by the refused calls


def test_an_agent_key_opens_its_own_rollout_only(guarded):
    with driver() as d:
        mine, other = (d.post(f"{guarded.base_url}/rollouts", json={}).json() for _ in range(2))
    assert mine["api_key"] not in (mine["rollout_id"], TOKEN)
    agent = openai.OpenAI(base_url=mine["base_url"], api_key=mine["api_key"], max_retries=0)
    reply = agent.chat.completions.create(**HELLO)
    assert reply.model_extra["envharness"]["rollout_id"] == mine["rollout_id"]
    # its key on its own without a rollout in the URL: the key says which rollout
    plain = openai.OpenAI(base_url=f"{guarded.base_url}/v1", api_key=mine["api_key"], max_retries=0)
    assert plain.chat.completions.create(**HELLO).model_extra["envharness"]["turn"] == 1
    stray = openai.OpenAI(base_url=other["base_url"], api_key=mine["api_key"], max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="another rollout"):
        stray.chat.completions.create(**HELLO)
    with driver(mine["api_key"]) as d:  # nor can it act as the driver
        refused(d.get(f"{guarded.base_url}/rollouts/{mine['rollout_id']}"), 401, "invalid_api_key")
    with driver() as d:  # the driver reads the trace with the token
        assert len(d.get(f"{guarded.base_url}/rollouts/{mine['rollout_id']}").json()["turns"]) == 2


def test_an_oversized_request_is_refused_and_the_endpoint_stays_up(guarded):
    with driver() as d:
        opened = d.post(f"{guarded.base_url}/rollouts", json={}).json()
        big = {**HELLO, "messages": [{"role": "user", "content": "x" * 100_000}]}
        refused(d.post(f"{opened['base_url']}/chat/completions", json=big), 413, "request_too_large")
        assert d.post(f"{opened['base_url']}/chat/completions", json=HELLO).status_code == 200


async def test_a_runaway_agent_stops_at_the_call_limit(tiny):
    limits = PolicyLimits(max_calls_per_rollout=2, rollout_idle_s=None)  # however slow its calls are
    with PolicyServer(tiny, default_max_tokens=2, limits=limits) as policy:
        trace = policy.store.open()
        agent = openai.OpenAI(
            base_url=policy.rollout_url(trace.rollout_id), api_key=trace.api_key, max_retries=0
        )
        agent.chat.completions.create(**HELLO)
        agent.chat.completions.create(**HELLO)
        with pytest.raises(openai.BadRequestError, match="made its 2 model calls"):
            agent.chat.completions.create(**HELLO)


async def test_idle_rollouts_are_ended(tiny):
    limits = PolicyLimits(rollout_idle_s=0.5)
    with PolicyServer(tiny, default_max_tokens=2, limits=limits) as policy:
        idle = policy.store.open()
        with httpx.Client(timeout=60) as http:
            # no call reaches it; requests to the endpoint run the reaper (at most once a second),
            # which ends it once it has been idle past the limit
            wait_until(
                lambda: http.get(f"{policy.base_url}/v1/models").status_code == 200 and idle.ended,
                interval_s=0.1,
            )
            reply = http.post(f"{policy.rollout_url(idle.rollout_id)}/chat/completions", json=HELLO)
        refused(reply, 409, "rollout_ended")
        assert "idle" in reply.json()["error"]["message"]
        assert idle.ended and policy.store.get(idle.rollout_id) is idle  # the trace stays for the driver


def test_an_agent_past_its_time_limit_is_masked_counted_and_named(tiny):
    """`train --agent`: one agent that hangs does not hold the step; its row has no tokens to
    learn from (env_mask 0), is flagged, and the step's log names it."""
    from envharness.core.launchers import LocalServer
    from envharness.integrations.trl.agent_rollout import build_agent_rollout_func
    from envharness.integrations.trl.exploration import GroupStats, group_stats
    from envharness.models.embedded import tiny_test_model

    async def hangs(base_url, api_key, task, seed):
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        await client.chat.completions.create(**HELLO)
        if seed == 1:
            await asyncio.sleep(3600)

    model, tokenizer = tiny_test_model()

    class Trainer:  # what the rollout function reads of a trainer
        args = type("Args", (), {"temperature": 1.0, "max_completion_length": 4, "top_p": 1.0, "top_k": 0})()
        processing_class = tokenizer
        state = type("State", (), {"global_step": 0})()

        def __init__(self):
            self.model = model

    with LocalServer("echo") as env:
        rollout_func = build_agent_rollout_func(
            # the limit: far above what the healthy agent's one call takes on a busy machine; the
            # hung agent is stopped at it
            hangs,
            env_url=env.base_url,
            timeout_s=20.0,
            backend_factory=lambda trainer: load_backend("tiny"),
        )
        try:
            started = time.monotonic()
            prompts = [json.dumps({"task": "echo", "seed": seed}) for seed in (0, 1)]
            groups = GroupStats(rollout_func)
            out = groups(prompts, Trainer())
            assert time.monotonic() - started < 600  # a hang guard: the hung agent did not hold the step
        finally:
            rollout_func.close()
    hung = out["verify_metrics"][1]
    assert hung["agent_timeout"] is True and "time limit" in hung["error"] and set(out["env_mask"][1]) == {0}
    assert out["verify_metrics"][0]["agent_timeout"] is False and 1 in out["env_mask"][0]
    assert rollout_func.metrics["agent_timeouts"] == 1
    stats = group_stats(*groups.take(0))  # the batch of step 0, the one the stand-in trainer is at
    assert stats["episodes/agent_timeouts"] == 1 and stats["episodes/agent_timeout_rows"] == ["echo 1"]
