"""OpenAIBackend and TRLVLLMBackend against real HTTP servers on loopback.

The servers (tests/_models_fixtures.py) sample from the tiny model with TransformersBackend,
so every token id and logprob they return can be checked against a forward pass.
"""

from __future__ import annotations

import pytest
import torch
from _models_fixtures import Flaky, chat_completions_app, serve, trl_server_app

from envharness.models import load_backend
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.embedded import tiny_test_model
from envharness.models.http import BackendError, RetryPolicy
from envharness.models.openai_backend import OpenAIBackend
from envharness.models.sampling import processed_logprobs
from envharness.models.transformers_backend import TransformersBackend
from envharness.models.trl_vllm_backend import TRLVLLMBackend

FAST_RETRY = RetryPolicy(max_retries=3, backoff_s=0.01)


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_test_model()
    return TransformersBackend(model, tokenizer)


def conversation(user: str) -> list[dict]:
    return [{"role": "system", "content": "You control a web browser."}, {"role": "user", "content": user}]


def assert_exact(tiny, gen, temperature):
    """Token ids and logprobs are what the model gives on a separate forward pass."""
    assert gen.prompt_ids and len(gen.completion_ids) == len(gen.logprobs) > 0
    with torch.no_grad():
        logits = tiny.model(torch.tensor([gen.prompt_ids + gen.completion_ids])).logits[
            0, len(gen.prompt_ids) - 1 : -1
        ]
    expected = processed_logprobs(logits, temperature).gather(-1, torch.tensor(gen.completion_ids)[:, None])[
        :, 0
    ]
    assert (expected - torch.tensor(gen.logprobs)).abs().max().item() < 1e-4  # every token, not on average
    assert tiny.tokenizer.decode(gen.completion_ids, skip_special_tokens=True).startswith(gen.text[:5])


async def test_openai_backend_against_a_vllm_like_server(tiny):
    with serve(chat_completions_app(tiny)) as url:
        backend = load_backend(f"openai:tiny@{url}/v1", retry=FAST_RETRY)
        try:
            reqs = [
                GenerationRequest(
                    conversation(u), sampling=SamplingParams(temperature=0.7, max_tokens=8, seed=i)
                )
                for i, u in enumerate(["a", "bb bb bb"])
            ]
            gens = await backend.generate(reqs)
        finally:
            await backend.aclose()
    assert backend.features == {"vllm_extras", "logprobs"}
    for gen, req in zip(gens, reqs):
        assert tiny.tokenizer.decode(gen.prompt_ids) == tiny.tokenizer.apply_chat_template(
            req.messages, tokenize=False, add_generation_prompt=True
        )
        assert_exact(tiny, gen, 0.7)


async def test_openai_backend_with_a_strict_hosted_style_server(tiny):
    """The server rejects vLLM's extras: the backend drops them once, keeps logprobs, and
    applies stop strings itself (the text ends with the stop string, as on vLLM)."""
    free = (
        await tiny.generate(
            [GenerationRequest(conversation("x"), sampling=SamplingParams(max_tokens=8, seed=5))]
        )
    )[0]
    stop = next(
        p
        for k in range(2, 8)
        if (p := tiny.tokenizer.decode(free.completion_ids[k : k + 1]).strip())
        and p not in tiny.tokenizer.decode(free.completion_ids[:k])
    )
    with serve(chat_completions_app(tiny, strict=True)) as url:
        backend = OpenAIBackend("tiny", base_url=f"{url}/v1", api_key="sk-test", retry=FAST_RETRY)
        try:
            (gen,) = await backend.generate(
                [
                    GenerationRequest(
                        conversation("x"), sampling=SamplingParams(max_tokens=8, seed=5, stop=[stop])
                    )
                ]
            )
        finally:
            await backend.aclose()
    assert backend.features == {"logprobs"}
    assert gen.text.endswith(stop) and stop not in gen.text[: -len(stop)]
    assert gen.finish_reason == "stop"
    assert gen.prompt_ids == [] and gen.completion_ids == []  # a hosted API gives no token ids
    assert 0 < len(gen.logprobs) <= len(free.logprobs)
    assert gen.logprobs == pytest.approx(free.logprobs[: len(gen.logprobs)], abs=1e-4)


async def test_openai_backend_retries_503_then_succeeds(tiny):
    flaky = Flaky(failures=2)
    with serve(chat_completions_app(tiny, flaky=flaky)) as url:
        backend = OpenAIBackend("tiny", base_url=f"{url}/v1", retry=FAST_RETRY)
        try:
            (gen,) = await backend.generate(
                [GenerationRequest(conversation("hi"), sampling=SamplingParams(max_tokens=4))]
            )
        finally:
            await backend.aclose()
    assert flaky.seen == 3
    assert_exact(tiny, gen, 1.0)


