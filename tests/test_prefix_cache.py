"""Prefill reuse in TransformersBackend: shared prompts and earlier turns are not run again,
and the logprobs stay those of one plain forward pass over the whole sequence."""

from __future__ import annotations

import copy

import pytest
import torch

from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.embedded import tiny_test_model
from envharness.models.prefix_cache import common_prefix
from envharness.models.sampling import processed_logprobs
from envharness.models.transformers_backend import TransformersBackend

pytestmark = pytest.mark.timeout(900)  # seconds on an idle machine; only a hang should reach this


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return tiny_test_model()


def conversation(user: str) -> list[dict]:
    system = "You control a web browser. Reply with exactly one action per turn, e.g. click('<bid>')."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def reference_logprobs(model, prompt_ids, completion_ids, temperature=1.0) -> torch.Tensor:
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
    return processed_logprobs(logits, temperature, 0, 1.0).gather(-1, torch.tensor(completion_ids)[:, None])[
        :, 0
    ]


def two_turns(backend: TransformersBackend) -> tuple[list, list]:
    """A group of four episodes on one page (plus one on another), then each one's second turn."""
    pages = ["Goal: click OK\n[4] button 'OK'"] * 4 + ["Goal: type hello\n[7] textbox ''"]
    first = backend.generate_blocking(
        [
            GenerationRequest(conversation(p), sampling=SamplingParams(max_tokens=5, seed=i))
            for i, p in enumerate(pages)
        ]
    )
    second = backend.generate_blocking(
        [
            GenerationRequest(
                conversation(p)
                + [
                    {"role": "assistant", "content": g.text},
                    {"role": "tool", "content": f"Elements:\n[{i}] button 'Next'"},
                ],
                sampling=SamplingParams(max_tokens=4, seed=10 + i),
                prefix_ids=g.prompt_ids + g.completion_ids,
            )
            for i, (p, g) in enumerate(zip(pages, first))
        ]
    )
    return first, second


def test_shared_prompts_and_earlier_turns_are_prefilled_once(model_and_tokenizer):
    backend = TransformersBackend(*model_and_tokenizer)
    first, second = two_turns(backend)
    distinct_first = sorted({tuple(g.prompt_ids) for g in first})
    assert len(distinct_first) == 2
    shared = common_prefix([list(p) for p in distinct_first])  # system message, "Goal: "
    assert len(shared) > 16
    turn1_tokens = len(shared) + sum(len(p) - len(shared) for p in distinct_first)
    turn2_new = sum(
        len(g.prompt_ids) - len(f.prompt_ids) - len(f.completion_ids) + 1 for f, g in zip(first, second)
    )
    # Turn 1: the shared start once, then each distinct page's own part once; turn 2: only
    # the tokens after what turn 1 fed back.
    assert backend.prefill_tokens == turn1_tokens + turn2_new
    assert backend.prefill_tokens < sum(len(g.prompt_ids) for g in first + second) / 2


def test_logprobs_with_reuse_equal_one_plain_forward_pass(model_and_tokenizer):
    model, _ = model_and_tokenizer
    backend = TransformersBackend(*model_and_tokenizer)
    for gen in [g for pair in zip(*two_turns(backend)) for g in pair]:
        want = reference_logprobs(model, gen.prompt_ids, gen.completion_ids)
        assert torch.allclose(torch.tensor(gen.logprobs), want, atol=1e-4), (gen.logprobs, want)


def test_reuse_samples_what_a_backend_without_it_samples(model_and_tokenizer):
    with_reuse = two_turns(TransformersBackend(*model_and_tokenizer))
    without = two_turns(TransformersBackend(*model_and_tokenizer, prefix_cache_tokens=0))
    for a, b in zip(with_reuse[0] + with_reuse[1], without[0] + without[1]):
        assert a.prompt_ids == b.prompt_ids and a.completion_ids == b.completion_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_a_weight_update_drops_the_cache(model_and_tokenizer):
    model, tokenizer = tiny_test_model(seed=1)  # its own copy: the update below must not leak
    backend = TransformersBackend(model, tokenizer)
    first, _ = two_turns(backend)
    with torch.no_grad():  # what an optimizer step does: an in-place update
        for param in model.parameters():
            param.add_(0.01 * torch.randn_like(param))
    g = first[0]
    prompt = g.prompt_ids + g.completion_ids + [g.completion_ids[0]]
    assert backend.prefix_cache.lookup(prompt) is None
    (again,) = backend.generate_from_ids([prompt], [SamplingParams(max_tokens=3, seed=3)])
    want = reference_logprobs(model, again.prompt_ids, again.completion_ids)
    assert torch.allclose(torch.tensor(again.logprobs), want, atol=1e-4)


