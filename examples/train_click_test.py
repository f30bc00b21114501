#!/usr/bin/env python3
"""Proof of learning: GRPO makes SmolLM2-135M-Instruct better at a MiniWoB task, on CPU.

    python examples/train_click_test.py --task click-button --minutes 40   # the README's experiment
    python examples/train_click_test.py --minutes 3 --eval-episodes 16      # a quick end-to-end check

1. Start one browsergym server on loopback (real Chromium, real MiniWoB page).
2. Measure the success rate of the embedded SmolLM2-135M-Instruct on held-out seeds, sampling
   at the training temperature (the policy GRPO improves) and greedily (so that a gain is not
   just a sharper distribution).
3. Train with TRL's GRPO through envharness's rollout function for `--minutes`.
4. Measure again on the same held-out seeds; write `results.json` and print a table
   (`--docs-png` also copies the reward curve there, e.g. for the README).

Everything lands in `--output-dir`: `results.json`, `reward_curve.png`, `episodes.jsonl`
(every training episode), `eval_before.jsonl` / `eval_after.jsonl`, checkpoints, `final/`.
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

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from envharness.integrations.trl.evaluate import evaluate  # noqa: E402
from envharness.integrations.trl.loading import load_model  # noqa: E402
from envharness.integrations.trl.servers import env_clients  # noqa: E402
from envharness.integrations.trl.training import TrainConfig, train  # noqa: E402
from envharness.prompts import prompt_names  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="click-test", help="MiniWoB task (click-test, click-button, ...)")
    p.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    p.add_argument("--eval-episodes", type=int, default=32, help="held-out episodes before and after")
    p.add_argument(
        "--no-greedy-eval", action="store_true", help="skip the greedy (temperature 0) evaluations"
    )
    p.add_argument("--docs-png", default=None, help="also copy the reward curve to this path")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--lora", action="store_true", help="LoRA instead of a full fine-tune")
    p.add_argument("--lr", type=float, default=TrainConfig.learning_rate)
    p.add_argument("--num-generations", type=int, default=TrainConfig.num_generations)
    p.add_argument("--groups-per-step", type=int, default=TrainConfig.groups_per_step)
    p.add_argument("--max-completion-length", type=int, default=TrainConfig.max_completion_length)
    p.add_argument("--temperature", type=float, default=TrainConfig.temperature)
    p.add_argument(
        "--prompt",
        choices=prompt_names(),
        default=TrainConfig.prompt,
        help="prompt style (envharness.prompts)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is much faster when other jobs share the cores)",
    )
    p.add_argument(
        "--env-url", default=None, help="a running `envharness serve browsergym` (default: start one)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:  # before the baseline evaluation too
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.output_dir or time.strftime(f"runs/grpo-{args.task}-%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    config = TrainConfig(
        tasks=[args.task],
        output_dir=str(out),
        minutes=args.minutes,
        lora=args.lora,
        learning_rate=args.lr,
        num_generations=args.num_generations,
        groups_per_step=args.groups_per_step,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        prompt=args.prompt,
        save_steps=50,
        threads=args.threads,
    )
    seeds = list(range(args.eval_episodes))  # training seeds are drawn from [1e6, 2e6): these are held out
    model, tokenizer = load_model("embedded")
    started = time.perf_counter()
    greedy = dataclasses.replace(config, temperature=0.0)

    def measure(model: object, when: str) -> dict[str, float]:
        rates = {
            "sampled": evaluate(
                model, tokenizer, make_client, config, seeds, records=out / f"eval_{when}.jsonl"
            )
        }
        if not args.no_greedy_eval:
            rates["greedy"] = evaluate(
                model, tokenizer, make_client, greedy, seeds, records=out / f"eval_{when}_greedy.jsonl"
            )
        print(
            f"[eval] {when} training: "
            + ", ".join(f"{k} {v:.1%}" for k, v in rates.items())
            + f" success on {len(seeds)} held-out episodes",
            file=sys.stderr,
            flush=True,
        )
        return rates

    with env_clients("browsergym", args.env_url) as make_client:
        before = measure(model, "before")
        result = train(config, model=model, tokenizer=tokenizer, client_factory=make_client)
        after = measure(result.model, "after")
    results = {
        "task": args.task,
        "model": "SmolLM2-135M-Instruct (embedded GGUF Q4_1, dequantized to fp32)",
        "method": "LoRA" if args.lora else "full fine-tune",
        "cpu_threads": __import__("torch").get_num_threads(),
        "machine_load_average_1_5_15min_at_end": [round(x, 1) for x in os.getloadavg()],
        "train_minutes_budget": args.minutes,
        "train_seconds": round(result.seconds, 1),
        "train_steps": result.steps,
        "episodes_per_step": config.num_generations * config.groups_per_step,
        "eval_episodes": len(seeds),
        "eval_seeds": f"{seeds[0]}..{seeds[-1]} (training seeds are drawn from [1e6, 2e6))",
        "eval_temperature": config.temperature,
        "success_before": before,
        "success_after": after,
        "successes_before": {k: round(v * len(seeds)) for k, v in before.items()},
        "successes_after": {k: round(v * len(seeds)) for k, v in after.items()},
        "gain_points": {k: round(100 * (after[k] - before[k]), 1) for k in before},
        "reward_curve": str(result.reward_curve_path),
        "total_seconds": round(time.perf_counter() - started, 1),
        "config": dataclasses.asdict(config),
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    if args.docs_png and result.reward_curve_path:
        shutil.copyfile(result.reward_curve_path, args.docs_png)
    n = len(seeds)
    print("\n| task | steps | train time | eval | success before | success after | gain |")
    print("|---|---|---|---|---|---|---|")
    for k in before:
        print(
            f"| {args.task} | {result.steps} | {result.seconds / 60:.1f} min | {k} | {before[k]:.1%} ({round(before[k] * n)}/{n}) "
            f"| {after[k]:.1%} ({round(after[k] * n)}/{n}) | {100 * (after[k] - before[k]):+.1f} pts |"
        )
    print(f"\nresults: {out / 'results.json'}\nreward curve: {result.reward_curve_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
