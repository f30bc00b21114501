"""Trainer callbacks for GRPO runs: a one-line-per-step progress log, a time budget, the reward
curve, and the step boundary that says whether a stopped run can checkpoint what is in memory."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from envharness.integrations.trl.resume import Checkpoint, latest_checkpoint


def _number(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


class ProgressCallback(TrainerCallback):
    """Prints reward and success per step and appends TRL's logs to a JSONL file."""

    def __init__(
        self, log_path: str | Path, stream: Any = None, *, append: bool = False, label: str = "train"
    ):
        self.label = label  # the line's prefix: [train] for GRPO, [sft] for fine-tuning
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if not append:  # a resumed run continues the log
            self.log_path.write_text("")
        self.stream = stream or sys.stderr
        self._started = time.perf_counter()
        self.where: dict[str, str] = {}  # device and compute dtype, on every line of the log

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.perf_counter()
        model = kwargs.get("model")
        if model is not None:
            self.where = run_placement(model, args)
            print(
                f"[{self.label}] model on {self.where['device']}, {self.where['dtype']}"
                f"{' mixed precision (float32 weights)' if self.where['weights_dtype'] != self.where['dtype'] else ''}",
                file=self.stream,
                flush=True,
            )

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if not logs:
            return
        entry = {
            "step": state.global_step,
            "elapsed_s": round(time.perf_counter() - self._started, 2),
            **logs,
            **self.where,
        }
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, default=float) + "\n")
        step = f"[{self.label}] step {state.global_step}/{state.max_steps if state.max_steps < 1_000_000 else '-'}"
        if "reward" in logs:
            success = logs.get("rewards/reward_success/mean")
            extra = f"  success {success:.2f}" if success is not None else ""
            envs = [  # a mix: each environment's success over its tasks
                f"{key.split('/')[1]} {value:.2f}"
                for key, value in logs.items()
                if key.startswith("envs/") and key.endswith("/success")
            ]
            extra += f" ({', '.join(envs)})" if envs else ""
            # a batch whose every episode failed has no reward (TRL logs None): say so, do not crash
            print(
                f"{step}  reward {_number(logs['reward'], '.3f')}{extra}  loss {_number(logs.get('loss'), '.4f')}"
                f"  {entry['elapsed_s']:.0f}s",
                file=self.stream,
                flush=True,
            )
        elif "loss" in logs:  # supervised steps: the loss on the model's tokens
            accuracy = logs.get("mean_token_accuracy")
            extra = f"  token accuracy {accuracy:.2f}" if accuracy is not None else ""
            extra += _held_out_text(logs)
            print(
                f"{step}  loss {logs['loss']:.4f}{extra}  {entry['elapsed_s']:.0f}s",
                file=self.stream,
                flush=True,
            )


def _held_out_text(logs: dict[str, Any]) -> str:
    """'  held-out 0.50 (click-test 1.00 loss 0.0123, ...)' when this step was evaluated."""
    if "eval/trained_mean" not in logs:
        return ""
    tasks = [k.split("/")[1] for k in logs if k.startswith("eval/") and k.endswith("/success")]
    parts = [
        f"{task} {logs[f'eval/{task}/success']:.2f}"
        + (f" loss {logs[f'loss/{task}']:.4f}" if f"loss/{task}" in logs else "")
        for task in tasks
    ]
    return f"  held-out {logs['eval/trained_mean']:.2f} ({', '.join(parts)})"


def run_placement(model: Any, args: Any) -> dict[str, str]:
    """Where a trainer runs `model`: its device, the compute dtype (the autocast's under
    bf16/fp16 mixed precision) and the weights' dtype."""
    from envharness.models.device import model_placement

    placed = model_placement(model)
    compute = (
        "bfloat16"
        if getattr(args, "bf16", False)
        else "float16"
        if getattr(args, "fp16", False)
        else placed.dtype_name
    )
    return {"device": str(placed.device), "dtype": compute, "weights_dtype": placed.dtype_name}


class TimeBudgetCallback(TrainerCallback):
    """Stops training (after the current step, saving a checkpoint) once `minutes` have passed."""

    def __init__(self, minutes: float):
        if minutes <= 0:
            raise ValueError("minutes must be positive")
        self.seconds = minutes * 60.0
        self._started = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from envharness.integrations.trl import ranks

        if ranks.any_rank(time.perf_counter() - self._started >= self.seconds):  # every rank stops
            control.should_training_stop = True
            control.should_save = True


