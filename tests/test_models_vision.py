"""The transformers vision backend on tiny random VLMs built here (no files, no hub).

What users rely on: the sampled logprobs are what a separate forward pass with the same
pixels computes (< 1e-5), for every architecture; the pixels really reach the model (other
pixels give other logprobs); multi-turn prompts extend the previous sequence exactly with
one screenshot per turn; placeholders agree with the image processor; images are never
dropped silently (a text backend refuses them, a placeholder without an image is refused).
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from PIL import Image

from envharness.harness.tokens import TokenAssembler
from envharness.harness.types import LLMResponse, ModelStepResult
from envharness.models import load_backend
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.images import ImagesNotSupportedError
from envharness.models.tiny_vlm import build_tiny_vlm, save_tiny_vlm
from envharness.models.transformers_vision import TransformersVisionBackend
from envharness.models.vision_processors import image_token_id, load_processor, placeholder_counts

ARCHS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "idefics3"]


def screenshot(seed: int, size: tuple[int, int] = (160, 210)) -> Image.Image:
    """A deterministic noisy page-sized image (distinct per seed)."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy())


def user(text: str, image: Image.Image | None) -> dict:
    parts = [{"type": "text", "text": text}]
    if image is not None:
        parts.append({"type": "image", "image": image})
    return {"role": "user", "content": parts}


@pytest.fixture(scope="module", params=ARCHS)
def backend(request) -> TransformersVisionBackend:
    model, processor = build_tiny_vlm(request.param)
    return TransformersVisionBackend(model, processor)


def max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a
    return max(abs(x - y) for x, y in zip(a, b))


def no_placeholder_sampled(backend: TransformersVisionBackend, gen) -> None:
    # precondition of the fixed seeds below: a random model may sample its image token
    assert backend.image_token_id not in gen.completion_ids


def test_batched_logprobs_match_a_scoring_forward_with_the_same_pixels(backend):
    requests = [
        GenerationRequest(
            messages=[user(f"Goal: click button {i}", screenshot(i))],
            sampling=SamplingParams(max_tokens=5 + i, seed=10 + i),
        )
        for i in range(3)
    ]
    gens = asyncio.run(backend.generate(requests))
    assert len(gens) == 3
    for request, gen in zip(requests, gens):
        no_placeholder_sampled(backend, gen)
        assert gen.images == request.images and len(gen.image_token_counts) == 1
        assert gen.prompt_ids.count(backend.image_token_id) == gen.image_token_counts[0]
        assert (
            max_diff(backend.score(gen.prompt_ids, gen.completion_ids, request.images), gen.logprobs) < 1e-5
        )
        # the pixels matter: the same tokens under another screenshot score differently
        assert (
            max_diff(backend.score(gen.prompt_ids, gen.completion_ids, [screenshot(99)]), gen.logprobs) > 1e-4
        )
    # a seeded request samples the same tokens alone as in a batch
    alone = backend.generate_blocking(requests[1:2])[0]
    assert alone.completion_ids == gens[1].completion_ids


