"""The options every command that plays episodes shares (`eval`, `train`, `sft`), declared once
(`core/declared.py`): each function is one option's declaration, with the command's default
and, where commands differ, its own words. Older spellings stay as aliases (`--task`,
`--output-dir`, `--max-steps`, `--max-completion-length`)."""

from __future__ import annotations

import argparse
from typing import Any

from envharness.core.declared import key_values, option
from envharness.core.registry import DEFAULT_ENV
from envharness.models.device import DEVICE_CHOICES, DTYPE_CHOICES

#: What `--model` accepts, in every command (each command says which it cannot use).
MODEL_SPECS = (
    "embedded (SmolLM2-135M-Instruct, offline), tiny (random weights, for smoke tests), scripted "
    "(the environment's scripted policy; eval only), a model directory (e.g. a `train --out X` run's X/final) "
    "or hub id, openai:MODEL@BASE_URL, trl-vllm:URL (eval only)"
)


def names(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    return [t.strip() for t in text.split(",") if t.strip()]


class ExtendNames(argparse.Action):
    """Comma-separated names, repeatable: `--tasks a,b --task c` -> [a, b, c] (replaces the default)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, items + names(values))


def env(default: str = DEFAULT_ENV) -> Any:
    return option(
        default,
        "the environment: {environments}, or module.path:attribute of an EnvSpec (default: %(default)s)",
        metavar="NAME",
    )


def env_options() -> Any:
    return option(
        {},
        "an option of the environment server (`serve NAME --option KEY=VALUE`): the server the run "
        "starts gets it, and the task list follows it (e.g. tasks=mypkg.webtasks for your own web tasks); "
        "with --env-url, say what that server was started with (repeatable)",
        flags=("--env-option",),
        dest="env_options",
        action="append",
        cli_default=[],
        metavar="KEY=VALUE",
        from_cli=key_values,
    )


def tasks() -> Any:
    return option(
        [],
        "the environment's tasks, comma-separated and/or repeated; a split name or `all` takes "
        "every task of it (default: the environment's default tasks)",
        flags=("--tasks", "--task"),
        action=ExtendNames,
        metavar="TASK[,TASK]",
    )


def model(default: str) -> Any:
    return option(default, f"{MODEL_SPECS} (default: %(default)s)", metavar="SPEC")


def prompt(default: str = "") -> Any:
    return option(
        default,
        "prompt style of the environment, the same in eval and train ({prompt_styles}), "
        "or module.path:function (default: the environment default)",
        type=str.strip,
        metavar="STYLE",
    )


def out(default: str, what: str, default_text: str, stamp: str) -> Any:
    """`--out DIR`; without it, a folder named after the time (`stamp`, a strftime pattern)."""
    import time

    return option(
        default,
        f"run folder: {what} (default {default_text})",
        flags=("--out", "--output-dir"),
        dest="out",
        cli_default=None,
        metavar="DIR",
        from_cli=lambda value: value or time.strftime(stamp),
    )


def env_url() -> Any:
    return option(None, "a running `envharness serve ENV` (default: start one on loopback)", metavar="URL")


def seed(default: int, help: str) -> Any:
    return option(default, f"{help} (default %(default)s)", metavar="N")


def max_turns(default: int) -> Any:
    return option(
        default,
        "model turns (actions, moves) per episode (default %(default)s)",
        flags=("--max-turns", "--max-steps"),
        metavar="N",
        minimum=1,
    )


def max_new_tokens(default: int) -> Any:
    return option(
        default,
        "tokens per model reply (default %(default)s)",
        flags=("--max-new-tokens", "--max-completion-length"),
        metavar="N",
        minimum=1,
    )


def temperature(default: float, help: str = "sampling temperature", **bounds: Any) -> Any:
    return option(default, f"{help} (default %(default)s)", metavar="T", **bounds)


def threads() -> Any:
    return option(
        None,
        "torch CPU threads for local models (1 is fastest when other jobs share the cores)",
        type=int,
        metavar="N",
        minimum=1,
    )


def device() -> Any:
    return option(
        "auto",
        f"where a local model runs: {DEVICE_CHOICES} (default auto: the GPU when torch sees one)",
        type=str.strip,
        metavar="DEVICE",
    )


def dtype(training: bool) -> Any:
    precision = (
        "the precision of the forward passes: the weights stay float32 and bfloat16/float16 run as mixed precision"
        if training
        else "the model's weights and compute"
    )
    return option(
        "auto",
        f"{precision}: {', '.join(DTYPE_CHOICES)} (default auto: bfloat16 on a GPU that has it, "
        "float32 on a CPU; only float32 keeps sampled and recomputed logprobs equal)",
        type=str.strip,
        metavar="DTYPE",
    )


def env_urls() -> Any:
    return option(
        [],
        "comma-separated running `envharness serve ENV` servers to spread episodes over (no Ray needed)",
        type=names,
    )


def servers() -> Any:
    return option(0, "run N environment servers on Ray and spread episodes over them", minimum=0)


def ray_address() -> Any:
    return option(
        None,
        "the Ray cluster for --servers ('auto', HOST:6379, ray://HOST:10001; default: start Ray on this machine)",
    )


def screenshot_max_side(default: int | None, help: str, **bounds: Any) -> Any:
    return option(default, help, type=int, from_cli=lambda value: value or None, **bounds)


def resume(help: str) -> Any:
    return option(False, help)


def resume_or_overwrite(resume: bool, overwrite: bool | None) -> None:
    """`--resume` and `--overwrite` (of a command that has both) are a ValueError together."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other")


def eval_every(what: str) -> Any:
    """Held-out evaluation during a run (`train`, `sft`): `what` says what it logs beside it."""
    return option(
        0,
        "every N steps, greedy episodes on held-out seeds of every trained task and of "
        f"--eval-tasks, logged beside {what}; the best model is kept in <out>/best",
        metavar="N",
        minimum=0,
    )


def eval_tasks() -> Any:
    return option(
        [], "comma-separated transfer tasks (never trained) that --eval-every also plays", type=names
    )


def eval_episodes() -> Any:
    return option(8, "held-out seeds per task for --eval-every", minimum=1)


def eval_on_start() -> Any:
    """TrainingArguments' `eval_on_start`: the starting model is the first candidate for best/."""
    return option(
        False,
        "with --eval-every, evaluate the starting model too (step 0), so that <out>/best is "
        "never worse than where the run began",
    )


def opponent() -> Any:
    return option(
        "",
        "who plays the seats of a multi-player game the model does not: random (a legal move), "
        "scripted (the game's scripted player), self (the model itself) or a --model spec "
        "(default: nobody, the game must be single-player)",
        type=str.strip,
        metavar="SPEC",
    )


def seat() -> Any:
    return option(
        "alternate",
        "the seat the model plays beside --opponent: a player number, alternate (seed modulo "
        "the players, so the first mover's edge cancels) or random (drawn from the seed) "
        "(default %(default)s)",
        type=str.strip,
        metavar="0|1|alternate|random",
    )
