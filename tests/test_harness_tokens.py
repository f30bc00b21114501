"""Exact multi-turn token sequences: assembled from each model step's own tokens, never re-tokenized."""

from __future__ import annotations

import pytest
from test_harness_step_session import EchoSessionFactory

from envharness.envs.echo.client import AsyncEchoEnv
from envharness.harness import (
    BatchingModelStep,
    HarnessRunLimits,
    LLMResponse,
    ModelStepResult,
    TokenAssembler,
    ToolCall,
    run_episodes,
)


def step(prompt: list[int], completion: list[int], logprobs: list[float] | None = None) -> ModelStepResult:
    lps = [-0.1 * (i + 1) for i in range(len(completion))] if logprobs is None else logprobs
    return ModelStepResult(
        response=LLMResponse(content="x"), prompt_ids=prompt, completion_ids=completion, logprobs=lps
    )


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


class CountingTransformersBackend:
    """Builds the real `TransformersBackend` on the tiny model and counts the requests each
    call hands to its decoder (sync or async), one entry per call."""

    @staticmethod
    def make():
        from envharness.models.embedded import tiny_test_model
        from envharness.models.transformers_backend import TransformersBackend

        class Counting(TransformersBackend):
            def _submit(self, prompts, sampling):
                self.calls.append(len(prompts))
                return super()._submit(prompts, sampling)

        backend = Counting(*tiny_test_model())
        backend.calls = []
        return backend

    @classmethod
    def fixture(cls):
        """A module fixture's body: the backend, decoding on one torch thread meanwhile (a
        model this small gains nothing from more, and on a busy machine they only contend)."""
        torch = pytest.importorskip("torch")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield cls.make()
        finally:
            torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_backend():
    yield from CountingTransformersBackend.fixture()


def echo_text(text: str) -> ToolCall:
    """Every reply of the random model becomes one `echo` call carrying its text."""
    return ToolCall(id="call_0", name="echo", args={"message": text})


def assert_exact_turns(result, tokenizer) -> None:
    """Each model step's own record is a slice of the one assembled sequence: its prompt a
    prefix, its completion (env_mask 1, its own logprobs) right after, and between turns only
    the tokens of the tool messages the model read (env_mask 0, logprob 0.0)."""
    assert "token_break_turn" not in result.metrics, result.metrics
    assert len(result.completion_ids) == len(result.logprobs) == len(result.env_mask)
    assert result.prompt_ids == result.turns[0].prompt_ids
    sequence = result.prompt_ids + result.completion_ids
    tool_messages = [m["content"] for m in result.messages if m["role"] == "tool"]
    offset = 0  # position in completion_ids
    for k, turn in enumerate(result.turns):
        assert len(turn.logprobs) == len(turn.completion_ids) > 0
        start = len(turn.prompt_ids) - len(result.prompt_ids)  # where this turn's completion begins
        assert sequence[: len(turn.prompt_ids)] == turn.prompt_ids, f"turn {k} prompt is not a prefix"
        env = slice(offset, start)
        assert result.env_mask[env] == [0] * (start - offset) and result.logprobs[env] == [0.0] * (
            start - offset
        )
        if k > 0:  # the env tokens are the tool message the model read, not re-tokenized history
            assert tool_messages[k - 1] in tokenizer.decode(result.completion_ids[env])
        mine = slice(start, start + len(turn.completion_ids))
        assert result.completion_ids[mine] == turn.completion_ids
        assert result.logprobs[mine] == turn.logprobs and result.env_mask[mine] == [1] * len(
            turn.completion_ids
        )
        offset = mine.stop
    assert offset == len(result.completion_ids)
    assert result.metrics["model_tokens"] == sum(len(t.completion_ids) for t in result.turns)


async def test_real_tokenizer_episode_matches_each_model_step_turn_by_turn(tiny_backend, echo_server):
    """A random Llama on the SmolLM2 tokenizer plays 4 turns against the real echo server."""
    batcher = BatchingModelStep(tiny_backend, tool_call_parser=echo_text, send_tools=False)
    limits = HarnessRunLimits(max_turns=4, sampling={"max_tokens": 6, "temperature": 1.0, "seed": 3})
    factory = EchoSessionFactory(lambda: AsyncEchoEnv(echo_server.base_url))
    [result] = await run_episodes(factory, ["hi"], backend=batcher, limits=limits)

    assert result.error is None and result.metrics["turns"] == 4 and len(result.tool_trace) == 4
    assert result.env_reward == min(0.1 * len(result.turns[-1].response.content), 1.0)  # echo's own reward
    assert_exact_turns(result, tiny_backend.tokenizer)
