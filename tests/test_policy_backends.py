"""The policy endpoint on other backends: TRL's vLLM server (a loopback stand-in sampling the
tiny model, as in test_models_remote.py) and a vision-language model with OpenAI image parts.
The recorded tokens are checked against a forward pass, the images against the placeholders."""

from __future__ import annotations

import base64
import io

import openai
import pytest
import torch
from _models_fixtures import serve, trl_server_app

from envharness.models import load_backend
from envharness.models.embedded import tiny_test_model
from envharness.models.sampling import processed_logprobs
from envharness.models.transformers_backend import TransformersBackend
from envharness.policy import PolicyServer, trace_sample

pytestmark = pytest.mark.timeout(300)


def llm(policy, rollout_id):
    return openai.OpenAI(base_url=policy.rollout_url(rollout_id), api_key="unused", max_retries=0)


def test_trl_vllm_backend_behind_the_endpoint_records_exact_multi_turn_tokens():
    tiny = TransformersBackend(*tiny_test_model())
    with (
        serve(trl_server_app(tiny, legacy=False)) as url,
        PolicyServer(
            load_backend(f"trl-vllm:{url}", tokenizer=tiny.tokenizer), sampling={"temperature": 0.7}
        ) as policy,
    ):
        trace = policy.store.open()
        client = llm(policy, trace.rollout_id)
        messages = [{"role": "user", "content": "first"}]
        for turn in range(2):
            reply = client.chat.completions.create(
                model="m", messages=messages, max_tokens=5, temperature=1.3
            )
            messages += [reply.choices[0].message.model_dump(), {"role": "user", "content": f"next {turn}"}]
        policy.store.end(trace.rollout_id)
    first, second = trace.turns
    assert second.prompt_ids[: len(first.sequence)] == first.sequence and first.sampling["temperature"] == 0.7
    sample = trace_sample(trace)
    with torch.no_grad():  # the logprobs the server sampled with (at the forced 0.7) are the model's
        ids = sample.prompt_ids + sample.completion_ids
        logits = tiny.model(torch.tensor([ids])).logits[0, len(sample.prompt_ids) - 1 : -1]
    expected = processed_logprobs(logits, 0.7).gather(-1, torch.tensor(sample.completion_ids)[:, None])[:, 0]
    mask = torch.tensor(sample.env_mask, dtype=torch.bool)
    assert mask.sum() == len(first.completion_ids) + len(second.completion_ids)
    assert (expected[mask] - torch.tensor(sample.logprobs)[mask]).abs().max().item() < 1e-3


def _png(color: tuple[int, int, int]) -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_images_as_openai_parts_reach_a_vision_model_and_its_placeholders_are_masked():
    with PolicyServer(load_backend("tiny-vlm"), default_max_tokens=4) as policy:
        trace = policy.store.open()
        client = llm(policy, trace.rollout_id)
        messages = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is on the page?"},
                    {"type": "image_url", "image_url": {"url": _png((255, 0, 0))}},
                ],
            }
        ]
        reply = client.chat.completions.create(model="m", messages=messages)
        messages += [
            reply.choices[0].message.model_dump(),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "And now?"},
                    {"type": "image_url", "image_url": {"url": _png((0, 0, 255))}},
                ],
            },
        ]
        client.chat.completions.create(model="m", messages=messages)
        with pytest.raises(openai.BadRequestError) as remote:
            client.chat.completions.create(
                model="m",
                messages=[
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
                    }
                ],
            )
        assert remote.value.body["code"] == "invalid_image"
        policy.store.end(trace.rollout_id)
    first, second = trace.turns
    assert len(first.images) == 1 and len(second.images) == 1  # each call's new screenshot
    assert second.prompt_ids[: len(first.sequence)] == first.sequence
    sample = trace_sample(trace)
    assert "token_break_reason" not in sample.metrics and len(sample.images) == 2
    placeholders = [t for t, m in zip(sample.completion_ids, sample.env_mask) if t == first.image_token_id]
    assert len(placeholders) == sample.image_token_counts[1]  # the second image sits in env tokens (mask 0)
    assert all(m == 0 for t, m in zip(sample.completion_ids, sample.env_mask) if t == first.image_token_id)


def test_a_text_model_refuses_images_with_an_openai_error():
    with PolicyServer(load_backend("tiny")) as policy:
        trace = policy.store.open()
        with pytest.raises(openai.BadRequestError) as refused:
            llm(policy, trace.rollout_id).chat.completions.create(
                model="m",
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "look"},
                            {"type": "image_url", "image_url": {"url": _png((0, 255, 0))}},
                        ],
                    }
                ],
            )
        assert "image" in refused.value.body["message"].lower() and not trace.turns
