"""Continuous batching in TransformersBackend: a request joins the rows decoding now and
returns at its own last token, with the exact tokens and logprobs of the model."""

from __future__ import annotations

import asyncio
import copy
import gc
import weakref

import pytest
import torch
from test_models_transformers import conversation, forward_logprobs

from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.continuous import prepared_mask_fits
from envharness.models.embedded import tiny_test_model
from envharness.models.prefix_cache import forward_with_cache
from envharness.models.transformers_backend import TransformersBackend


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_test_model()
    return TransformersBackend(model, tokenizer)


async def _joined(tiny: TransformersBackend, first_user: str, second_user: str) -> tuple:
    """A long request decoding, then a short one sent while it does; both generations and
    whether the long one was still decoding when the short one came back."""
    decoder = tiny._decoder
    long = asyncio.create_task(
        tiny.generate(
            [GenerationRequest(conversation(first_user), sampling=SamplingParams(max_tokens=48, seed=1))]
        )
    )
    started = decoder.decode_steps
    while decoder.decode_steps < started + 2:  # the long row is past its prefill, decoding
        await asyncio.sleep(0.001)
    [short] = await tiny.generate(
        [GenerationRequest(conversation(second_user), sampling=SamplingParams(max_tokens=3, seed=2))]
    )
    still_decoding = not long.done()
    [first] = await long
    return first, short, still_decoding


def test_the_decoder_counts_its_passes_and_where_its_time_went(tiny):
    """A lone request of n tokens: one admission (its prefill gives the first token), n - 1
    decode passes, and seconds in every part that ran."""
    before = tiny._decoder.stats.as_dict()
    [g] = tiny.generate_blocking(
        [GenerationRequest(conversation("Hi"), sampling=SamplingParams(max_tokens=6, seed=3))]
    )
    after = tiny._decoder.stats.as_dict()
    grew = {k: after[k] - before[k] for k in after}
    assert grew["admissions"] == 1
    assert grew["forwards"] == len(g.completion_ids) - 1
    assert grew["admit_s"] > 0 and grew["sample_s"] > 0 and grew["finish_s"] >= 0
    assert (grew["forward_s"] > 0) == (len(g.completion_ids) > 1)


@pytest.mark.parametrize(
    "first_user, second_user",
    [
        ("Hi", "Click the button labelled OK, then submit the form. " * 4),  # the newcomer is wider
        ("Click the button labelled OK, then submit the form. " * 4, "Hi"),  # the running row is wider
    ],
)
async def test_a_request_joins_the_running_batch_and_leaves_at_its_own_end(tiny, first_user, second_user):
    tiny._decoder.most_rows = 0
    first, short, still_decoding = await _joined(tiny, first_user, second_user)
    assert tiny._decoder.most_rows == 2  # they decoded together...
    assert still_decoding or first.finish_reason == "stop"  # ...and the short one did not wait for the long
    assert len(short.completion_ids) == 3 and short.finish_reason == "length"
    for g in (first, short):  # every token's logprob is the model's, whatever joined or left around it
        assert len(g.completion_ids) == len(g.logprobs) > 0
        expected = forward_logprobs(tiny.model, g.prompt_ids, g.completion_ids, 1.0)
        assert (expected - torch.tensor(g.logprobs)).abs().max().item() < 1e-4


async def test_seeded_tokens_do_not_depend_on_who_else_decodes(tiny):
    """A seeded request samples the same tokens alone and when it joins a running batch."""
    user = "Goal: type 'hello' into the box"
    [alone] = await tiny.generate(
        [GenerationRequest(conversation(user), sampling=SamplingParams(max_tokens=3, seed=2))]
    )
    _, joined, _ = await _joined(tiny, "Hi", user)
    assert joined.completion_ids == alone.completion_ids
    assert joined.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