def test_placeholder_counts_follow_the_image_processor(backend):
    images = [screenshot(1), screenshot(2, (64, 64))]
    counts = placeholder_counts(backend.processor, images)
    request = GenerationRequest(
        messages=[
            user("two pages", images[0]),
            {"role": "user", "content": [{"type": "image", "image": images[1]}]},
        ]
    )
    prompt = backend.prepare(request)
    assert prompt.new_counts == counts and prompt.ids.count(backend.image_token_id) == sum(counts)
    grid = backend.processor.image_processor(images=images, return_tensors="pt").get("image_grid_thw")
    if grid is not None:  # Qwen-VL: t*h*w patches, merge_size² per token
        merge = backend.processor.image_processor.merge_size
        assert counts == [int(g.prod()) // merge**2 for g in grid]


def test_multi_turn_prefix_is_exact_with_a_screenshot_per_turn(backend):
    first = GenerationRequest(
        messages=[user("Goal: click OK", screenshot(1))], sampling=SamplingParams(max_tokens=6, seed=0)
    )
    g1 = backend.generate_blocking([first])[0]
    no_placeholder_sampled(backend, g1)
    messages = first.messages + [
        {"role": "assistant", "content": g1.text},
        user("after your action:", screenshot(2, (120, 90))),
    ]
    second = GenerationRequest(
        messages=messages,
        prefix_ids=g1.prompt_ids + g1.completion_ids,
        sampling=SamplingParams(max_tokens=6, seed=5),
    )
    g2 = backend.generate_blocking([second])[0]
    no_placeholder_sampled(backend, g2)
    sequence = g1.prompt_ids + g1.completion_ids
    assert g2.prompt_ids[: len(sequence)] == sequence
    assert g2.images == [messages[-1]["content"][1]["image"]]  # only the new screenshot
    assert max_diff(backend.score(g2.prompt_ids, g2.completion_ids, second.images), g2.logprobs) < 1e-5
    # turn 1's tokens inside the 2-screenshot sequence score as they did alone
    inputs = backend.model_inputs([g2.prompt_ids + g2.completion_ids], [second.images])
    with torch.no_grad():
        logits = backend.model(**inputs).logits[0].float()
    start = len(g1.prompt_ids) - 1
    inside = [float(torch.log_softmax(logits[start + i], -1)[t]) for i, t in enumerate(g1.completion_ids)]
    assert max_diff(inside, g1.logprobs) < 1e-5

    # the assembler: one sequence, placeholders are environment tokens, images in order
    tokens = TokenAssembler()
    for gen in (g1, g2):
        step = ModelStepResult(
            response=LLMResponse(content=gen.text),
            prompt_ids=gen.prompt_ids,
            completion_ids=gen.completion_ids,
            logprobs=gen.logprobs,
            images=gen.images,
            image_token_counts=gen.image_token_counts,
            image_token_id=gen.image_token_id,
        )
        assert tokens.add_turn(step), tokens.break_reason
    assert tokens.images == second.images
    assert tokens.image_token_counts == g1.image_token_counts + g2.image_token_counts
    env_tokens = [t for t, m in zip(tokens.completion_ids, tokens.env_mask) if m == 0]
    assert env_tokens.count(backend.image_token_id) == g2.image_token_counts[0]
    assert all(lp == 0.0 for lp, m in zip(tokens.logprobs, tokens.env_mask) if m == 0)
    assert tokens.metrics()["images"] == 2


def test_assembler_stops_when_placeholders_disagree_with_the_image_processor(backend):
    gen = backend.generate_blocking(
        [
            GenerationRequest(
                messages=[user("Goal", screenshot(4))], sampling=SamplingParams(max_tokens=3, seed=1)
            )
        ]
    )[0]
    step = ModelStepResult(
        response=LLMResponse(content=gen.text),
        prompt_ids=gen.prompt_ids,
        completion_ids=gen.completion_ids,
        logprobs=gen.logprobs,
        images=gen.images,
        image_token_counts=[gen.image_token_counts[0] + 1],
        image_token_id=gen.image_token_id,
    )
    tokens = TokenAssembler()
    assert not tokens.add_turn(step)
    assert "image placeholder tokens" in tokens.break_reason


def test_images_are_never_dropped_silently(backend):
    from envharness.models.embedded import tiny_test_model
    from envharness.models.transformers_backend import TransformersBackend

    text_model, tokenizer = tiny_test_model()
    with pytest.raises(ImagesNotSupportedError, match="no vision"):
        TransformersBackend(text_model, tokenizer).generate_blocking(
            [GenerationRequest(messages=[user("look", screenshot(1))])]
        )
    # a placeholder written as text, with no image behind it
    token = backend.processor.tokenizer.convert_ids_to_tokens(backend.image_token_id)
    with pytest.raises(ValueError):
        backend.generate_blocking(
            [GenerationRequest(messages=[{"role": "user", "content": f"look {token}"}])]
        )


def test_load_backend_picks_the_vision_backend_for_a_vlm_directory(tmp_path):
    directory = save_tiny_vlm("qwen2-vl", tmp_path / "vlm")
    backend = load_backend(str(directory))
    assert isinstance(backend, TransformersVisionBackend)
    gen = backend.generate_blocking(
        [
            GenerationRequest(
                messages=[user("Goal", screenshot(3))], sampling=SamplingParams(max_tokens=3, seed=0)
            )
        ]
    )[0]
    assert gen.image_token_counts and len(gen.completion_ids) <= 3


@pytest.mark.parametrize("arch", ["qwen2-vl", "idefics3"])
def test_a_model_folder_that_names_no_processor_class_loads_by_its_model_type(tmp_path, arch):
    """Many checkpoints name no `processor_class`: transformers' own resolution (config.json's
    model_type) decides, with the image-only fallback where the video slot cannot load."""
    directory = save_tiny_vlm(arch, tmp_path / "vlm")
    named = load_processor(str(directory))
    for file in directory.glob("*.json"):
        data = json.loads(file.read_text())
        if isinstance(data, dict) and data.pop("processor_class", None) is not None:
            file.write_text(json.dumps(data))
    assert "processor_class" not in "".join(f.read_text() for f in directory.glob("*.json"))
    unnamed = load_processor(str(directory))
    assert type(unnamed).__name__.removeprefix("ImageOnly") == type(named).__name__.removeprefix("ImageOnly")
    images = [screenshot(1), screenshot(2, (300, 120))]
    assert placeholder_counts(unnamed, images) == placeholder_counts(named, images)
    assert image_token_id(unnamed) == image_token_id(named)
    assert isinstance(load_backend(str(directory)), TransformersVisionBackend)


@pytest.mark.slow
def test_embedded_demo_vlm_speaks_like_smollm2_and_its_logprobs_are_exact():
    """`embedded-vlm`: SmolLM2's language (same greedy answer with a screenshot in the prompt),
    pixels that reach the model (another screenshot, other logprobs), exact sampling logprobs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # on shared cores, 1 thread is ~20x faster than fighting for 2
    try:
        backend = load_backend("embedded-vlm")
        assert "UNTRAINED VISION" in backend.name
        question = {"type": "text", "text": "What is the capital of France?"}
        system = {"role": "system", "content": "You are a helpful assistant."}
        page = screenshot(7)
        greedy = backend.generate_blocking(
            [
                GenerationRequest(
                    messages=[
                        system,
                        {"role": "user", "content": [{"type": "image", "image": page}, question]},
                    ],
                    sampling=SamplingParams(temperature=0, max_tokens=12),
                )
            ]
        )[0]
        assert "Paris" in greedy.text and greedy.image_token_counts == [49]
        sampled = backend.generate_blocking(
            [
                GenerationRequest(
                    messages=[
                        system,
                        {"role": "user", "content": [{"type": "image", "image": page}, question]},
                    ],
                    sampling=SamplingParams(temperature=1.0, max_tokens=6, seed=1),
                )
            ]
        )[0]
        # 30 fp32 layers: cached decoding vs one plain forward sum in different orders (measured 1.1e-5);
        # another screenshot moves them by orders of magnitude more
        exact = max_diff(backend.score(sampled.prompt_ids, sampled.completion_ids, [page]), sampled.logprobs)
        assert exact < 1e-4
        assert (
            max_diff(
                backend.score(sampled.prompt_ids, sampled.completion_ids, [screenshot(8)]), sampled.logprobs
            )
            > 100 * exact
        )
    finally:
        torch.set_num_threads(threads)
