"""OpenEnvRolloutProcessor's model side, on the echo environment (a real local server).

- with a tokenizing backend (the tiny random Llama), an episode's tokens form ONE exact
  training sequence: rescoring it with the model reproduces the recorded logprobs where
  env_mask is 1, and each model segment decodes to that turn's reply;
- through Eval Protocol's default LiteLLM path (a real OpenAI-style server on loopback),
  the response cache is off when sampling and on at temperature 0;
- environment calls that fail for transient reasons are retried with backoff, then reported.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import torch
from _models_fixtures import Flaky, chat_completions_app, serve
from eval_protocol.models import EvaluationRow, Message
from eval_protocol.pytest.types import RolloutProcessorConfig

from envharness.envs.echo.client import AsyncEchoEnv
from envharness.envs.echo.models import EchoAction
from envharness.integrations.eval_protocol import OpenEnvRolloutProcessor, read_step_rewards
from envharness.models.embedded import tiny_test_model
from envharness.models.sampling import processed_logprobs
from envharness.models.transformers_backend import TransformersBackend


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_test_model()
    return TransformersBackend(model, tokenizer)


def rows(n: int, prompt: str = "start") -> list[EvaluationRow]:
    return [EvaluationRow(messages=[Message(role="user", content=prompt)]) for _ in range(n)]


def config(params: dict, concurrency: int = 4, steps: int = 3) -> RolloutProcessorConfig:
    return RolloutProcessorConfig(
        completion_params=params, mcp_config_path="", steps=steps, semaphore=asyncio.Semaphore(concurrency)
    )


def echo_prompt(observation, step, history):
    return f"Step {step}. The environment said: {observation.echoed_message!r}. Say something."


async def run_rows(
    processor: OpenEnvRolloutProcessor, batch: list[EvaluationRow], cfg: RolloutProcessorConfig
):
    try:
        return await asyncio.gather(*processor(batch, cfg))
    finally:
        await processor.acleanup()


async def test_episode_tokens_form_one_exact_training_sequence(tiny):
    processor = OpenEnvRolloutProcessor(
        env_client_cls=AsyncEchoEnv,
        prompt_builder=echo_prompt,
        action_parser=lambda text: EchoAction(message=text or "."),
        model=tiny,
    )
    (row,) = await run_rows(processor, rows(1), config({"temperature": 1.0, "max_tokens": 6}))
    extra = row.execution_metadata.extra
    assert extra["token_metrics"]["turns_assembled"] == 3 and "token_break_turn" not in extra["token_metrics"]
    prompt, completion, mask, logprobs = (
        extra["prompt_ids"],
        extra["completion_ids"],
        extra["env_mask"],
        extra["logprobs"],
    )
    assert len(completion) == len(mask) == len(logprobs) and 0 in mask and 1 in mask
    # The whole sequence, rescored at once, gives the recorded logprobs of every model token.
    with torch.no_grad():
        logits = tiny.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
    expected = processed_logprobs(logits, 1.0).gather(-1, torch.tensor(completion)[:, None])[:, 0]
    model_positions = torch.tensor(mask) == 1
    assert (expected[model_positions] - torch.tensor(logprobs)[model_positions]).abs().max().item() < 1e-3
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
    # Each run of model tokens is one assistant turn, in order.
    segments, current = [], []
    for token, m in zip(completion, mask):
        if m:
            current.append(token)
        elif current:
            segments, current = segments + [current], []
    segments += [current] if current else []
    replies = [m.content for m in row.messages if m.role == "assistant"]
    assert len(segments) == len(replies) == 3
    for segment, reply in zip(segments, replies):
        assert tiny.tokenizer.decode(segment, skip_special_tokens=True).strip().startswith(reply.strip()[:8])
    assert len(read_step_rewards(row)) == 3


async def test_litellm_path_caches_only_at_temperature_zero(tiny):
    counter = Flaky()  # counts the requests the server answers
    with serve(chat_completions_app(tiny, strict=True, flaky=counter)) as url:
        for temperature, expect_cached in ((1.0, False), (0.0, True)):
            counter.seen = 0
            processor = OpenEnvRolloutProcessor(
                env_client_cls=AsyncEchoEnv,
                prompt_builder=echo_prompt,
                action_parser=lambda text: EchoAction(message=text or "."),
            )
            params = {
                "model": "openai/tiny",
                "base_url": f"{url}/v1",
                "api_key": "unused",
                "temperature": temperature,
                "max_tokens": 4,
            }
            # One row at a time, the same prompts: with a cache, later rows are answered from it.
            done = await run_rows(processor, rows(3), config(params, concurrency=1, steps=1))
            assert all(len(read_step_rewards(r)) == 1 for r in done)
            assert all(r.execution_metadata.usage is not None for r in done)
            if expect_cached:
                assert counter.seen < 3
            else:
                assert counter.seen == 3


def dropping_listener() -> tuple[socket.socket, list[int]]:
    """A real socket that accepts connections and closes them at once (a server mid-restart)."""
    sock = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=loop, daemon=True).start()
    return sock, accepted


async def test_transient_connection_failures_are_retried_then_reported():
    sock, accepted = dropping_listener()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        processor = OpenEnvRolloutProcessor(
            env_factory=lambda: AsyncEchoEnv(base_url),
            model="scripted",
            action_parser=lambda text: EchoAction(message=text),
            retries=2,
            retry_backoff_s=0.05,
        )
        with pytest.raises(ConnectionError, match="Could not connect|closed the connection"):
            await run_rows(processor, rows(1), config({}))
        assert len(accepted) == 3  # the first try and two retries
    finally:
        sock.close()


def test_bad_constructions_are_clear_errors():
    with pytest.raises(ValueError, match="action_parser"):
        OpenEnvRolloutProcessor(env_client_cls=AsyncEchoEnv)
    with pytest.raises(ValueError, match="env_factory or env_client_cls"):
        OpenEnvRolloutProcessor(action_parser=str)
    with pytest.raises(ValueError, match="task_var"):
        OpenEnvRolloutProcessor(
            env_client_cls=AsyncEchoEnv, action_parser=str, tasks=["a"], docker_image="img"
        )
    with pytest.raises(TypeError, match="ModelBackend or a spec"):
        OpenEnvRolloutProcessor(env_client_cls=AsyncEchoEnv, action_parser=str, model=42)