# the exploration curves drawn under the reward (key: line style, label)
EXPLORATION_KEYS = {
    "entropy": ("^-", "entropy (TRL, loss steps)"),
    "sampled_nll": ("v-", "sampled NLL (every step)"),
    "frac_reward_zero_std": ("s--", "zero-variance groups"),
    "groups/all_failed": ("x:", "all-failed groups"),
}


def reward_curve(history: list[dict[str, Any]], key: str = "reward") -> list[tuple[int, float]]:
    """(step, value) for every logged step that has `key`."""
    return [
        (int(h["step"]), float(h[key]))
        for h in history
        if key in h and "step" in h and not math.isnan(float(h[key]))
    ]


def _moving_average(values: Any, window: int) -> list[float]:
    """The mean of each value and the `window - 1` before it (fewer at the start)."""
    return [sum(values[max(0, i - window + 1) : i + 1]) / min(i + 1, window) for i in range(len(values))]


def plot_reward_curve(
    history: list[dict[str, Any]], path: str | Path, *, title: str = "GRPO", window: int = 5
) -> Path | None:
    """Mean reward per step and its moving average as a PNG, with the exploration curves (entropy,
    zero-variance and all-failed groups) below when logged; None when nothing was logged."""
    points = reward_curve(history)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, values = zip(*points)
    smooth = _moving_average(values, window)
    explored = [key for key in EXPLORATION_KEYS if reward_curve(history, key)]
    fig, axes = plt.subplots(
        2 if explored else 1, 1, figsize=(7, 6.5 if explored else 4), sharex=True, squeeze=False
    )
    ax = axes[0][0]
    ax.plot(steps, values, "o-", alpha=0.35, label="mean reward per step")
    ax.plot(steps, smooth, "-", linewidth=2, label=f"moving average ({window} steps)")
    success = reward_curve(history, "rewards/reward_success/mean")
    if success and [v for _, v in success] != list(values):
        ax.plot(*zip(*success), "--", alpha=0.6, label="success rate")
    envs = sorted(
        {
            k.split("/")[1]
            for entry in history
            for k in entry
            if k.startswith("envs/") and k.endswith("/success")
        }
    )
    for env in envs:  # a mix: each environment's success over its groups, averaged like the reward
        env_steps, env_values = zip(*reward_curve(history, f"envs/{env}/success"))
        ax.plot(
            env_steps,
            _moving_average(env_values, window),
            ":",
            linewidth=2,
            label=f"{env} success ({window} of its steps)",
        )
    ax.set_ylabel("reward")
    ax.set_ylim(-0.05, max(1.05, max(values) + 0.05))
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if explored:  # exploration: does the policy still vary, and do groups still carry signal?
        low = axes[1][0]
        for key in explored:
            low.plot(
                *zip(*reward_curve(history, key)),
                EXPLORATION_KEYS[key][0],
                alpha=0.6,
                label=EXPLORATION_KEYS[key][1],
            )
        low.set_ylabel("nats/token, share of groups")
        low.grid(alpha=0.3)
        low.legend(loc="upper right", fontsize=8)
    axes[-1][0].set_xlabel("training step")
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


class StepBoundary(TrainerCallback):
    """Knows whether the weights in memory are exactly those after `state.global_step`
    steps (they are, except between the optimizer step and the step's end)."""

    def __init__(self) -> None:
        self.updating = False

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.updating = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.updating = False


def save_finished_steps(trainer: Any, boundary: StepBoundary) -> Checkpoint | None:
    """On an interrupt: checkpoint the steps finished since the last checkpoint, when the
    weights in memory are a step boundary's. Returns the newest checkpoint."""
    # transformers' tqdm bar: closed before the last line
    for callback in trainer.callback_handler.callbacks:
        bar = getattr(callback, "training_bar", None)
        if bar is not None:
            bar.close()
            callback.training_bar = None
    out = Path(trainer.args.output_dir)
    latest = latest_checkpoint(out)
    step = int(trainer.state.global_step)
    if step > 0 and not boundary.updating and (latest is None or latest.step < step):
        trainer._save_checkpoint(trainer.model, trial=None)
        latest = latest_checkpoint(out)
    return latest