def test_a_new_page_reuses_the_shared_start_of_earlier_prompts(model_and_tokenizer):
    """Evaluation rebuilds each step's prompt: the system message and example are not run again."""
    model, _ = model_and_tokenizer
    backend = TransformersBackend(*model_and_tokenizer)
    (a,) = backend.generate_blocking(
        [GenerationRequest(conversation("Goal: click OK"), sampling=SamplingParams(max_tokens=3, seed=0))]
    )
    before = backend.prefill_tokens
    (b,) = backend.generate_blocking(
        [GenerationRequest(conversation("Goal: type hi"), sampling=SamplingParams(max_tokens=3, seed=0))]
    )
    shared = len(common_prefix([a.prompt_ids, b.prompt_ids]))
    assert shared > 16 and backend.prefill_tokens - before == len(b.prompt_ids) - shared
    want = reference_logprobs(model, b.prompt_ids, b.completion_ids)
    assert torch.allclose(torch.tensor(b.logprobs), want, atol=1e-4)


@pytest.mark.parametrize("change", ["replaced", "wrapped"])
def test_replaced_or_wrapped_layers_drop_the_cache(change):
    """The probed parameters are found by name once: a layer replaced by a copy (new parameter
    objects under the same names) or wrapped (the names move) is still noticed."""
    model, tokenizer = tiny_test_model(seed=1)
    backend = TransformersBackend(model, tokenizer)
    first, _ = two_turns(backend)
    g = first[0]
    prompt = g.prompt_ids + g.completion_ids + [g.completion_ids[0]]
    assert backend.prefix_cache.lookup(prompt) is not None
    layers = model.model.layers
    for i, layer in enumerate(layers):
        layers[i] = (
            copy.deepcopy(layer) if change == "replaced" else torch.nn.Sequential(copy.deepcopy(layer))
        )
    assert backend.prefix_cache.lookup(prompt) is None


def test_lookup_finds_the_longest_shared_start_of_many_stored_sequences():
    """Against a brute-force scan: whole stored sequences (a later turn), partial ones (a
    sibling's reply that diverges), and none, over many random cases."""
    import random

    from envharness.models.prefix_cache import PrefixCache

    rng = random.Random(0)
    layer = (torch.zeros(1, 300, 1), torch.zeros(1, 300, 1))
    for _ in range(200):
        cache = PrefixCache(torch.nn.Linear(1, 1), max_tokens=100_000)
        start = [rng.randrange(3) for _ in range(rng.randrange(1, 40))]
        stored = [
            start + [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
            for _ in range(rng.randrange(1, 12))
        ]
        for tokens in stored:
            cache.store(tokens, [(layer[0][:, : len(tokens)], layer[1][:, : len(tokens)])])
        prompt = rng.choice(stored + [start])[: rng.randrange(1, 80)] + [
            rng.randrange(3) for _ in range(rng.randrange(1, 20))
        ]
        expected = 0
        for tokens in stored:
            n = 0
            while n < min(len(tokens), len(prompt) - 1) and tokens[n] == prompt[n]:
                n += 1
            expected = max(expected, n)
        found = cache.lookup(prompt)
        assert (0 if found is None else len(found.tokens)) == expected
        if found is not None:
            assert list(found.tokens) == prompt[:expected]


def test_a_groups_first_turn_is_rendered_once(model_and_tokenizer, monkeypatch):
    """The episodes of a GRPO group ask with one conversation: its prompt is rendered once, and
    every request still gets its own prompt tokens."""
    from envharness.models import chat

    renders = []
    original = chat.prompt_ids
    monkeypatch.setattr(chat, "prompt_ids", lambda *a, **k: renders.append(1) or original(*a, **k))
    backend = TransformersBackend(*model_and_tokenizer)
    pages = ["Goal: click OK"] * 3 + ["Goal: type hello"] * 2
    out = backend.generate_blocking(
        [
            GenerationRequest(conversation(p), sampling=SamplingParams(max_tokens=2, seed=i))
            for i, p in enumerate(pages)
        ]
    )
    assert len(renders) == 2
    assert [g.prompt_ids for g in out] == [original(backend.tokenizer, conversation(p)) for p in pages]


def test_an_update_of_the_trained_parameters_alone_drops_the_cache():
    """With most weights frozen (an adapter's training), an update of the few trained ones is
    seen: the probe looks at the parameters that change."""
    model, tokenizer = tiny_test_model(seed=1)
    trained = model.model.layers[0].mlp.up_proj.weight  # neither first, middle nor last of all
    for param in model.parameters():
        param.requires_grad_(param is trained)
    backend = TransformersBackend(model, tokenizer)
    first, _ = two_turns(backend)
    g = first[0]
    prompt = g.prompt_ids + g.completion_ids + [g.completion_ids[0]]
    assert backend.prefix_cache.lookup(prompt) is not None
    with torch.no_grad():
        trained.add_(0.01)
    assert backend.prefix_cache.lookup(prompt) is None
