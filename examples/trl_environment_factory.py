#!/usr/bin/env python3
"""TRL's own `GRPOTrainer(environment_factory=...)` on envharness environments.

    python examples/trl_environment_factory.py                      # the embedded model, 2 steps each
    python examples/trl_environment_factory.py --model tiny --steps 1   # a quick check (the test runs this)

1. One environment: MiniWoB's click-test on a browsergym server started here. No dataset:
   TRL makes rows of empty prompts, and the factory gives each group of `num_generations`
   rollouts one seed.
2. A mix: TRL's `dict` of factories over the browser and TextArena's Wordle, with
   `environment_dataset` giving each row its environment, task and seed; Wordle's shaped
   `greens` reward as one more reward column.

The model comes with a chat template that can call tools (`load_model(..., tools=True)`); the
opening each environment writes asks for tool calls in that template's form. Every episode
lands in `<out>/single/episodes.jsonl` and `<out>/mix/episodes.jsonl`, in `envharness train`'s
format: `envharness replay <out>/single` plays them again (this script does, and prints it).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="embedded, tiny, or a model directory")
    p.add_argument("--steps", type=int, default=2, help="GRPO steps of each part")
    p.add_argument("--num-generations", type=int, default=4, help="rollouts per group")
    p.add_argument("--max-completion-length", type=int, default=64)
    p.add_argument("--out", default=None, help="run folder (default runs/trl-env-<time>)")
    p.add_argument("--no-replay", action="store_true", help="skip replaying the recorded episodes")
    return p.parse_args(argv)


def grpo_args(out: Path, args: argparse.Namespace, groups: int, **more):
    import torch
    from trl import GRPOConfig

    gpu = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(out),
        max_steps=args.steps,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.num_generations * groups,
        max_completion_length=args.max_completion_length,
        max_tool_calling_iterations=4,
        learning_rate=1e-6,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        use_cpu=not gpu,  # float32 on a CPU, bf16 on a GPU
        bf16=gpu,
        **more,
    )


def one_environment(model, tokenizer, browser_url: str, out: Path, args: argparse.Namespace) -> None:
    """click-test, no dataset: the environment owns the data."""
    from trl import GRPOTrainer

    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.integrations.trl.environment import EpisodeLog, close_at_train_end, environment_factory

    factory = environment_factory(
        "browsergym",
        functools.partial(BrowserGymEnv, base_url=browser_url),
        task="click-test",
        tokenizer=tokenizer,  # the opening shows a call in this template's form
        num_generations=args.num_generations,  # one seed per group
        log=EpisodeLog(out),
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=factory,  # get_reward is the reward column (BrowserGymToolEnv)
        args=grpo_args(out, args, groups=2),
        callbacks=[close_at_train_end(factory)],
    )
    trainer.train()


def mix(model, tokenizer, browser_url: str, wordle_url: str, out: Path, args: argparse.Namespace) -> None:
    """The browser and Wordle in one run: TRL's dict of factories and a routing dataset."""
    from trl import GRPOTrainer

    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.envs.textarena import TextArenaEnv
    from envharness.integrations.trl.environment import (
        EpisodeLog,
        close_at_train_end,
        environment_dataset,
        environment_factory,
        reward_funcs,
    )

    log = EpisodeLog(out)
    factories = {
        "browsergym": environment_factory(
            "browsergym", functools.partial(BrowserGymEnv, base_url=browser_url), tokenizer=tokenizer, log=log
        ),
        "textarena": environment_factory(
            "textarena",
            functools.partial(TextArenaEnv, base_url=wordle_url),
            task="Wordle-v0",
            tokenizer=tokenizer,
            log=log,
        ),
    }
    dataset = environment_dataset(
        {"textarena": ["Wordle-v0"], "browsergym": ["click-test", "click-button"]}, 32
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=factories,
        train_dataset=dataset,  # each row: environment, task, seed (one per group)
        reward_funcs=reward_funcs("textarena", "greens"),  # besides each environment's get_reward
        args=grpo_args(out, args, groups=2, shuffle_dataset=False),  # the environments take turns
        callbacks=[close_at_train_end(factories)],
    )
    trainer.train()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from envharness.core.launchers import LocalServer
    from envharness.integrations.trl.environment import load_model
    from envharness.integrations.trl.servers import train_server_options
    from envharness.replay import replay_run

    out = Path(args.out or time.strftime("runs/trl-env-%Y%m%d-%H%M%S"))
    model, tokenizer = load_model(args.model, tools=True)  # a chat template that can call tools
    with ExitStack() as servers:  # started as `envharness train` starts them, so replay matches
        browser = servers.enter_context(LocalServer("browsergym", **train_server_options("browsergym")))
        wordle = servers.enter_context(LocalServer("textarena", **train_server_options("textarena")))
        one_environment(model, tokenizer, browser.base_url, out / "single", args)
        mix(model, tokenizer, browser.base_url, wordle.base_url, out / "mix", args)
    for part in ("single", "mix"):
        records = (out / part / "episodes.jsonl").read_text().splitlines()
        line = f"{part}: {len(records)} episodes in {out / part / 'episodes.jsonl'}"
        if not args.no_replay:
            report = replay_run(out / part)
            line += f"; replay: {report.identical} of {len(report.episodes)} identical"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
