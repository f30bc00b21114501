"""GRPO that sees the images: one real TRL step with a tiny random Qwen2-VL on click-test.

The episodes run against a browsergym server on loopback (Debian's Chromium) with
screenshots on: the first prompt shows the page's screenshot, each action's result shows
the next one, so a two-turn episode is one sequence with two screenshots. The test spies on
TRL's loss-time logprob pass and checks that it received the pixels and that its logprobs
equal the sampling logprobs (< 1e-5). A second test runs the stock `GRPOTrainer` on the same
rollout and proves it does NOT (no pixels, logprobs off): if a TRL upgrade fixes that, the
test fails and the override can be revisited.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch
from _grpo_helpers import distinct_rewards

from envharness.harness import HarnessRunLimits
from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.rewards import reward_success
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(300)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


def run_one_step(trainer_cls, server_url, tmp_path, arch="qwen2-vl"):
    """One GRPO step; returns what the rollout handed TRL and what the loss pass received."""
    from envharness.envs.browsergym import AsyncBrowserGymEnv
    from envharness.integrations.trl.vision import build_vision_rollout_func
    from envharness.models.tiny_vlm import build_tiny_vlm

    model, processor = build_tiny_vlm(arch, seed=0)
    torch.manual_seed(0)
    rollout_func = build_vision_rollout_func(
        functools.partial(AsyncBrowserGymEnv, base_url=server_url),
        default_task="click-test",
        limits=HarnessRunLimits(max_turns=2),
    )
    handed: dict = {}

    def spy_rollout(prompts, trainer):
        out = rollout_func(prompts, trainer)
        handed.update({k: list(v) for k, v in out.items()})
        return out

    config = TrainConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        max_completion_length=6,
        learning_rate=1e-2,
    )
    trainer = trainer_cls(
        model=model,
        processing_class=processor,
        reward_funcs=[reward_success, distinct_rewards],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(["click-test"], 4),
        rollout_func=spy_rollout,
    )
    loss_passes: list[dict] = []
    inner = trainer._get_per_token_logps_and_entropies

    def spy_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps, entropies, aux = inner(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        loss_passes.append(
            {
                "ids": input_ids.detach().cpu(),
                "mask": attention_mask.detach().cpu(),
                "keep": logits_to_keep,
                "logps": logps.detach().cpu(),
                "pixels": kwargs.get("pixel_values") is not None,
                "num_images": kwargs.get("num_images"),
            }
        )
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = spy_logps
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    return handed, loss_passes, changed, processor


def loss_vs_sampling(handed: dict, loss_passes: list[dict]) -> float:
    """Largest |loss-time - sampling| logprob over the model tokens of every row (rows matched by their tokens)."""
    worst = 0.0
    matched = 0
    for p in loss_passes:
        for row in range(p["ids"].size(0)):
            tokens = p["ids"][row][p["mask"][row].bool()].tolist()
            for i in range(len(handed["prompt_ids"])):
                if handed["prompt_ids"][i] + handed["completion_ids"][i] != tokens:
                    continue
                completion = handed["completion_ids"][i]
                logps = p["logps"][row, : len(completion)].tolist()
                for lp, sampled, m in zip(logps, handed["logprobs"][i], handed["env_mask"][i]):
                    if m == 1:
                        worst = max(worst, abs(lp - sampled))
                matched += 1
                break
    assert matched == len(handed["prompt_ids"]), f"matched {matched} loss rows of {len(handed['prompt_ids'])}"
    return worst


@pytest.mark.parametrize("arch", ["qwen2-vl", "idefics3"])
def test_vision_grpo_step_gives_the_loss_pass_the_screenshots_and_exact_logprobs(server_url, tmp_path, arch):
    from envharness.integrations.trl.vision import VisionGRPOTrainer
    from envharness.models.vision_processors import image_token_id

    handed, loss_passes, changed, processor = run_one_step(VisionGRPOTrainer, server_url, tmp_path, arch)
    image_token = image_token_id(processor)
    rows = len(handed["prompt_ids"])
    assert rows == 4
    two_screenshots = 0
    for i in range(rows):
        images, counts = handed["episode_images"][i], handed["image_token_counts"][i]
        sequence = handed["prompt_ids"][i] + handed["completion_ids"][i]
        assert sequence.count(image_token) == sum(counts) and len(images) == len(counts)
        # placeholders are environment tokens: never trained on
        assert all(
            m == 0 for t, m in zip(handed["completion_ids"][i], handed["env_mask"][i]) if t == image_token
        )
        two_screenshots += len(images) == 2
    assert two_screenshots >= 1, "expected two-turn episodes with a screenshot per turn"
    assert loss_passes and all(p["pixels"] for p in loss_passes)
    if arch == "qwen2-vl":  # patches of every image, counted per row (Idefics3: one block of tiles per row)
        assert sum(sum(p["num_images"]) for p in loss_passes) == sum(len(x) for x in handed["episode_images"])
    assert loss_vs_sampling(handed, loss_passes) < 1e-5
    assert changed, "the optimizer step changed no weight"


def test_stock_trl_trainer_does_not_see_the_screenshots(server_url, tmp_path):
    """The bug this module exists for (TRL 1.16): the stock trainer's loss pass gets no pixels
    and its logprobs differ from the sampling ones. If this starts failing, TRL changed."""
    from trl import GRPOTrainer

    handed, loss_passes, _, _ = run_one_step(GRPOTrainer, server_url, tmp_path)
    assert loss_passes and not any(p["pixels"] for p in loss_passes)
    assert loss_vs_sampling(handed, loss_passes) > 1e-3


def test_missing_image_guard():
    from PIL import Image

    from envharness.integrations.trl.vision import attach_pixels
    from envharness.models.base import GenerationRequest, SamplingParams
    from envharness.models.tiny_vlm import build_tiny_vlm
    from envharness.models.transformers_vision import TransformersVisionBackend

    _, processor = build_tiny_vlm("qwen2-vl")
    model, _ = build_tiny_vlm("qwen2-vl")
    backend = TransformersVisionBackend(model, processor)
    shot = Image.new("RGB", (160, 210), (200, 10, 10))
    request = GenerationRequest(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Goal"}, {"type": "image", "image": shot}]}
        ],
        sampling=SamplingParams(max_tokens=3, seed=0),
    )
    gen = backend.generate_blocking([request])[0]
    prompt, completion = torch.tensor([gen.prompt_ids]), torch.tensor([gen.completion_ids])
    attached = attach_pixels(processor, prompt, completion, [[shot]], [gen.image_token_counts])
    assert attached["num_images"] == [1] and attached["image_grid_thw"].shape == (1, 3)
    with pytest.raises(ValueError, match="image placeholder tokens"):
        attach_pixels(processor, prompt, completion, [[]], [[]])  # the screenshot went missing
    with pytest.raises(ValueError, match="image placeholder tokens"):
        attach_pixels(
            processor, prompt, completion, [[shot, shot]], [gen.image_token_counts * 2]
        )  # one too many


def test_settings_that_cannot_be_exact_are_refused(tmp_path):
    from envharness.integrations.trl.vision import VisionTrainingError, check_exact_settings, check_processor
    from envharness.models.tiny_vlm import build_tiny_vlm

    config = TrainConfig(output_dir=str(tmp_path))
    check_exact_settings(grpo_config(config))  # the defaults are exact (loss passes included)
    passes = grpo_config(config).gradient_accumulation_steps
    for overrides, words in [
        ({"beta": 0.04}, "beta"),
        ({"num_iterations": 2}, "num_iterations"),
        ({"top_k": 5}, "top_k"),
        ({"steps_per_generation": 2 * passes}, "aligned"),
    ]:
        with pytest.raises(VisionTrainingError, match=words):
            check_exact_settings(grpo_config(config, **overrides))
    check_processor(build_tiny_vlm("idefics3")[1])  # both pixel layouts are supported
    with pytest.raises(VisionTrainingError, match="image processor"):
        check_processor(build_tiny_vlm("qwen2-vl")[1].tokenizer)


def test_envharness_train_runs_a_vision_model_end_to_end(tmp_path, capsys):
    """`envharness train --model <VLM dir>`: screenshots in the episodes, a saved model that loads back."""
    from envharness.cli import main as cli_main
    from envharness.harness import read_records
    from envharness.models import load_backend
    from envharness.models.tiny_vlm import save_tiny_vlm
    from envharness.models.transformers_vision import TransformersVisionBackend

    model_dir = save_tiny_vlm("qwen2-vl", tmp_path / "vlm")
    out = tmp_path / "run"
    args = [
        "train",
        "--model",
        str(model_dir),
        "--steps",
        "1",
        "--output-dir",
        str(out),
        "--num-generations",
        "2",
        "--groups-per-step",
        "1",
        "--max-completion-length",
        "6",
        "--max-turns",
        "2",
        "--screenshot-max-side",
        "120",
    ]
    assert (
        cli_main([*args, "--beta", "0.04"]) == 2
    )  # a setting refused before anything loads: exit 2, as every bad argument
    assert "beta != 0" in capsys.readouterr().err
    assert cli_main(args) == 0
    records = read_records(out / "episodes.jsonl")
    assert len(records) == 2 and all(r.error is None for r in records)
    assert all(r.metrics.get("images", 0) >= 1 for r in records)  # the policy saw screenshots
    backend = load_backend(str(out / "final"))
    assert isinstance(backend, TransformersVisionBackend)
