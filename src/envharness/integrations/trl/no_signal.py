"""Skip the loss of a GRPO batch that carries no learning signal.

When every group of a batch got the same reward for all its episodes (`frac_reward_zero_std`
= 1, typical while a small model has not yet found any success), every advantage is 0. With
`beta = 0` and no entropy bonus, GRPO's loss is then exactly 0 and so is its gradient, yet TRL
still runs the forward and backward pass over the whole batch, most of such a step on a CPU
(bench/README.md). Here that pass is skipped: the loss is a zero that touches no parameter, so no gradient exists and
the optimizer leaves the weights (and its moments) as they are. Steps with signal are
untouched. Skipped steps are logged as `no_signal_skipped: 1` and carry no loss-time metrics
(entropy, clip ratios). Under several processes a pass is skipped only where every rank's
share of it has no signal.
"""

from __future__ import annotations

from typing import Any

from envharness.integrations.trl import ranks


def skip_batches_without_signal(trainer: Any) -> bool:
    """Wrap `trainer.compute_loss` so a batch whose advantages are all 0 costs nothing.
    Returns False (and changes nothing) when the loss is not zero there (beta > 0, an entropy
    bonus), where skipping would not be exact."""
    import torch

    args = trainer.args
    if (
        getattr(args, "beta", 0.0) != 0.0
        or getattr(args, "entropy_coef", 0.0)
        or getattr(args, "use_adaptive_entropy", False)
    ):
        return False
    compute_loss = trainer.compute_loss
    skipped = {"count": 0}

    def compute_loss_or_skip(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        advantages = inputs.get("advantages")
        silent = isinstance(advantages, torch.Tensor) and not bool(advantages.abs().gt(0).any())
        # one decision on every rank: a rank that skipped would leave DDP's all-reduce waiting
        if ranks.all_agree(silent):
            skipped["count"] += 1
            trainer._metrics["train"]["no_signal_skipped"].append(1.0)
            # on the model's device (Accelerate refuses a loss elsewhere); backward() reaches no parameter
            return torch.zeros((), device=_loss_device(model, advantages), requires_grad=True)
        trainer._metrics["train"]["no_signal_skipped"].append(0.0)
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = compute_loss_or_skip
    trainer.no_signal_skipped = skipped
    return True


def _loss_device(model: Any, advantages: Any) -> Any:
    """The device the trainer expects the loss on: the model's (the advantages live there too)."""
    for p in model.parameters():
        return p.device
    return advantages.device
