#!/usr/bin/env python3
"""Teach a small model the tool-call form TRL's `environment_factory` plays: SFT on scripted calls.

    python examples/tool_call_sft.py --out runs/tool-sft                  # the embedded model
    python examples/tool_call_sft.py --model tiny --demos 2 --steps 1 --out /tmp/x   # a smoke check
    python bench/bench_trl_tool_calls.py --model embedded,runs/tool-sft --conditions after

On TRL's tool loop only a call written in the chat template's form is played, and the 135M
model writes none (docs/results.md). The demonstrations are what TRL would show it: for each
training seed (3,000,000 up, apart from the bench's 1,000,000 up), the adapter's environment is
reset, its opening (`reset()`'s text) is the user turn, the environment's scripted policy gives
the action for that page, parsed to a tool call by the environment's `tool_call_parser`, and
the call is kept only if playing it solves the page. The prompt is rendered with the methods
as `tools=` by the tokenizer's tool template, exactly as the bench and TRL render it; the
completion is the call as the same template writes it. TRL's `SFTTrainer` trains on the
completion only, for one epoch by default, and stops early once a logged step reaches
`--stop-accuracy` (a policy that always decodes the same call gives GRPO groups no signal).
The model and its tokenizer (tool template included) are saved to `--out`, with the
demonstrations (`demonstrations.jsonl`) and the steps' loss and token accuracy
(`tool_call_sft.json`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ENV = "browsergym"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="embedded, tiny, or a model directory")
    p.add_argument("--tasks", default="click-test,click-button,click-link,focus-text")
    p.add_argument("--demos", type=int, default=32, help="demonstrations to collect")
    p.add_argument("--first-seed", type=int, default=3_000_000)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=-1, help="optimizer steps (overrides --epochs)")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument(
        "--stop-accuracy", type=float, default=1.0, help="stop once a step's token accuracy reaches it"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--base-url", default=None, help="a running browsergym server (default: start one)")
    p.add_argument("--out", required=True, help="where the model and tokenizer are saved")
    return p.parse_args(argv)


def render(
    tokenizer: Any, opening: str, methods: list[Any], name: str, arguments: dict[str, Any]
) -> dict[str, str]:
    """(prompt, completion) text: the prompt as TRL renders the first turn, the completion the
    assistant's call as the same template writes it (ending at its end-of-turn token)."""
    user = [{"role": "user", "content": opening}]
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }
    prompt = tokenizer.apply_chat_template(user, tools=methods, tokenize=False, add_generation_prompt=True)
    whole = tokenizer.apply_chat_template([*user, call], tools=methods, tokenize=False)
    if not whole.startswith(prompt):
        raise ValueError("the chat template renders the prompt differently alone and before a reply")
    return {"prompt": prompt, "completion": whole[len(prompt) :].rstrip("\n")}


def collect(
    tokenizer: Any, base_url: str, tasks: list[str], n: int, first_seed: int
) -> tuple[list[dict], dict]:
    """`n` demonstrations over `tasks` in turn, and per task how many pages had none (no
    scripted move, a move that is not one of the tools, or one that does not solve the page)."""
    from envharness.core.registry import env_harness
    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.integrations.trl.environment import environment_factory

    harness = env_harness(ENV)
    demos: list[dict] = []
    skipped = {task: 0 for task in tasks}
    with environment_factory(
        ENV, functools.partial(BrowserGymEnv, base_url=base_url), tokenizer=tokenizer
    ) as factory:
        env = factory()
        names = {t["name"] for t in env.tools}
        methods = [getattr(env, t["name"]) for t in env.tools]  # as TRL and the bench list them
        for i in range(n * 4):
            if len(demos) == n:
                break
            task, seed = tasks[i % len(tasks)], first_seed + i
            opening = env.reset(task=task, seed=seed)
            try:  # the page as the session's messages hold it (the opening adds the instruction)
                action = harness.scripted_policy(env.messages)
            except ValueError:
                skipped[task] += 1
                continue
            call = harness.tool_call_parser(action)
            if call.name not in names or call.metadata.get("parse_error"):
                skipped[task] += 1
                continue
            getattr(env, call.name)(**call.args)
            if env.get_reward() < 1.0:
                skipped[task] += 1
                continue
            demos.append({**render(tokenizer, opening, methods, call.name, dict(call.args)), "task": task})
    return demos, skipped


def stop_at_accuracy(threshold: float) -> Any:
    """A callback that ends training at the first logged step whose token accuracy reaches `threshold`."""
    from transformers import TrainerCallback

    class StopAtAccuracy(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if (logs or {}).get("mean_token_accuracy", 0.0) >= threshold:
                control.should_training_stop = True

    return StopAtAccuracy()


def train(model: Any, tokenizer: Any, demos: list[dict], out: Path, args: argparse.Namespace) -> list[dict]:
    """SFT on the completions only; returns the logged steps (loss, token accuracy)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=args.epochs,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        completion_only_loss=True,  # the prompt (the opening and the tool schemas) carries no loss
        max_length=4096,  # the whole prompt: ~830 tokens with the tool schemas
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    rows = [{"prompt": d["prompt"], "completion": d["completion"]} for d in demos]
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[stop_at_accuracy(args.stop_accuracy)],
    )
    trainer.train()
    return [h for h in trainer.state.log_history if "loss" in h]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from envharness.core.launchers import LocalServer
    from envharness.integrations.trl.environment import load_model
    from envharness.integrations.trl.servers import train_server_options

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    model, tokenizer = load_model(args.model, tools=True)
    tasks = args.tasks.split(",")
    started = time.perf_counter()
    with ExitStack() as stack:
        url = args.base_url or stack.enter_context(LocalServer(ENV, **train_server_options(ENV))).base_url
        demos, skipped = collect(tokenizer, url, tasks, args.demos, args.first_seed)
    collected = time.perf_counter() - started
    if not demos:
        print(f"no demonstrations: every page was skipped ({skipped})", file=sys.stderr)
        return 1
    print(f"{len(demos)} demonstrations in {collected:.0f} s; pages without one: {skipped}", flush=True)
    started = time.perf_counter()
    steps = train(model, tokenizer, demos, out, args)
    trained = time.perf_counter() - started
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for s in steps:
        print(
            f"step {s['step']}: loss {s['loss']:.3f}, token accuracy {s.get('mean_token_accuracy', float('nan')):.3f}"
        )
    summary = {
        "model": args.model,
        "demonstrations": len(demos),
        "per_task": {t: sum(d["task"] == t for d in demos) for t in tasks},
        "skipped": skipped,
        "collect_s": round(collected, 1),
        "train_s": round(trained, 1),
        "steps": steps,
        "example_completion": demos[0]["completion"],
    }
    (out / "tool_call_sft.json").write_text(json.dumps(summary, indent=2))
    (out / "demonstrations.jsonl").write_text("".join(json.dumps(d) + "\n" for d in demos))
    print(f"SFT: {len(steps)} steps in {trained:.0f} s; model and tokenizer in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
