#!/usr/bin/env python3
"""Multi-turn learning: does GRPO through the harness make the GREEDY policy better at tasks
that need two or more actions? (SmolLM2-135M-Instruct, embedded, on CPU.)

    python examples/train_multiturn.py --tasks click-button-sequence,enter-text --minutes 60   # the README's run
    python examples/train_multiturn.py --minutes 2 --eval-episodes 4 --max-steps 2              # a smoke check

1. Start one browsergym server on loopback (real Chromium, real MiniWoB pages).
2. Before training, per task, on held-out seeds 0..N-1: success greedily (temperature 0) and
   sampled at the training temperature, each with its 95 % Wilson interval.
3. GRPO (TRL) through `build_harness_rollout_func` (via `envharness.integrations.trl.train`):
   every episode plays up to `--max-turns` actions; the completion TRL trains on is the exact
   multi-turn token sequence with the page text between turns masked out (`env_mask` 0).
   Training pages are drawn from seeds in [1e6, 2e6): disjoint from the evaluation seeds.
4. The same evaluation after training; `results.json`, a Markdown table, `curve.png` (reward,
   success, entropy and the share of zero-variance groups per step, and the step time split),
   and `final/`, loadable by `envharness eval --model <output-dir>/final`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from envharness.eval.stats import wilson_interval  # noqa: E402
from envharness.integrations.trl.evaluate import evaluate  # noqa: E402
from envharness.integrations.trl.loading import load_model  # noqa: E402
from envharness.integrations.trl.servers import env_clients  # noqa: E402
from envharness.integrations.trl.training import TrainConfig, train  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--tasks",
        default="click-button-sequence,enter-text",
        help="comma-separated MiniWoB tasks, trained as a mix",
    )
    p.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this many steps (default: the time budget only)",
    )
    p.add_argument(
        "--eval-episodes", type=int, default=32, help="held-out episodes per task and mode, before and after"
    )
    p.add_argument("--max-turns", type=int, default=2, help="actions per episode")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--groups-per-step", type=int, default=2)
    p.add_argument("--max-completion-length", type=int, default=20, help="tokens per model turn")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--entropy-coef", type=float, default=0.0, help="TRL's entropy bonus (0: none)")
    p.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1 is fastest on busy shared cores)"
    )
    p.add_argument("--output-dir", default=None)
    p.add_argument(
        "--reuse-before",
        default=None,
        help="results_before.json of an earlier run with the same tasks, prompt, turns, temperature and seeds "
        "(the base model does not change: skip measuring it again)",
    )
    p.add_argument(
        "--docs-png", default=None, help="also copy the curve here (e.g. docs/multiturn_curve.png)"
    )
    return p.parse_args(argv)


def rate(successes: int, n: int) -> dict[str, Any]:
    lo, hi = wilson_interval(successes, n)
    return {
        "successes": successes,
        "n": n,
        "rate": successes / n if n else 0.0,
        "ci95": [round(lo, 3), round(hi, 3)],
    }


def measure(
    model: Any,
    tokenizer: Any,
    make_client: Any,
    config: TrainConfig,
    tasks: list[str],
    seeds: list[int],
    out: Path,
    when: str,
) -> dict:
    """{task: {"greedy": rate, "sampled": rate}} on `seeds`, played exactly as in training."""
    results: dict[str, dict[str, Any]] = {}
    for task in tasks:
        results[task] = {}
        for mode, temperature in (("greedy", 0.0), ("sampled", config.temperature)):
            cfg = dataclasses.replace(config, tasks=[task], temperature=temperature)
            started = time.perf_counter()
            success = evaluate(
                model, tokenizer, make_client, cfg, seeds, records=out / f"eval_{when}_{task}_{mode}.jsonl"
            )
            results[task][mode] = rate(round(success * len(seeds)), len(seeds))
            r = results[task][mode]
            print(
                f"[eval] {when} {task} {mode}: {r['successes']}/{r['n']} = {r['rate']:.1%} "
                f"(95% CI {r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}) in {time.perf_counter() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )
    return results


def plot_curve(history: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Reward/success, entropy and zero-variance share per step, and the step time split."""
    rows = [h for h in history if "reward" in h]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in rows]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    ax.plot(steps, [h["reward"] for h in rows], "o-", alpha=0.4, label="mean reward (success) per step")
    window = 5
    values = [h["reward"] for h in rows]
    ax.plot(
        steps,
        [
            sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ],
        "-",
        linewidth=2,
        label=f"moving average ({window} steps)",
    )
    ax.plot(
        steps,
        [h.get("frac_reward_zero_std", float("nan")) for h in rows],
        "s--",
        alpha=0.5,
        label="frac_reward_zero_std",
    )
    ax.set_ylabel("share")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(title)
    ent = ax.twinx()
    ent.plot(
        steps,
        [h.get("entropy", float("nan")) for h in rows],
        "^-",
        color="tab:red",
        alpha=0.6,
        label="entropy (nats/token)",
    )
    ent.set_ylabel("entropy")
    ent.legend(loc="upper right", fontsize=8)
    for key, label in (
        ("time/generate_s", "generation"),
        ("time/env_s", "environment"),
        ("time/train_s", "loss fwd+bwd+opt"),
    ):
        ax2.plot(steps, [h.get(key, float("nan")) for h in rows], "-", label=label)
    ax2.set_xlabel("training step")
    ax2.set_ylabel("seconds per step")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def table(tasks: list[str], before: dict, after: dict, n: int) -> str:
    lines = ["| task | decoding | before (95% CI) | after (95% CI) | change |", "|---|---|---|---|---|"]
    for task in tasks:
        for mode in ("greedy", "sampled"):
            b, a = before[task][mode], after[task][mode]
            lines.append(
                f"| {task} | {mode} | {b['successes']}/{n} = {b['rate']:.1%} ({b['ci95'][0]:.0%}-{b['ci95'][1]:.0%}) "
                f"| {a['successes']}/{n} = {a['rate']:.1%} ({a['ci95'][0]:.0%}-{a['ci95'][1]:.0%}) | {100 * (a['rate'] - b['rate']):+.1f} pts |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)  # before the baseline evaluation too
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    out = Path(args.output_dir or time.strftime("runs/multiturn-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    config = TrainConfig(
        tasks=tasks,
        output_dir=str(out),
        minutes=args.minutes,
        learning_rate=args.lr,
        num_generations=args.num_generations,
        groups_per_step=args.groups_per_step,
        max_turns=args.max_turns,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        max_steps=args.max_steps or 30,
        save_steps=10_000,
        threads=args.threads,
    )
    if args.max_steps:
        config = dataclasses.replace(config, minutes=None)
    seeds = list(range(args.eval_episodes))  # training seeds are drawn from [1e6, 2e6): these are held out
    model, tokenizer = load_model("embedded")
    started = time.perf_counter()
    overrides = {"entropy_coef": args.entropy_coef} if args.entropy_coef else {}
    with env_clients("browsergym") as make_client:
        if args.reuse_before:
            before = json.loads(Path(args.reuse_before).read_text())
            for src in Path(args.reuse_before).parent.glob("eval_before_*.jsonl"):
                shutil.copyfile(src, out / src.name)
        else:
            before = measure(model, tokenizer, make_client, config, tasks, seeds, out, "before")
        (out / "results_before.json").write_text(json.dumps(before, indent=2))
        result = train(config, model=model, tokenizer=tokenizer, client_factory=make_client, **overrides)
        after = measure(result.model, tokenizer, make_client, config, tasks, seeds, out, "after")
    (out / "results_after.json").write_text(json.dumps(after, indent=2))
    # the progress log has every step's keys, including the StepTimer split added at log time
    history = [
        json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines() if line.strip()
    ]
    try:
        curve = plot_curve(history, out / "curve.png", f"GRPO, {args.max_turns} turns, on {', '.join(tasks)}")
        if args.docs_png and curve:
            shutil.copyfile(curve, args.docs_png)
    except Exception as exc:  # a plotting problem must not lose the numbers
        print(f"[plot] failed: {exc}", file=sys.stderr)
    steps = [h for h in history if "reward" in h]
    timing_keys = ("time/step_s", "time/generate_s", "time/env_s", "time/train_s", "tokens/prefill")
    results = {
        "tasks": tasks,
        "model": "SmolLM2-135M-Instruct (embedded GGUF Q4_1, dequantized to fp32), full fine-tune",
        "cpu_threads": torch.get_num_threads(),
        "machine_load_average_1_5_15min_at_end": [round(x, 1) for x in os.getloadavg()],
        "train_seconds": round(result.seconds, 1),
        "train_steps": result.steps,
        "episodes_per_step": config.num_generations * config.groups_per_step,
        "eval_seeds": f"{seeds[0]}..{seeds[-1]} per task (training seeds are drawn from [1e6, 2e6))",
        "before": before,
        "after": after,
        "curve": [
            {k: h.get(k) for k in ("step", "reward", "entropy", "frac_reward_zero_std", "loss", *timing_keys)}
            for h in steps
        ],
        "median_step_time_split": {
            k: sorted(h[k] for h in steps if k in h)[len(steps) // 2]
            for k in timing_keys
            if steps and all(k in h for h in steps)
        },
        "final_model": str(result.final_model_dir),
        "total_seconds": round(time.perf_counter() - started, 1),
        "config": dataclasses.asdict(config),
        "entropy_coef": args.entropy_coef,
        "before_reused_from": args.reuse_before,
        "no_signal_steps_skipped": sum(1 for h in steps if h.get("no_signal_skipped")),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print("\n" + table(tasks, before, after, len(seeds)))
    print(
        f"\n{result.steps} steps in {result.seconds / 60:.1f} min; results: {out / 'results.json'}; final model: {result.final_model_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
