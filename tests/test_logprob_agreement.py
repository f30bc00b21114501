"""Every GRPO step logs how far the sampled logprobs are from the training forward's (TRL's
names for it behind vLLM), and the loss weighs each token by the truncated importance ratio,
unless told not to. A batch without signal pays for nothing."""

from __future__ import annotations

import os

import pytest
import torch

from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.logprob_agreement import measure_and_correct, truncated_ratio
from envharness.integrations.trl.no_signal import skip_batches_without_signal
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
PROMPT, COMPLETIONS = [1, 9690, 198, 2683], [[28, 29], [28, 30]]


def exact_logprobs(model) -> list[list[float]]:
    """What a sampler in float32 reports for COMPLETIONS after PROMPT (a plain forward)."""
    out = []
    with torch.no_grad():
        for completion in COMPLETIONS:
            ids = torch.tensor([PROMPT + completion])
            logps = torch.log_softmax(model(input_ids=ids).logits[0, len(PROMPT) - 1 : -1].float(), -1)
            out.append(logps.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist())
    return out


def one_step(tmp_path, reward, shift=(0.0, 0.0), correct=True, on_loss=None):
    """One GRPO step on fixed completions whose reported logprobs are the exact ones plus `shift`;
    `on_loss(inner, model, inputs)` sees each loss computation (TRL's own, as the step runs it)."""
    from trl import GRPOTrainer

    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    logprobs = [[lp + s for lp, s in zip(row, shift)] for row in exact_logprobs(model)]

    def rollout(prompts, trainer):
        n = len(prompts)
        return {
            "prompt_ids": [PROMPT] * n,
            "completion_ids": [COMPLETIONS[i % 2] for i in range(n)],
            "logprobs": [logprobs[i % 2] for i in range(n)],
        }

    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        max_completion_length=4,
        learning_rate=1e-2,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(["click-test"], 4),
        rollout_func=rollout,
    )
    skip_batches_without_signal(trainer)
    assert measure_and_correct(trainer, correct=correct)
    seen = []
    inner = trainer._compute_loss
    trainer._compute_loss = lambda m, inputs: (
        seen.append((inputs.get("importance_sampling_ratio"), trainer.use_vllm))
        or (on_loss or (lambda f, *a: f(*a)))(inner, m, inputs)
    )
    trainer.train()
    return trainer, seen, next(h for h in trainer.state.log_history if "loss" in h)


def second_token_wins(completion_ids, **kw):
    return [float(ids[1] == 29) for ids in completion_ids]


def test_exact_sampling_logs_no_gap(tmp_path):
    trainer, seen, log = one_step(tmp_path, second_token_wins)
    assert (
        log["sampling/sampling_logp_difference/mean"] < 1e-4
        and log["sampling/sampling_logp_difference/max"] < 1e-4
    )
    assert log["sampling/importance_sampling_ratio/min"] == pytest.approx(1.0, abs=1e-4)
    assert log["sampling/importance_sampling_ratio/max"] == pytest.approx(1.0, abs=1e-4)
    ratio, vllm_during_loss = seen[0]
    assert ratio is not None and vllm_during_loss and trainer.use_vllm is False  # restored after the loss


def test_a_gap_is_measured_and_truncated(tmp_path):
    # the sampler reported the first token 2 nats less likely than the model says: ratio e^2 = 7.4 -> 3
    trainer, seen, log = one_step(tmp_path, second_token_wins, shift=(-2.0, 0.0))
    assert log["sampling/sampling_logp_difference/mean"] == pytest.approx(1.0, abs=1e-3)  # (2 + 0) / 2 tokens
    assert log["sampling/sampling_logp_difference/max"] == pytest.approx(2.0, abs=1e-3)
    assert log["sampling/importance_sampling_ratio/max"] == pytest.approx(3.0)
    ratio = seen[0][0]
    assert ratio[:, 0].tolist() == pytest.approx([3.0] * ratio.shape[0]) and ratio[
        :, 1
    ].tolist() == pytest.approx([1.0] * ratio.shape[0], abs=1e-4)


def gradients_by_ratio(found: dict):
    """An `on_loss` that takes TRL's loss on the step's batch twice, with the step's ratio and with
    every ratio 1, and keeps both gradients (then the step goes on as it would)."""

    def on_loss(inner, model, inputs):
        ratio = inputs["importance_sampling_ratio"]
        params = [p for p in model.parameters() if p.requires_grad]
        for name, weights in (("step", ratio), ("ones", torch.ones_like(ratio))):
            loss = inner(model, {**inputs, "importance_sampling_ratio": weights})
            grads = torch.autograd.grad(loss, params, allow_unused=True)
            found[name] = torch.cat([g.flatten() for g in grads if g is not None])
        found["ratio"] = ratio
        return inner(model, inputs)

    return on_loss


@pytest.mark.parametrize("shift, changes", [((0.0, -2.0), True), ((0.0, 0.0), False)])
def test_the_correction_changes_the_gradient(tmp_path, shift, changes):
    """Ratio 3 on the token that decides the reward against ratio 1 on the same batch: TRL's loss
    really weighs by it (another gradient); with the sampler exact (ratio 1) nothing changes."""
    found: dict = {}
    one_step(tmp_path, second_token_wins, shift=shift, on_loss=gradients_by_ratio(found))
    assert found["ratio"][:, 1].tolist() == pytest.approx(
        [3.0 if changes else 1.0] * found["ratio"].shape[0], abs=1e-4
    )
    gap = float((found["step"] - found["ones"]).norm() / found["ones"].norm())
    assert found["ones"].norm() > 0
    assert (gap > 0.1) if changes else (gap < 1e-3), gap


def test_correction_off_still_measures(tmp_path):
    _, seen, log = one_step(tmp_path, second_token_wins, shift=(-2.0, 0.0), correct=False)
    assert log["sampling/importance_sampling_ratio/max"] == pytest.approx(3.0)
    assert seen[0] == (None, False)  # the loss is TRL's own, unweighted


def test_a_batch_without_signal_runs_no_forward_and_logs_no_gap(tmp_path):
    trainer, seen, log = one_step(tmp_path, lambda completions, **kw: [0.0] * len(completions))
    assert seen == [] and log["no_signal_skipped"] == 1.0
    assert not any(k.startswith("sampling/") for k in log)


def test_truncated_ratio_ignores_masked_and_missing_tokens():
    recomputed = torch.tensor([[0.0, -1.0, -5.0]])
    sampled = torch.tensor([[-3.0, float("nan"), 0.0]])
    ratio = truncated_ratio(recomputed, sampled, torch.tensor([[1, 1, 0]]), clip_max=2.0)
    assert ratio.tolist() == [[2.0, 1.0, 1.0]]


def test_the_no_signal_zero_lives_where_the_model_does(tmp_path):
    """Accelerate refuses a loss on another device than the model's: the skip's zero follows the
    parameters (a model on the meta device stands in for a GPU here)."""
    from envharness.integrations.trl.no_signal import _loss_device

    with torch.device("meta"):
        model = torch.nn.Linear(2, 2)
    assert _loss_device(model, torch.zeros(2)) == torch.device("meta")
