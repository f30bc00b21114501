"""Long prompts at the policy endpoint, over real HTTP with the tiny model: a prompt being
tokenized does not hold the server (`/health` answers while the tokenizer is still busy with
it), a 30 MB prompt is refused in words without being tokenized, and `max_prompt_tokens` is
a limit in tokens."""

from __future__ import annotations

import threading

import httpx
import pytest

from envharness.models import chat, load_backend
from envharness.models.images import message_text
from envharness.policy import PolicyServer
from envharness.policy.limits import PolicyLimits
from envharness.policy.prompt_size import max_chars_per_token

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def tiny():
    return load_backend("tiny")


class GatedTokenizing:
    """`chat.prompt_ids` as it is, but a long prompt waits at the gate until the test opens it
    (so the test knows the prompt is being tokenized), and every prompt's length is recorded."""

    def __init__(self, real, long_chars: int = 100_000):
        self.real, self.long_chars = real, long_chars
        self.started, self.gate = threading.Event(), threading.Event()
        self.lengths: list[int] = []

    def __call__(self, tokenizer, messages, *args, **kwargs):
        chars = sum(len(message_text(m)) for m in messages)
        self.lengths.append(chars)
        if chars >= self.long_chars:
            self.started.set()
            assert self.gate.wait(300), "the test never opened the gate"
        return self.real(tokenizer, messages, *args, **kwargs)


@pytest.fixture
def gated(monkeypatch):
    gate = GatedTokenizing(chat.prompt_ids)
    monkeypatch.setattr(chat, "prompt_ids", gate)
    yield gate
    gate.gate.set()


def ask(server: PolicyServer, text: str) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 3}
    with httpx.Client(timeout=600) as client:
        rollout = client.post(f"{server.base_url}/rollouts", json={}).json()["rollout_id"]
        return client.post(f"{server.rollout_url(rollout)}/chat/completions", json=body)


def in_background(fn, *args) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("reply", fn(*args)), daemon=True)
    thread.start()
    return thread, out


def test_health_answers_while_a_long_prompt_is_being_tokenized(tiny, gated):
    per_token = max_chars_per_token(tiny.tokenizer)
    text = ("hello world " * 40_000)[: 4000 * per_token]  # short enough to be tokenized, too long to fit
    with PolicyServer(tiny, default_max_tokens=3) as server:
        thread, out = in_background(ask, server, text)
        try:
            assert gated.started.wait(300), "the prompt never reached the tokenizer"
            health = httpx.get(
                f"{server.base_url}/health", timeout=60
            )  # the old code: held until the gate opens
            assert health.status_code == 200 and health.json()["status"] == "ok"
            assert thread.is_alive() and not gated.gate.is_set()  # the long prompt is still being tokenized
        finally:
            gated.gate.set()
        thread.join(300)
    reply = out["reply"]
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded" and "maximum context length is 4096" in error["message"]


def test_a_30_mb_prompt_is_refused_in_words_without_being_tokenized(tiny, gated):
    with PolicyServer(tiny, default_max_tokens=3) as server:
        reply = ask(server, "hello world " * 2_500_000)
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
        per_token = max_chars_per_token(tiny.tokenizer)
        assert f"the prompt has at least {30_000_000 // per_token + 1} tokens" in error["message"], error
        assert "at most 4095 tokens" in error["message"]
        assert all(n < 1_000_000 for n in gated.lengths), gated.lengths  # never tokenized
        assert ask(server, "Hello").status_code == 200  # and the endpoint serves on


def test_max_prompt_tokens_is_a_limit_in_tokens(tiny):
    limits = PolicyLimits(max_prompt_tokens=60)
    with PolicyServer(tiny, default_max_tokens=3, limits=limits) as server:
        assert server.endpoint.prompt_limit == 60
        assert ask(server, "Hello").status_code == 200
        reply = ask(server, "one two three four five " * 20)  # 100 words: more than 60 tokens
        assert reply.status_code == 400, reply.text
        message = reply.json()["error"]["message"]
        assert "this endpoint takes prompts of at most 60 tokens" in message and "at least" not in message
        far = ask(server, "x" * 60 * max_chars_per_token(tiny.tokenizer) * 2)  # refused from its length
        assert far.status_code == 400 and "at least" in far.json()["error"]["message"]