async def test_a_cancelled_request_leaves_the_running_batch(tiny):
    """A caller that stops waiting takes its row out; the other row decodes on to its end."""
    long = asyncio.create_task(
        tiny.generate([GenerationRequest(conversation("Hi"), sampling=SamplingParams(max_tokens=24, seed=3))])
    )
    other = asyncio.create_task(
        tiny.generate(
            [GenerationRequest(conversation("Hello"), sampling=SamplingParams(max_tokens=24, seed=4))]
        )
    )
    started = tiny._decoder.decode_steps
    while tiny._decoder.decode_steps < started + 2:
        await asyncio.sleep(0.001)
    other.cancel()
    [g] = await long
    assert g.finish_reason in ("length", "stop") and len(g.completion_ids) == len(g.logprobs)
    with pytest.raises(asyncio.CancelledError):
        await other


def test_unseeded_draws_follow_the_distribution_and_never_a_token_without_mass():
    """The one-uniform draw (two-level inverse CDF) samples token i with probability p_i: here a
    vocabulary whose masked-out tokens (top-k/top-p leave such runs) straddle a block boundary."""
    from envharness.models.sampling import inverse_cdf, processed_logprobs

    torch.manual_seed(0)
    logits = torch.randn(1, 300) * 3
    logits[0, 100:290] = float("-inf")
    p = processed_logprobs(logits, 1.0).exp()
    draws = torch.cat([inverse_cdf(p.expand(1000, -1).contiguous()) for _ in range(100)])
    assert not (p[0] == 0)[draws].any()
    frequency = torch.bincount(draws, minlength=300).double() / len(draws)
    assert (frequency - p[0].double()).abs().max().item() < 0.01  # ~7 standard deviations at most


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_short_road_draws_from_the_same_distribution_with_the_same_logprobs(temperature, overwrite):
    """Unseeded rows without top-k/top-p skip the full log_softmax: the logprob read for the drawn
    token equals `processed_logprobs` there, and the draws follow its distribution; the same
    when the decoder lets it work in the logits' own memory (`overwrite`)."""
    from envharness.models.sampling import processed_logprobs, sample_with_logprobs

    torch.manual_seed(0)
    logits = torch.randn(1, 300) * 3
    logits[0, 100:290] = float("-inf")
    rows = logits.expand(2000, -1).contiguous()
    draws, logprobs = [], []
    for _ in range(50):
        given = rows.clone() if overwrite else rows
        ids, picked = sample_with_logprobs(
            given, temperature, 0, 1.0, [None] * len(rows), overwrite=overwrite
        )
        draws.append(ids)
        logprobs.append(picked)
    draws, logprobs = torch.cat(draws), torch.cat(logprobs)
    expected = processed_logprobs(logits, temperature)[0]
    torch.testing.assert_close(logprobs, expected[draws], rtol=1e-5, atol=1e-5)
    assert torch.isfinite(logprobs).all()  # never a token without mass
    frequency = torch.bincount(draws, minlength=300).double() / len(draws)
    assert (frequency - expected.exp().double()).abs().max().item() < 0.01


async def test_the_model_mode_is_switched_once_per_batch_not_per_token(tiny):
    """While rows decode, the model stays in eval mode; its owner's training mode is back when
    the last row returns."""
    switches = []
    model = tiny.model
    original = type(model).train

    def counting_train(self, mode=True):
        if self is model:
            switches.append(mode)
        return original(self, mode)

    model.train()
    type(model).train = counting_train
    try:
        await tiny.generate(
            [
                GenerationRequest(conversation("x"), sampling=SamplingParams(max_tokens=16, seed=s))
                for s in range(3)
            ]
        )
    finally:
        type(model).train = original
    assert model.training
    assert 1 <= len(switches) <= 4, switches  # one eval and one train per batch, not one per token
    model.eval()


