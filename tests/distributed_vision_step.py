"""One real `VisionGRPOTrainer` step on fixed episodes with screenshots, as one process or as
a rank under torchrun (gloo on the CPU), with the tiny random Qwen2-VL; rank 0 saves the
weights after the step. `test_many_processes.py` runs it.

    python tests/distributed_vision_step.py OUT.pt
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_vision_step.py OUT.pt

Saves {"weights", "grads"}, as tests/distributed_step.py does for text.
"""

from __future__ import annotations

import os
import sys

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from distributed_step import KeepGradient, save_step  # noqa: E402


def fixed_vision_rollout(processor, num_generations: int):
    """Episodes with one screenshot each that depend only on their place in the whole batch:
    a prompt of text, the image's placeholder tokens (as the processor expands them), text."""
    from PIL import Image

    from envharness.integrations.trl.vision import COUNTS_KEY, IMAGES_KEY
    from envharness.models.vision_processors import image_token_id

    def rollout(prompts, trainer):
        first = trainer.accelerator.process_index * len(prompts)  # TRL hands each rank its slice in order
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], IMAGES_KEY: [], COUNTS_KEY: []}
        for i in range(first, first + len(prompts)):
            gen = torch.Generator().manual_seed(2000 + i)
            pixels = torch.randint(0, 256, (28 + 28 * (i % 2), 56, 3), generator=gen, dtype=torch.uint8)
            image = Image.fromarray(pixels.numpy())
            text = "<|vision_start|><|image_pad|><|vision_end|>"
            ids = processor(text=[f"look {text} here"], images=[image], return_tensors="pt")["input_ids"][0]
            count = int((ids == image_token_id(processor)).sum())
            n = 3 + (5 * i) % 7
            out["prompt_ids"].append(ids.tolist())
            out["completion_ids"].append(torch.randint(5, 200, (n,), generator=gen).tolist())
            out["logprobs"].append([-1.0] * n)
            out[IMAGES_KEY].append([image])
            out[COUNTS_KEY].append([count])
        return out

    return rollout


def main(out: str) -> None:
    from envharness.integrations.trl import ranks, task_dataset
    from envharness.integrations.trl.grpo_args import grpo_config
    from envharness.integrations.trl.training import TrainConfig
    from envharness.integrations.trl.vision import VisionGRPOTrainer
    from envharness.models.tiny_vlm import build_tiny_vlm

    torch.set_num_threads(1)
    ranks.join()
    model, processor = build_tiny_vlm("qwen2-vl", seed=0)
    config = TrainConfig(model="tiny", output_dir=os.path.dirname(out), max_steps=1, num_generations=2,
                         groups_per_step=2, max_completion_length=12)  # fmt: skip
    trainer = VisionGRPOTrainer(
        model=model,
        processing_class=processor,
        reward_funcs=[lambda completion_ids, **kw: [float(len(c)) for c in completion_ids]],
        args=grpo_config(config, save_strategy="no", max_grad_norm=0.0, report_to="none", disable_tqdm=True),
        train_dataset=task_dataset(["a", "b"], 2, seed=0),
        rollout_func=fixed_vision_rollout(processor, 2),
        callbacks=[KeepGradient(grads := {})],
    )
    trainer.train()
    save_step(trainer, grads, out)


if __name__ == "__main__":
    main(sys.argv[1])
