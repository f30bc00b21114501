"""The policy endpoint's generation is bounded: `max_tokens` by the context and the server's
`--max-tokens-limit` (OpenAI's `context_length_exceeded`), a call whose client went away stops
generating and records nothing, and SIGTERM ends the server whatever is generating, without
tracebacks. Real tiny Llama, real HTTP on loopback, the real `envharness policy` command."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from envharness.models import load_backend
from envharness.policy import PolicyServer
from envharness.policy.limits import PolicyLimits

pytestmark = pytest.mark.timeout(600)
HELLO = [{"role": "user", "content": "hi"}]
CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def tiny():
    return load_backend("tiny")


def wait_until(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s  # a hang guard only
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.05)


def test_max_tokens_is_bounded_by_the_context_and_the_server_limit(tiny):
    with PolicyServer(tiny, limits=PolicyLimits(max_tokens_limit=64)) as server:
        rid = httpx.post(f"{server.base_url}/rollouts", json={}).json()["rollout_id"]
        agent = openai.OpenAI(base_url=server.rollout_url(rid), api_key="any", max_retries=0)
        for asked in (1_000_000_000, 65):
            with pytest.raises(openai.BadRequestError) as refused:
                agent.chat.completions.create(model="m", messages=HELLO, max_tokens=asked)
            assert refused.value.code == "context_length_exceeded", refused.value
            assert refused.value.param == "max_tokens" and "64" in str(refused.value)
        reply = agent.chat.completions.create(model="m", messages=HELLO, max_tokens=64)
        assert reply.usage.completion_tokens <= 64
        assert len(server.store.get(rid).turns) == 1  # the refused calls recorded nothing
    assert server.endpoint.context_length == 4096
    with PolicyServer(tiny) as server:  # the default limit (4096): the context decides
        rid = httpx.post(f"{server.base_url}/rollouts", json={}).json()["rollout_id"]
        agent = openai.OpenAI(base_url=server.rollout_url(rid), api_key="any", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            agent.chat.completions.create(model="m", messages=HELLO, max_tokens=4090)
        assert refused.value.code == "context_length_exceeded"
        assert re.search(
            r"maximum context length is 4096 tokens, but you requested \d+ tokens", str(refused.value)
        )
        assert not server.store.get(rid).turns


async def test_a_client_that_goes_away_stops_its_generation(tiny, monkeypatch):
    seen = []
    generate = tiny.generate

    async def observed(requests):  # the real backend; what it returned is kept to look at
        generations = await generate(requests)
        seen.extend(generations)
        return generations

    monkeypatch.setattr(tiny, "generate", observed)
    with PolicyServer(tiny) as server:
        async with httpx.AsyncClient(timeout=300) as http:
            gone, other = [(await http.post(f"{server.base_url}/rollouts", json={})).json() for _ in range(2)]
            body = {"model": "m", "messages": HELLO, "max_tokens": 3000}
            call = asyncio.ensure_future(http.post(f"{gone['base_url']}/chat/completions", json=body))
            await asyncio.to_thread(wait_until, lambda: server.endpoint.generating == 1)
            call.cancel()  # the client gives up: its connection closes
        await asyncio.to_thread(wait_until, lambda: server.endpoint.generating == 0 and seen)
        assert seen[0].finish_reason == "cancelled" and len(seen[0].completion_ids) < 3000
        assert not server.store.get(gone["rollout_id"]).turns  # nothing recorded for nobody
        agent = openai.AsyncOpenAI(base_url=other["base_url"], api_key="any", max_retries=0)
        reply = await agent.chat.completions.create(model="m", messages=HELLO, max_tokens=2)
        assert reply.usage.completion_tokens == 2


def test_sigterm_ends_the_server_while_it_generates_without_tracebacks(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "policy.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*CLI, "policy", "--model", "tiny", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_until(lambda: "listening on" in log.read_text() or proc.poll() is not None, 300)
        url = re.search(r"listening on (http://\S+)", log.read_text()).group(1)
        replies: list[httpx.Response | Exception] = []

        def long_call() -> None:
            rid = httpx.post(f"{url}/rollouts", json={}).json()["rollout_id"]
            body = {"model": "m", "messages": HELLO, "max_tokens": 3900}
            try:
                replies.append(
                    httpx.post(f"{url}/rollouts/{rid}/v1/chat/completions", json=body, timeout=300)
                )
            except httpx.HTTPError as exc:
                replies.append(exc)

        callers = [threading.Thread(target=long_call) for _ in range(2)]
        for caller in callers:
            caller.start()
        wait_until(lambda: httpx.get(f"{url}/health").json()["generating"] == 2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=300) == 0
        for caller in callers:
            caller.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text, text
    assert "envharness policy: stopped" in text
    # Both callers were answered, in words: 503 shutting_down (a dropped connection is a failure).
    assert all(isinstance(r, httpx.Response) for r in replies) and len(replies) == 2, replies
    assert [(r.status_code, r.json()["error"]["code"]) for r in replies] == [(503, "shutting_down")] * 2