def test_a_prepared_decode_mask_gives_the_logits_of_the_two_dimensional_one(tiny):
    """A decode pass over right-aligned rows of different widths: the 4-D boolean mask the
    decoder passes gives the logits transformers' own mask gives, and later decode passes
    agree too."""
    assert prepared_mask_fits(tiny.model)
    prompts = [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [20, 21, 22], [30, 31, 32, 33, 34, 35]]
    with tiny.sampling_mode():
        prefilled = tiny.prefill(prompts)
        runs = {}
        for prepared in (False, True):
            past, mask, ids = copy.deepcopy(prefilled.past), prefilled.mask, torch.tensor([[40], [41], [42]])
            logits = []
            for _ in range(3):
                positions = mask.sum(-1, keepdim=True)
                mask = torch.cat([mask, mask.new_ones((3, 1))], dim=-1)
                result, past = forward_with_cache(
                    tiny.model,
                    past,
                    input_ids=ids,
                    attention_mask=mask[:, None, None, :].bool() if prepared else mask,
                    position_ids=positions,
                    logits_to_keep=1,
                )
                logits.append(result.logits[:, -1])
                ids = result.logits[:, -1].argmax(-1, keepdim=True)
            runs[prepared] = torch.stack(logits)
    torch.testing.assert_close(runs[True], runs[False], rtol=1e-5, atol=1e-5)


def test_models_with_sliding_windows_keep_the_two_dimensional_mask():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def qwen2(**kwargs):
        config = Qwen2Config(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, attn_implementation="sdpa", **kwargs,
        )  # fmt: skip
        return Qwen2ForCausalLM(config)

    assert prepared_mask_fits(qwen2())
    assert not prepared_mask_fits(qwen2(use_sliding_window=True, sliding_window=8, max_window_layers=1))
    eager = qwen2()
    eager.config._attn_implementation = "eager"
    assert not prepared_mask_fits(eager)


async def test_the_decoder_thread_serves_the_next_turn_and_ends_when_idle(tiny, monkeypatch):
    """A request that comes while the decoder waits for work is served by the same thread (no
    thread start per turn); with nothing more to do, the thread ends."""
    import envharness.models.continuous as continuous

    monkeypatch.setattr(continuous, "_IDLE_S", 30.0)  # generous: the second turn comes well before
    decoder = tiny._decoder
    turn = [GenerationRequest(conversation("Hi"), sampling=SamplingParams(max_tokens=2, seed=0))]
    await tiny.generate(turn)
    first = decoder._thread
    assert first is not None and first.is_alive()  # done, and waiting for more
    await tiny.generate(turn)
    assert decoder._thread is first
    monkeypatch.setattr(continuous, "_IDLE_S", 0.01)
    await tiny.generate(turn)  # wakes it; once idle again it waits only briefly
    first.join(timeout=60)
    assert not first.is_alive() and decoder._thread is None


def test_a_dropped_backend_frees_its_key_value_caches_without_the_cycle_collector():
    """A training rollout makes a backend per step and drops it at the step's end. Its prefix
    cache (every turn's keys/values, up to hundreds of MB) must go then, by reference counting:
    Python's full collection, which a cycle would wait for, came so rarely in a 30-minute GRPO
    run that each process grew to 8-11 GB."""
    model, tokenizer = tiny_test_model()
    backend = TransformersBackend(model, tokenizer)
    gc.collect()
    gc.disable()
    try:
        [g] = backend.generate_blocking(
            [GenerationRequest(conversation("Hi"), sampling=SamplingParams(max_tokens=4, seed=3))]
        )
        assert g.completion_ids
        decoder = backend._decoder
        worker = decoder._thread
        cached = [k for entry in backend.prefix_cache._entries.values() for k, _ in entry.layers]
        assert cached  # the turn's keys/values are kept for a next turn
        if worker is not None:
            worker.join(timeout=30)  # an idle decoder thread ends after a moment
            assert not worker.is_alive()
        freed = [weakref.ref(t) for t in cached] + [weakref.ref(backend)]
        del backend, cached, g
        assert all(ref() is None for ref in freed)
        assert decoder.backend is None
    finally:
        gc.enable()
