"""Vision policies, measured in one run: exact logprobs per architecture, the GRPO loss pass
with and without the screenshots, and placeholder tokens per screenshot size.

    PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright .venv/bin/python bench/vision_exactness.py

1. Per tiny random VLM (built here): a batch of 4 requests, each with its own 160×210 screenshot
   (MiniWoB's page size), 8 sampled tokens each. Max |sampling logprob − separate scoring
   forward with the same pixels|, the same with a different screenshot (the pixels matter),
   placeholder tokens per screenshot, and median times of 3 runs.
2. One GRPO step on click-test (browsergym server on loopback, 2-turn episodes, screenshot per
   turn, tiny Qwen2-VL): TRL 1.16's stock `GRPOTrainer` vs `VisionGRPOTrainer`, max
   |loss-time − sampling| logprob over model tokens, and whether the loss pass got pixels.
3. Placeholder tokens of a 1280×720 screenshot under Qwen2-VL's default image processor
   (patch 14, merge 2) at several `--screenshot-max-side` values.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def screenshot(seed: int, size=(160, 210)) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(
        torch.randint(0, 256, (size[1], size[0], 3), generator=g, dtype=torch.uint8).numpy()
    )


def per_architecture() -> None:
    from envharness.models.base import GenerationRequest, SamplingParams
    from envharness.models.tiny_vlm import ARCHITECTURES, build_tiny_vlm
    from envharness.models.transformers_vision import TransformersVisionBackend

    print(
        "| arch | params | placeholder tokens / screenshot | max sampling−scoring | max with another screenshot | generate 4×8 tok (median s) | scoring forward (median s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for arch in ARCHITECTURES:
        model, processor = build_tiny_vlm(arch)
        backend = TransformersVisionBackend(model, processor)
        requests = [
            GenerationRequest(
                messages=[
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"Goal {i}"},
                            {"type": "image", "image": screenshot(i)},
                        ],
                    }
                ],
                sampling=SamplingParams(max_tokens=8, seed=10 + i),
            )
            for i in range(4)
        ]
        times, gens = [], []
        for _ in range(3):
            started = time.perf_counter()
            gens = backend.generate_blocking(requests)
            times.append(time.perf_counter() - started)
        exact, other, score_times = 0.0, 0.0, []
        for r, g in zip(requests, gens):
            if (
                backend.image_token_id in g.completion_ids
            ):  # a random model sampled its image token: unscoreable
                continue
            started = time.perf_counter()
            scored = backend.score(g.prompt_ids, g.completion_ids, r.images)
            score_times.append(time.perf_counter() - started)
            blind = backend.score(g.prompt_ids, g.completion_ids, [screenshot(99)])
            exact = max(exact, max(abs(a - b) for a, b in zip(scored, g.logprobs)))
            other = max(other, max(abs(a - b) for a, b in zip(blind, g.logprobs)))
        params = sum(p.numel() for p in model.parameters())
        print(
            f"| {arch} | {params:,} | {gens[0].image_token_counts[0]} | {exact:.1e} | {other:.1e} | {statistics.median(times):.2f} | {statistics.median(score_times):.3f} |"
        )


def demo_model() -> None:
    from envharness.models import load_backend
    from envharness.models.base import GenerationRequest, SamplingParams

    started = time.perf_counter()
    backend = load_backend("embedded-vlm")
    loaded = time.perf_counter() - started
    page = screenshot(7)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": page},
                {"type": "text", "text": "What is the capital of France?"},
            ],
        },
    ]
    started = time.perf_counter()
    greedy = backend.generate_blocking(
        [GenerationRequest(messages=messages, sampling=SamplingParams(temperature=0, max_tokens=12))]
    )[0]
    greedy_s = time.perf_counter() - started
    sampled = backend.generate_blocking(
        [GenerationRequest(messages=messages, sampling=SamplingParams(max_tokens=6, seed=1))]
    )[0]
    exact = max(
        abs(a - b)
        for a, b in zip(backend.score(sampled.prompt_ids, sampled.completion_ids, [page]), sampled.logprobs)
    )
    other = max(
        abs(a - b)
        for a, b in zip(
            backend.score(sampled.prompt_ids, sampled.completion_ids, [screenshot(8)]), sampled.logprobs
        )
    )
    print("\n| embedded-vlm (SmolLM2-135M + untrained Idefics3 vision) | value |\n|---|---|")
    print(
        f"| load (cached SmolLM2) | {loaded:.1f} s |\n| greedy answer with a screenshot | {greedy.text!r} ({greedy_s:.1f} s, 12 tokens) |"
    )
    print(f"| placeholder tokens / screenshot | {greedy.image_token_counts[0]} |")
    print(
        f"| max sampling−scoring logprob | {exact:.1e} |\n| same tokens, another screenshot | {other:.1e} |"
    )


def grpo_step() -> None:
    from test_trl_vision import loss_vs_sampling, run_one_step
    from trl import GRPOTrainer

    from envharness.core.launchers import LocalServer
    from envharness.integrations.trl.vision import VisionGRPOTrainer

    print(
        "\n| trainer | loss pass got pixels | max loss−sampling logprob (model tokens) | rows with 2 screenshots | step s |"
    )
    print("|---|---|---|---|---|")
    with LocalServer("browsergym") as server:
        for name, cls in (
            ("TRL 1.16 GRPOTrainer (stock)", GRPOTrainer),
            ("envharness VisionGRPOTrainer", VisionGRPOTrainer),
        ):
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                handed, passes, _, _ = run_one_step(cls, server.base_url, Path(tmp))
                seconds = time.perf_counter() - started
            pixels = all(p["pixels"] for p in passes)
            two = sum(len(x) == 2 for x in handed["episode_images"])
            print(
                f"| {name} | {pixels} | {loss_vs_sampling(handed, passes):.1e} | {two} of {len(handed['episode_images'])} | {seconds:.1f} |"
            )


def tokens_by_size() -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from envharness.prompts.vision import fit_image

    processor = Qwen2VLImageProcessorPil(patch_size=14, merge_size=2)  # Qwen2-VL's defaults otherwise
    page = Image.new("RGB", (1280, 720), (255, 255, 255))
    print("\n| --screenshot-max-side | image shown | placeholder tokens (Qwen2-VL processor) |")
    print("|---|---|---|")
    for side in (None, 896, 448, 224):
        image = fit_image(page, side)
        grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
        print(f"| {side or 'none'} | {image.width}×{image.height} | {int(grid.prod()) // 4} |")


if __name__ == "__main__":
    torch.set_num_threads(1)
    per_architecture()
    demo_model()
    grpo_step()
    tokens_by_size()
