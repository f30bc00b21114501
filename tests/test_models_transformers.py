"""TransformersBackend: exact logprobs, batching, stops, seeds, exact multi-turn prompts."""

from __future__ import annotations

import asyncio

import pytest
import torch

from envharness.models import chat
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.embedded import tiny_test_model
from envharness.models.sampling import processed_logprobs
from envharness.models.transformers_backend import TransformersBackend


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_test_model()
    return TransformersBackend(model, tokenizer)


def conversation(user: str) -> list[dict]:
    return [{"role": "system", "content": "You control a web browser."}, {"role": "user", "content": user}]


def forward_logprobs(model, prompt_ids, completion_ids, temperature, top_k=0, top_p=1.0) -> torch.Tensor:
    """The reference: one plain forward pass over the whole sequence, no cache, no padding."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]
    lps = processed_logprobs(logits, temperature, top_k, top_p)
    return lps.gather(-1, torch.tensor(completion_ids)[:, None])[:, 0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_logprobs_equal_a_separate_forward_pass(tiny, temperature):
    users = [
        "Hi",
        "Click the button labelled OK, then submit the form. " * 3,
        "Goal: type 'hello' into the box",
    ]
    requests = [
        GenerationRequest(
            conversation(u), sampling=SamplingParams(temperature=temperature, max_tokens=12, seed=i)
        )
        for i, u in enumerate(users)
    ]
    gens = await tiny.generate(requests)
    assert len({len(g.prompt_ids) for g in gens}) == 3  # really different lengths: left padding in play
    for g in gens:
        assert len(g.completion_ids) == len(g.logprobs) > 0
        expected = forward_logprobs(tiny.model, g.prompt_ids, g.completion_ids, temperature)
        assert (expected - torch.tensor(g.logprobs)).abs().max().item() < 1e-4  # every token, not on average


async def test_top_k_top_p_logprobs_are_of_the_processed_distribution(tiny):
    req = GenerationRequest(
        conversation("hello"),
        sampling=SamplingParams(temperature=0.7, top_k=20, top_p=0.9, max_tokens=10, seed=3),
    )
    (g,) = await tiny.generate([req])
    processed = forward_logprobs(tiny.model, g.prompt_ids, g.completion_ids, 0.7, top_k=20, top_p=0.9)
    unfiltered = forward_logprobs(tiny.model, g.prompt_ids, g.completion_ids, 0.7)
    assert (processed - torch.tensor(g.logprobs)).abs().max().item() < 1e-4
    # An independent reference: transformers' own warpers, in `generate`'s order (temperature, top-k, top-p).
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    ids = torch.tensor([g.prompt_ids + g.completion_ids])
    with torch.no_grad():
        logits = tiny.model(ids).logits[0, len(g.prompt_ids) - 1 : -1].float()
    for warper in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(20), TopPLogitsWarper(0.9)):
        logits = warper(ids, logits)
    reference = torch.log_softmax(logits, -1).gather(-1, torch.tensor(g.completion_ids)[:, None])[:, 0]
    assert (reference - torch.tensor(g.logprobs)).abs().max().item() < 1e-4
    assert (torch.tensor(g.logprobs) > unfiltered + 1e-4).all()  # renormalised over the kept tokens
    assert torch.isfinite(torch.tensor(g.logprobs)).all()


async def test_prompt_ids_are_the_chat_template(tiny):
    msgs = conversation("Goal: click the button")
    (g,) = await tiny.generate([GenerationRequest(msgs, sampling=SamplingParams(max_tokens=2))])
    assert tiny.tokenizer.decode(g.prompt_ids) == chat.render(tiny.tokenizer, msgs)
    assert tiny.tokenizer.decode(g.prompt_ids).endswith("<|im_start|>assistant\n")


async def test_seeded_requests_sample_the_same_tokens_in_any_batch(tiny):
    params = SamplingParams(temperature=1.0, max_tokens=8, seed=42)
    alone = (await tiny.generate([GenerationRequest(conversation("abc"), sampling=params)]))[0]
    other = GenerationRequest(
        conversation("a much longer prompt that forces left padding " * 4),
        sampling=SamplingParams(max_tokens=3),
    )
    batched = (await tiny.generate([other, GenerationRequest(conversation("abc"), sampling=params)]))[1]
    assert batched.completion_ids == alone.completion_ids
    assert batched.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


async def test_stop_string_ends_the_turn_and_stays_in_the_text(tiny):
    params = SamplingParams(temperature=1.0, max_tokens=10, seed=7)
    free = (await tiny.generate([GenerationRequest(conversation("x"), sampling=params)]))[0]
    assert free.finish_reason == "length" and len(free.completion_ids) == 10
    # Pick a stop string the seeded run produces at its 4th token and that did not occur before.
    k = next(
        k
        for k in range(3, 10)
        if (piece := tiny.tokenizer.decode(free.completion_ids[k : k + 1]).strip())
        and piece not in tiny.tokenizer.decode(free.completion_ids[:k])
    )
    stop = tiny.tokenizer.decode(free.completion_ids[k : k + 1]).strip()
    stopped = (
        await tiny.generate(
            [
                GenerationRequest(
                    conversation("x"),
                    sampling=SamplingParams(temperature=1.0, max_tokens=10, seed=7, stop=[stop]),
                )
            ]
        )
    )[0]
    assert stopped.completion_ids == free.completion_ids[: k + 1]
    assert stopped.finish_reason == "stop" and stopped.text.endswith(stop)
    assert stopped.metadata["stop"] == stop


async def test_eos_ends_the_turn(tiny):
    eos = tiny.tokenizer.eos_token_id
    bias = torch.zeros(tiny.model.config.vocab_size)
    bias[eos] = 100.0  # make <|im_end|> the only likely token
    tiny.model.lm_head.bias = torch.nn.Parameter(bias, requires_grad=False)
    try:
        (g,) = await tiny.generate(
            [GenerationRequest(conversation("stop"), sampling=SamplingParams(max_tokens=5))]
        )
    finally:
        tiny.model.lm_head.bias = None
    assert g.completion_ids == [eos] and g.finish_reason == "stop" and g.text == ""


async def test_greedy_is_argmax(tiny):
    (g,) = await tiny.generate(
        [GenerationRequest(conversation("greedy"), sampling=SamplingParams(temperature=0.0, max_tokens=4))]
    )
    ids = g.prompt_ids
    for token in g.completion_ids:
        logits = tiny.model(torch.tensor([ids])).logits[0, -1].detach()
        assert token == int(torch.argmax(logits))
        ids = ids + [token]


async def test_prefix_ids_turn_two_extends_turn_one_exactly(tiny):
    msgs = conversation("Goal: click the button")
    (turn1,) = await tiny.generate([GenerationRequest(msgs, sampling=SamplingParams(max_tokens=6, seed=1))])
    prefix = turn1.prompt_ids + turn1.completion_ids
    msgs2 = msgs + [
        {"role": "assistant", "content": turn1.text},
        {"role": "user", "content": "Page changed."},
    ]
    (turn2,) = await tiny.generate(
        [GenerationRequest(msgs2, sampling=SamplingParams(max_tokens=4), prefix_ids=prefix)]
    )
    assert turn2.prompt_ids[: len(prefix)] == prefix
    new = tiny.tokenizer.decode(turn2.prompt_ids[len(prefix) :])
    # The turn ended by length (no <|im_end|>), so the template's end of turn is added first.
    assert new == "<|im_end|>\n<|im_start|>user\nPage changed.<|im_end|>\n<|im_start|>assistant\n"


def test_prefix_ids_after_an_eos_ended_turn_adds_only_the_rest(tiny):
    tok = tiny.tokenizer
    msgs = conversation("go")
    first = chat.prompt_ids(tok, msgs)
    completion = chat.encode(tok, "click('13')<|im_end|>")
    msgs2 = msgs + [{"role": "assistant", "content": "click('13')"}, {"role": "tool", "content": "ok"}]
    ids = chat.prompt_ids(tok, msgs2, prefix_ids=first + completion)
    assert ids[: len(first) + len(completion)] == first + completion
    assert (
        tok.decode(ids[len(first) + len(completion) :])
        == "\n<|im_start|>tool\nok<|im_end|>\n<|im_start|>assistant\n"
    )
    # Nothing was re-tokenized: the whole sequence is what a fresh render would give.
    assert tok.decode(ids) == chat.render(tok, msgs2)


def test_prefix_ids_without_an_assistant_turn_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="no previous assistant turn"):
        chat.prompt_ids(tiny.tokenizer, conversation("x"), prefix_ids=[1, 2, 3])


def test_mcp_tools_become_chat_template_tools():
    mcp = [
        {
            "name": "click",
            "description": "Click an element",
            "inputSchema": {"type": "object", "properties": {"bid": {"type": "string"}}},
        }
    ]
    (tool,) = chat.to_openai_tools(mcp)
    assert tool == {
        "type": "function",
        "function": {"name": "click", "description": "Click an element", "parameters": mcp[0]["inputSchema"]},
    }
    assert chat.to_openai_tools([tool]) == [tool]


async def test_event_loop_stays_free_and_training_mode_is_restored(tiny):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    tiny.model.train()
    try:
        await tiny.generate(
            [GenerationRequest(conversation("x"), sampling=SamplingParams(max_tokens=16))] * 4
        )
    finally:
        task.cancel()
    assert ticks > 1
    assert tiny.model.training  # the trainer's mode is given back
    tiny.model.eval()


async def test_bad_input_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="empty prompt"):
        tiny.generate_from_ids([[]], [SamplingParams()])
    with pytest.raises(ValueError, match="2 prompts but 1"):
        tiny.generate_from_ids([[1], [2]], [SamplingParams()])


def test_a_cached_render_is_the_template_of_that_very_conversation(tiny):
    """Renders are kept per tokenizer (a group's episodes share their first prompt): the same
    conversation gives the template's text, a conversation that differs in a message, in its
    tools or in the generation prompt gets its own, and a changed template is rendered anew."""
    tokenizer = tiny.tokenizer
    tools = [{"name": "click", "description": "Click", "inputSchema": {"type": "object", "properties": {}}}]
    a, b = conversation("Click OK"), conversation("Click Cancel")

    def direct(messages, tools=None, add_generation_prompt=True):
        extra = {"tools": chat.to_openai_tools(tools)} if tools else {}
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
        )

    for _ in range(2):  # rendered, then served from the cache
        assert chat.render(tokenizer, a) == direct(a)
        assert chat.render(tokenizer, b) == direct(b) != direct(a)
        assert chat.render(tokenizer, a, tools) == direct(a, tools)
        assert chat.render(tokenizer, a, add_generation_prompt=False) == direct(
            a, add_generation_prompt=False
        )
    assert direct(a, add_generation_prompt=False) != direct(a)
    template = tokenizer.chat_template
    try:
        tokenizer.chat_template = template.replace("<|im_start|>", "<|im_start|> ")
        assert chat.render(tokenizer, a) == direct(a) != ""
        assert "<|im_start|> " in chat.render(tokenizer, a)
    finally:
        tokenizer.chat_template = template
    assert chat.render(tokenizer, a) == direct(a)
