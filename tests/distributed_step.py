"""Real GRPOTrainer steps on fixed episodes, as one process or as a rank under torchrun (gloo on
the CPU); rank 0 saves the weights after each step. `test_many_processes.py` runs it.

    python tests/distributed_step.py OUT_DIR LOSS_TYPE,MICRO_BATCH,SIGNAL[,lora] [...]
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_step.py ...

Each SPEC is one step of a fresh model and trainer, one after the other in the same processes
(one launch pays the interpreter's and the ranks' start once), saved to OUT_DIR/SPEC.pt as
{"weights", "grads", "processes"}. SIGNAL: `all` (every group's rewards differ), `one` (only the last group's do: under two
processes one rank's batch has no signal), `none` (no group's do). `lora`: train a LoRA adapter
(`--lora`'s `LoraConfig`) instead of every weight.
"""

from __future__ import annotations

import os
import sys

import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def fixed_rollout(signal: str, num_generations: int, batch: int):
    """Episodes that depend only on their place in the whole batch, wherever they run: the same
    batch under any number of processes."""

    def rollout(prompts, trainer):
        first = trainer.accelerator.process_index * len(prompts)  # TRL hands each rank its slice in order
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for i in range(first, first + len(prompts)):
            gen = torch.Generator().manual_seed(1000 + i)
            group_varies = signal == "all" or (signal == "one" and i >= batch - num_generations)
            n = 3 + (5 * i) % 9 if group_varies else 6
            out["prompt_ids"].append(
                torch.randint(5, 200, (4 + (i // num_generations) % 3,), generator=gen).tolist()
            )
            out["completion_ids"].append(torch.randint(5, 200, (n,), generator=gen).tolist())
            out["logprobs"].append([-1.0] * n)
        return out

    return rollout


class KeepGradient:
    """The gradient the optimizer is handed (after DDP's all-reduce), by parameter name."""

    def __new__(cls, grads: dict):
        from transformers import TrainerCallback

        class Keep(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                named = (
                    model.module.named_parameters() if hasattr(model, "module") else model.named_parameters()
                )
                grads.update({n: p.grad.detach().clone() for n, p in named if p.grad is not None})

        return Keep()


def save_step(trainer, grads: dict, out: str, leave: bool = True) -> None:
    """Rank 0 saves the weights after the step and the gradients it kept, for the comparison;
    `leave`: the ranks then part, as `envharness train` ends (no rank exits while another still
    writes)."""
    from envharness.integrations.trl import ranks

    if ranks.is_main():
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        weights = {n: p.detach().clone() for n, p in unwrapped.named_parameters()}
        torch.save({"weights": weights, "grads": grads, "processes": trainer.accelerator.num_processes}, out)
    if leave:
        ranks.leave()


def main(out_dir: str, specs: list[str]) -> None:
    from envharness.integrations.trl import ranks

    torch.set_num_threads(1)
    ranks.join()
    for spec in specs:
        loss_type, micro_batch, signal, *lora = spec.split(",")
        one_step(os.path.join(out_dir, f"{spec}.pt"), loss_type, int(micro_batch), signal, lora == ["lora"])
    ranks.leave()


def one_step(out: str, loss_type: str, micro_batch: int, signal: str, lora: bool) -> None:
    """One step of a fresh tiny model on the fixed episodes, saved to `out`."""
    from trl import GRPOTrainer

    from envharness.integrations.trl import task_dataset
    from envharness.integrations.trl.grpo_args import grpo_config, lora_config
    from envharness.integrations.trl.logprob_agreement import measure_and_correct
    from envharness.integrations.trl.no_signal import skip_batches_without_signal
    from envharness.integrations.trl.training import TrainConfig
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(model="tiny", output_dir=os.path.dirname(out), max_steps=1, num_generations=4,
                         groups_per_step=2, micro_batch=micro_batch, loss_type=loss_type, lora=lora)  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[lambda completion_ids, **kw: [float(len(c)) for c in completion_ids]],
        args=grpo_config(config, save_strategy="no", max_grad_norm=0.0, report_to="none", disable_tqdm=True),
        train_dataset=task_dataset(["a", "b"], 2, seed=0),
        rollout_func=fixed_rollout(signal, 4, 8),
        callbacks=[KeepGradient(grads := {})],
        peft_config=lora_config(config) if lora else None,
    )
    skip_batches_without_signal(trainer)  # then the logprob measurement, as `train` installs them
    measure_and_correct(trainer)
    trainer.train()
    save_step(trainer, grads, out, leave=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
