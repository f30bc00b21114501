"""Two real GRPOTrainer steps under `--async` on fixed episodes, as one process or as a rank under
torchrun (gloo on the CPU): step 1 plays at once, step 2 trains the batch sampled on the decoder
copy during step 1's loss pass (its curriculum gathering across ranks on the sampling thread).
Rank 0 saves the weights after step 2, step 2's gradient and the async layer's last batch.
`test_async_processes.py` runs it.

    python tests/distributed_async_step.py OUT.pt
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_async_step.py OUT.pt
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import torch
from distributed_step import KeepGradient, fixed_rollout

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(out: str) -> None:
    from trl import GRPOTrainer

    from envharness.curriculum import make_sampler
    from envharness.integrations.trl import ranks, task_dataset
    from envharness.integrations.trl.async_rollout import AsyncRollout
    from envharness.integrations.trl.curriculum import CurriculumLayer
    from envharness.integrations.trl.grpo_args import grpo_config
    from envharness.integrations.trl.layers import FunctionRollout
    from envharness.integrations.trl.logprob_agreement import measure_and_correct
    from envharness.integrations.trl.training import TrainConfig
    from envharness.models.embedded import tiny_test_model

    torch.set_num_threads(1)
    ranks.join()
    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(model="tiny", output_dir=os.path.dirname(out), max_steps=2, num_generations=4,
                         groups_per_step=2)  # fmt: skip
    fixed = fixed_rollout("all", 4, 8)
    here = SimpleNamespace(accelerator=SimpleNamespace(process_index=ranks.rank()))  # the rank's slice
    episodes = FunctionRollout(lambda prompts, trainer: fixed(prompts, here))
    curriculum = CurriculumLayer(episodes, make_sampler("uniform", ["a", "b"], seed=0))
    layer = AsyncRollout(curriculum, max_staleness=1, seed=0)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[lambda completion_ids, **kw: [float(len(c)) for c in completion_ids]],
        args=grpo_config(config, save_strategy="no", max_grad_norm=0.0, report_to="none", disable_tqdm=True),
        train_dataset=task_dataset(["a", "b"], 4, seed=0),
        rollout_func=layer,
        callbacks=[KeepGradient(grads := {})],  # the last step's gradient: step 2's
    )
    measure_and_correct(trainer)  # the truncated importance ratio, as `train` installs it
    trainer.train()
    layer.close()  # the batch sampled for step 3, never trained
    if ranks.is_main():
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        weights = {n: p.detach().clone() for n, p in unwrapped.named_parameters()}
        saved = {"weights": weights, "grads": grads, "last": dict(layer.last)}
        torch.save({**saved, "processes": trainer.accelerator.num_processes}, out)
    ranks.leave()


if __name__ == "__main__":
    main(sys.argv[1])
