"""A GRPO step's loss in micro-batches: the same gradient as the whole batch, and a pass that
cannot fit in memory refused in words instead of the kernel killing the run."""

from __future__ import annotations

import os

import pytest
import torch
from _grpo_helpers import distinct_rewards

from envharness.integrations.trl import loss_memory
from envharness.integrations.trl.grpo_args import grpo_config, loss_passes
from envharness.integrations.trl.training import TrainConfig, TrainSetupError

pytestmark = pytest.mark.timeout(300)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def fixed_rollout(tokenizer):
    """Episodes that do not depend on the model: every run sees the same batch, with completions
    of different lengths (so padding and per-token normalization matter)."""

    def rollout(prompts, trainer):
        gen = torch.Generator().manual_seed(7)
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for i, _ in enumerate(prompts):
            n = 3 + (5 * i) % 9
            out["prompt_ids"].append(torch.randint(5, 200, (4 + i % 3,), generator=gen).tolist())
            out["completion_ids"].append(torch.randint(5, 200, (n,), generator=gen).tolist())
            out["logprobs"].append([-1.0] * n)
        return out

    return rollout


def step_gradient(micro_batch: int, loss_type: str, tmp_path) -> tuple[dict[str, torch.Tensor], int]:
    """The gradient one real GRPOTrainer step hands its optimizer, and how many loss passes made it."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from envharness.integrations.trl import task_dataset
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path / f"m{micro_batch}-{loss_type}"),
        max_steps=1,
        num_generations=4,
        groups_per_step=2,
        micro_batch=micro_batch,
        loss_type=loss_type,
    )
    grads: dict[str, torch.Tensor] = {}

    class KeepGradient(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            grads.update(
                {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
            )

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[distinct_rewards],
        args=grpo_config(config, save_strategy="no", max_grad_norm=0.0),
        train_dataset=task_dataset(["click-test", "click-button"], 2, seed=0),
        rollout_func=fixed_rollout(tokenizer),
        callbacks=[KeepGradient()],
    )
    passes = []
    compute_loss = trainer.compute_loss
    trainer.compute_loss = lambda m, inputs, *a, **k: (
        passes.append(len(inputs["completion_ids"])) or compute_loss(m, inputs, *a, **k)
    )
    trainer.train()
    assert sum(passes) == 8, passes  # every episode reached the loss exactly once
    return grads, len(passes)


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_micro_batches_give_the_whole_batch_gradient(loss_type, tmp_path):
    whole, one_pass = step_gradient(8, loss_type, tmp_path)
    per_group, two_passes = step_gradient(0, loss_type, tmp_path)  # default: one group per pass
    singles, eight_passes = step_gradient(1, loss_type, tmp_path)
    assert (one_pass, two_passes, eight_passes) == (1, 2, 8)
    assert whole and whole.keys() == per_group.keys() == singles.keys()
    scale = max(g.abs().max().item() for g in whole.values())
    assert scale > 0
    for name, g in whole.items():
        for other in (per_group[name], singles[name]):
            assert torch.allclose(other, g, rtol=1e-4, atol=1e-6 * scale), name


def test_a_micro_batch_must_divide_the_batch():
    assert loss_passes(TrainConfig(num_generations=4, groups_per_step=3)) == (4, 3)
    assert loss_passes(TrainConfig(num_generations=4, groups_per_step=2, micro_batch=2)) == (2, 4)
    with pytest.raises(TrainSetupError, match="must divide the batch of 8"):
        loss_passes(TrainConfig(num_generations=4, groups_per_step=2, micro_batch=3))


def test_the_estimate_grows_with_the_pass_and_shrinks_with_checkpointing():
    smol = loss_memory.ModelShape(
        layers=30, hidden=576, mlp=1536, vocab=49152, heads=9, eager_attention=False
    )
    one = loss_memory.loss_pass_bytes(smol, 1, 700, 600)
    # the fit it comes from: about 2.1 GB measured for one 700-token episode of the embedded model
    assert 1.5e9 < one < 3e9
    assert loss_memory.loss_pass_bytes(smol, 4, 700, 600) == 4 * one
    assert loss_memory.loss_pass_bytes(smol, 1, 700, 600, checkpointing=True) < one / 1.5
    assert loss_memory.loss_pass_bytes(smol, 1, 700, 600, activation_bytes=2) < one
    eager = loss_memory.ModelShape(**{**smol.__dict__, "eager_attention": True})
    assert loss_memory.loss_pass_bytes(eager, 1, 700, 600) > one


def test_a_pass_that_cannot_fit_is_refused_with_what_to_change():
    with pytest.raises(loss_memory.TrainMemoryError) as caught:
        loss_memory.check_fits(10 * 2**30, 8 * 2**30, rows=8, width=700)
    said = str(caught.value)
    assert "8 episode(s) of up to 700 tokens needs about 10.0 GiB" in said
    assert "--micro-batch 4" in said and "--gradient-checkpointing" in said
    loss_memory.check_fits(1 * 2**30, 8 * 2**30, rows=8, width=700)  # fits: nothing said
    loss_memory.check_fits(10 * 2**30, None, rows=8, width=700)  # unknown free memory: not refused


def test_free_memory_is_read_from_the_machine():
    free = loss_memory.free_bytes("cpu")
    assert free is not None and free > 2**26


def test_train_stops_in_words_at_a_loss_pass_that_would_not_fit(tmp_path, monkeypatch):
    """A real run (tiny model, echo environment): the first pass is estimated from its real
    shape and refused with what to change, instead of the kernel killing the process."""
    from envharness.integrations.trl.training import train

    free = {"bytes": None}  # unknown up front (the run starts), then too small at the loss pass
    monkeypatch.setattr(loss_memory, "free_bytes", lambda device: free["bytes"])
    real_guard = loss_memory.guard_loss_memory

    def guard_then_shrink(trainer, **kw):
        shape = real_guard(trainer, **kw)
        free["bytes"] = 2**20
        return shape

    monkeypatch.setattr(loss_memory, "guard_loss_memory", guard_then_shrink)
    config = TrainConfig(
        env="echo",
        model="tiny",
        output_dir=str(tmp_path / "run"),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        micro_batch=2,
        max_completion_length=4,
        skip_no_signal=False,  # echo's tiny-model groups all succeed: the pass must still run
    )
    with pytest.raises(
        loss_memory.TrainMemoryError, match=r"a loss pass over 2 episode\(s\) of up to \d+ tokens"
    ) as caught:
        train(config)
    assert "--micro-batch 1" in str(caught.value)
    assert isinstance(caught.value, TrainSetupError)  # the command line says it and exits 2


def test_sft_stops_in_words_at_a_pass_that_would_not_fit(tmp_path, monkeypatch, capsys):
    """`envharness sft` checks each of its passes the same way (logits at every position)."""
    from envharness.cli import main

    monkeypatch.setattr(loss_memory, "free_bytes", lambda device: 2**20)
    code = main(
        ["sft", "--model", "tiny", "--tasks", "click-test", "--episodes", "2", "--steps", "1", "--batch-size", "2",
         "--micro-batch", "2", "--max-turns", "2", "--out", str(tmp_path / "sft")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "a loss pass over 2 episode(s)" in err and "--micro-batch 1, in sft too" in err


_HEAP_PROBE = """
import os, torch
from envharness.integrations.trl.loss_memory import release_freed_heap
def rss(): return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
big = torch.ones(16 * 2**20 // 4); del big  # a pass's big tensor: glibc's mmap threshold rises to it
keep, drop = [], []
for i in range(200):  # 2 MB tensors from the heap now, every other one freed (a hole between live ones)
    (keep if i % 2 else drop).append(torch.ones(2**20 // 2))
del drop
before = rss()
print(release_freed_heap(), before - rss())
"""


def test_freed_heap_memory_goes_back_to_the_system():
    """What a pass freed between live tensors stays in glibc's heap until it is trimmed: the
    trim hands it back (in a fresh process, whose heap holds nothing else)."""
    import subprocess
    import sys

    if loss_memory._malloc_trim() is None:
        pytest.skip("no glibc malloc_trim here")
    out = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE], capture_output=True, text=True, check=True
    ).stdout
    trimmed, returned = out.split()
    assert trimmed == "True"
    assert int(returned) > 100 * 2**20  # of the 200 MB freed


def test_a_pass_is_refused_only_after_freed_memory_went_back(monkeypatch):
    """A process's own freed-but-held memory counts as free: the check trims before it refuses."""
    trims = []
    monkeypatch.setattr(loss_memory, "release_freed_heap", lambda: trims.append(1) or True)
    monkeypatch.setattr(loss_memory, "release_freed_heap_if_grown", lambda: False)  # not grown
    monkeypatch.setattr(loss_memory, "free_bytes", lambda device: 8 * 2**30 if trims else 2**20)
    smol = loss_memory.ModelShape(
        layers=30, hidden=576, mlp=1536, vocab=49152, heads=9, eager_attention=False
    )
    loss_memory.check_pass(smol, 2, 500, 400, "cpu")  # fits once the heap is trimmed
    assert trims == [1]


def test_the_heap_is_trimmed_once_the_process_grew(monkeypatch):
    """A trim costs milliseconds even with nothing to give back: it runs once the process grew
    `TRIM_AFTER_GROWTH` since the last one."""
    if loss_memory._malloc_trim() is None:
        pytest.skip("no glibc malloc_trim here")
    resident = {"bytes": 2**30}
    monkeypatch.setattr(loss_memory, "_resident_bytes", lambda: resident["bytes"])
    monkeypatch.setattr(loss_memory, "_trimmed_at", [0])
    assert loss_memory.release_freed_heap_if_grown()  # the first one
    resident["bytes"] += loss_memory.TRIM_AFTER_GROWTH - 1
    assert not loss_memory.release_freed_heap_if_grown()
    resident["bytes"] += 1
    assert loss_memory.release_freed_heap_if_grown()


def test_every_training_step_trims_a_grown_heap(tmp_path, monkeypatch):
    """A real run (tiny model, echo environment) whose process grows 1 GB a reading: the heap
    is trimmed at the end of every step (and before its pass)."""
    from envharness.integrations.trl.training import train

    trims, resident = [], {"bytes": 0}

    def growing() -> int:
        resident["bytes"] += 2**30
        return resident["bytes"]

    monkeypatch.setattr(loss_memory, "_resident_bytes", growing)
    monkeypatch.setattr(loss_memory, "release_freed_heap", lambda: trims.append(1) or True)
    config = TrainConfig(
        env="echo", model="tiny", output_dir=str(tmp_path / "run"), max_steps=2, num_generations=2,
        groups_per_step=1, max_completion_length=4, skip_no_signal=False,
    )  # fmt: skip
    train(config)
    assert len(trims) >= 4  # 2 steps x (one pass + the step's end)