async def test_openai_backend_gives_up_with_a_clear_error(tiny):
    with serve(chat_completions_app(tiny, flaky=Flaky(failures=100))) as url:
        backend = OpenAIBackend(
            "tiny", base_url=f"{url}/v1", retry=RetryPolicy(max_retries=2, backoff_s=0.01)
        )
        try:
            with pytest.raises(BackendError, match="HTTP 503") as info:
                await backend.generate([GenerationRequest(conversation("hi"))])
        finally:
            await backend.aclose()
    assert info.value.status == 503


async def test_openai_backend_connection_refused_is_retried_then_reported():
    with socket_that_refuses() as url:
        backend = OpenAIBackend("m", base_url=url, retry=RetryPolicy(max_retries=1, backoff_s=0.01))
        try:
            with pytest.raises(BackendError, match="failed after 2 attempts"):
                await backend.generate([GenerationRequest(conversation("hi"))])
        finally:
            await backend.aclose()


def socket_that_refuses():
    """A loopback URL nobody listens on (a port we bound and closed)."""
    import contextlib
    import socket

    @contextlib.contextmanager
    def cm():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        yield f"http://127.0.0.1:{port}/v1"

    return cm()


async def test_trl_backend_speaks_vllm_completions_as_trl_1x(tiny):
    flaky = Flaky(failures=1)
    with serve(trl_server_app(tiny, legacy=False, flaky=flaky)) as url:
        backend = load_backend(f"trl-vllm:{url}", tokenizer=tiny.tokenizer, retry=FAST_RETRY)
        try:
            reqs = [
                GenerationRequest(
                    conversation(u), sampling=SamplingParams(temperature=0.7, max_tokens=6, seed=i)
                )
                for i, u in enumerate(["x", "yy yy"])
            ]
            reqs.append(
                GenerationRequest(conversation("z"), sampling=SamplingParams(temperature=1.0, max_tokens=5))
            )
            gens = await backend.generate(reqs)
            assert backend.api == "completions" and backend.model == "tiny"
            # Turn two extends turn one exactly: the backend sends token ids, not text.
            prefix = gens[0].prompt_ids + gens[0].completion_ids
            msgs2 = reqs[0].messages + [
                {"role": "assistant", "content": gens[0].text},
                {"role": "user", "content": "next"},
            ]
            (turn2,) = await backend.generate(
                [GenerationRequest(msgs2, sampling=SamplingParams(max_tokens=3), prefix_ids=prefix)]
            )
        finally:
            await backend.aclose()
    assert flaky.seen >= 2  # the 503 was retried
    assert_exact(tiny, gens[0], 0.7)
    assert_exact(tiny, gens[1], 0.7)
    assert_exact(tiny, gens[2], 1.0)
    assert turn2.prompt_ids[: len(prefix)] == prefix


async def test_trl_backend_speaks_the_0_2x_generate_endpoint(tiny):
    with serve(trl_server_app(tiny, legacy=True)) as url:
        backend = TRLVLLMBackend(f"{url}/generate/", tokenizer=tiny.tokenizer, retry=FAST_RETRY)
        auto = TRLVLLMBackend(url, tokenizer=tiny.tokenizer, retry=FAST_RETRY)
        try:
            assert backend.api == "generate" and backend.base_url == url
            reqs = [
                GenerationRequest(
                    conversation(u), sampling=SamplingParams(temperature=0.7, max_tokens=6, seed=i)
                )
                for i, u in enumerate(["x", "a b c"])
            ]
            gens = await backend.generate(reqs)
            (auto_gen,) = await auto.generate(reqs[:1])
        finally:
            await backend.aclose()
            await auto.aclose()
    assert auto.api == "generate"  # found by asking /v1/models (404) then /health/
    for gen in gens + [auto_gen]:
        assert_exact(tiny, gen, 0.7)
    assert auto_gen.completion_ids == gens[0].completion_ids  # same seed, same tokens


async def test_trl_backend_reports_a_server_that_is_down():
    with socket_that_refuses() as url:
        backend = TRLVLLMBackend(
            url.removesuffix("/v1"), tokenizer=object(), retry=RetryPolicy(max_retries=0)
        )
        try:
            with pytest.raises(BackendError):
                await backend.generate([GenerationRequest(conversation("x"))])
        finally:
            await backend.aclose()


def test_bad_specs_are_clear_errors():
    with pytest.raises(ValueError, match="unknown model"):
        load_backend("no-such-model")
    with pytest.raises(ValueError, match="needs a URL"):
        load_backend("trl-vllm:localhost:8000")
    with pytest.raises(ValueError, match="needs a model name"):
        load_backend("openai:@http://x")
    with pytest.raises(ValueError, match="api must be"):
        TRLVLLMBackend("http://x", api="grpc")
    spec = load_backend("openai:gpt-x@http://h:1/v1/", api_key="k")
    assert (spec.model, spec.base_url, spec.name) == ("gpt-x", "http://h:1/v1", "openai:gpt-x")
