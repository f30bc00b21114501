"""Exact multi-turn token sequences: assembled from each model step's own tokens, never re-tokenized."""

from __future__ import annotations

import pytest

from envharness.harness import (
    BatchingModelStep,
    HarnessRunLimits,
    LLMResponse,
    ModelStepResult,
    TokenAssembler,
    ToolCall,
    run_episodes,
)
from test_harness_runtime import CounterFactory


def step(prompt: list[int], completion: list[int], logprobs: list[float] | None = None) -> ModelStepResult:
    lps = [-0.1 * (i + 1) for i in range(len(completion))] if logprobs is None else logprobs
    return ModelStepResult(response=LLMResponse(content="x"), prompt_ids=prompt, completion_ids=completion, logprobs=lps)


def test_turns_extend_one_sequence_with_env_tokens_masked():
    tokens = TokenAssembler()
    assert tokens.add_turn(step([1, 2, 3], [10, 11]))
    assert tokens.add_turn(step([1, 2, 3, 10, 11, 50, 51, 52], [12]))
    assert tokens.add_turn(step([1, 2, 3, 10, 11, 50, 51, 52, 12, 60], [13, 14]))
    assert tokens.prompt_ids == [1, 2, 3]
    assert tokens.completion_ids == [10, 11, 50, 51, 52, 12, 60, 13, 14]
    assert tokens.env_mask == [1, 1, 0, 0, 0, 1, 0, 1, 1]
    assert tokens.logprobs == pytest.approx([-0.1, -0.2, 0, 0, 0, -0.1, 0, -0.1, -0.2])
    assert tokens.metrics() == {
        "prompt_tokens": 3,
        "completion_tokens": 9,
        "model_tokens": 5,
        "env_tokens": 4,
        "turns_assembled": 3,
    }


@pytest.mark.parametrize(
    "bad_turn,reason",
    [
        (step([1, 2, 9, 10, 11, 50], [12]), "do not extend"),  # history re-tokenized differently
        (step([1, 2, 3, 10], [12]), "do not extend"),  # shorter than the sequence so far
        (step([1, 2, 3, 10, 11, 50], [12], logprobs=[]), "0 logprobs for 1 completion tokens"),
        (step([], [12]), "no prompt_ids"),
    ],
)
def test_a_broken_turn_stops_the_sequence_and_says_why(bad_turn: ModelStepResult, reason: str):
    tokens = TokenAssembler()
    tokens.add_turn(step([1, 2, 3], [10, 11]))
    assert not tokens.add_turn(bad_turn)
    # later turns are not appended even if they would extend the old sequence
    assert not tokens.add_turn(step([1, 2, 3, 10, 11, 50], [12]))
    assert (tokens.prompt_ids, tokens.completion_ids, tokens.env_mask) == ([1, 2, 3], [10, 11], [1, 1])
    metrics = tokens.metrics()
    assert metrics["token_break_turn"] == 1 and reason in metrics["token_break_reason"]


@pytest.fixture(scope="module")
def tiny_backend():
    pytest.importorskip("transformers")
    from envharness.models.embedded import tiny_test_model
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = tiny_test_model()
    return TransformersBackend(model, tokenizer)


async def test_real_tokenizer_episode_matches_each_model_step_turn_by_turn(tiny_backend):
    """A random Llama on the SmolLM2 tokenizer plays 4 turns (every reply is read as add(1)).
    Each turn's own record must be a slice of the one assembled sequence."""
    always_add = lambda text: ToolCall(id="call_0", name="add", args={"n": 1})  # noqa: E731
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=always_add, send_tools=False)
    limits = HarnessRunLimits(max_turns=4, sampling={"max_tokens": 6, "temperature": 1.0, "seed": 3})
    [result] = await run_episodes(CounterFactory(), ["ep0"], backend=batcher, limits=limits)

    assert result.metrics["turns"] == 4 and "token_break_turn" not in result.metrics, result.metrics
    tok = tiny_backend.tokenizer
    sequence = result.prompt_ids + result.completion_ids
    assert result.prompt_ids == result.turns[0].prompt_ids
    offset = 0  # position in completion_ids
    for k, turn in enumerate(result.turns):
        start = len(turn.prompt_ids) - len(result.prompt_ids)  # where this turn's completion begins
        assert sequence[: len(turn.prompt_ids)] == turn.prompt_ids, f"turn {k} prompt is not a prefix"
        env = slice(offset, start)
        assert result.env_mask[env] == [0] * (start - offset) and result.logprobs[env] == [0.0] * (start - offset)
        if k > 0:  # the env tokens are the tool message the model read, not re-tokenized history
            assert f"total={k}" in tok.decode(result.completion_ids[env])
        mine = slice(start, start + len(turn.completion_ids))
        assert result.completion_ids[mine] == turn.completion_ids
        assert result.logprobs[mine] == turn.logprobs and result.env_mask[mine] == [1] * len(turn.completion_ids)
        offset = mine.stop
    assert offset == len(result.completion_ids)
