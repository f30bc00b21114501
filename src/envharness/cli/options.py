"""Options shared by `envharness serve | eval | train | mcp`: one definition per idea.

The same flag means the same thing, with the same choices, in every command: `--tasks a,b`,
`--out DIR`, `--model SPEC`, `--prompt STYLE`, `--env-url`, `--seed`, `--max-turns`,
`--max-new-tokens`, `--temperature`, `--threads`. Older spellings stay as aliases
(`--task X` repeatable, `--output-dir`, `--max-steps`, `--max-completion-length`).
Each helper takes the command's default and a help text where they differ.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

#: What `--model` accepts, in every command (each command says which it cannot use).
MODEL_SPECS = (
    "embedded (SmolLM2-135M-Instruct, offline), tiny (random weights, for smoke tests), scripted "
    "(the environment's scripted policy; eval only), a model directory (e.g. a `train --out X` run's X/final) "
    "or hub id, openai:MODEL@BASE_URL, trl-vllm:URL (eval only)"
)


def names(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c']."""
    return [t.strip() for t in text.split(",") if t.strip()]


class _ExtendNames(argparse.Action):
    """Comma-separated names, repeatable: `--tasks a,b --task c` -> [a, b, c] (replaces the default)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, items + names(values))


def help_values() -> dict[str, str]:
    """What declared help texts (`harness/run_options.py`) say that depends on what is installed:
    the environments and the prompt styles."""
    from envharness.core.registry import ENVIRONMENTS
    from envharness.prompts import prompt_styles

    return {
        "environments": ", ".join(
            f"{n} ({s.summary})" if s.summary else n for n, s in ENVIRONMENTS.items() if s.harness
        ),
        "prompt_styles": "; ".join(f"{s.name}: {s.description}" for s in prompt_styles()),
    }


def add_env(parser: argparse.ArgumentParser) -> None:
    from envharness.core.registry import ENVIRONMENTS

    known = ", ".join(f"{n} ({s.summary})" if s.summary else n for n, s in ENVIRONMENTS.items() if s.harness)
    parser.add_argument(
        "--env",
        default="browsergym",
        metavar="NAME",
        help=f"the environment: {known}, or module.path:attribute of an EnvSpec (default: browsergym)",
    )


def add_env_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-option",
        dest="env_options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the environment server (`serve NAME --option KEY=VALUE`): the server the run "
        "starts gets it, and the task list follows it (e.g. browsergym's tasks=mypkg.webtasks); "
        "with --env-url, say what that server was started with (repeatable)",
    )


def env_options(pairs: list[str]) -> dict[str, Any]:
    """`--env-option KEY=VALUE` pairs as options (values parsed as JSON when they parse)."""
    return collect_options(pairs, {}) if pairs else {}


def add_tasks(parser: argparse.ArgumentParser, default: Sequence[str] = ()) -> None:
    shown = ",".join(default) if default else "the environment's default tasks"
    parser.add_argument(
        "--tasks",
        "--task",
        dest="tasks",
        action=_ExtendNames,
        default=list(default),
        metavar="TASK[,TASK]",
        help=f"the environment's tasks, comma-separated and/or repeated; a split name or `all` takes "
        f"every task of it (default: {shown})",
    )


def add_model(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--model", default=default, metavar="SPEC", help=f"{MODEL_SPECS} (default: {default})"
    )


def add_prompt(parser: argparse.ArgumentParser, default: str) -> None:
    from envharness.prompts import prompt_styles

    styles = "; ".join(f"{s.name}: {s.description}" for s in prompt_styles())
    parser.add_argument(
        "--prompt",
        default=default,
        type=str.strip,
        metavar="STYLE",
        help=f"prompt style of the environment, the same in eval and train (the browser's: {styles}), "
        f"or module.path:function (default: {default or 'the environment default'})",
    )


def check_prompt(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an unknown `--prompt` of `--env` as argparse refuses a bad choice (exit 2)."""
    from envharness.prompts import get_prompt_style

    if not args.prompt or ":" in args.prompt:  # module:function builders are imported when the run is checked
        return
    try:
        get_prompt_style(args.prompt, getattr(args, "env", None))
    except (ValueError, KeyError, ImportError, AttributeError) as exc:
        parser.error(f"argument --prompt: {exc}")


def add_out(parser: argparse.ArgumentParser, what: str, default_text: str) -> None:
    parser.add_argument(
        "--out",
        "--output-dir",
        dest="out",
        default=None,
        metavar="DIR",
        help=f"run folder: {what} (default {default_text})",
    )


def add_env_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-url",
        default=None,
        metavar="URL",
        help="a running `envharness serve ENV` (default: start one on loopback)",
    )


def add_fleet(parser: argparse.ArgumentParser) -> None:
    """Episodes spread over many environment servers, with failover (`envharness.fleet`)."""
    parser.add_argument(
        "--env-urls",
        type=names,
        default=[],
        help="comma-separated running `envharness serve ENV` servers to spread episodes over (no Ray needed)",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=0,
        help="run N environment servers on Ray and spread episodes over them",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="the Ray cluster for --servers ('auto', HOST:6379, ray://HOST:10001; default: start Ray on this machine)",
    )


def add_seed(parser: argparse.ArgumentParser, default: int, help_text: str) -> None:
    parser.add_argument(
        "--seed", type=int, default=default, metavar="N", help=f"{help_text} (default %(default)s)"
    )


def add_max_turns(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--max-turns",
        "--max-steps",
        dest="max_turns",
        type=int,
        default=default,
        metavar="N",
        help="model turns (actions, moves) per episode (default %(default)s)",
    )


def add_max_new_tokens(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--max-new-tokens",
        "--max-completion-length",
        dest="max_new_tokens",
        type=int,
        default=default,
        metavar="N",
        help="tokens per model reply (default %(default)s)",
    )


def add_temperature(
    parser: argparse.ArgumentParser, default: float, help_text: str = "sampling temperature"
) -> None:
    parser.add_argument(
        "--temperature", type=float, default=default, metavar="T", help=f"{help_text} (default %(default)s)"
    )


def add_threads(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch CPU threads for local models (1 is fastest when other jobs share the cores)",
    )


def set_threads(threads: int | None) -> None:
    """Apply `--threads` (torch is imported only when asked)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError("--threads must be at least 1")
    import torch

    torch.set_num_threads(threads)


def add_device(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """`--device` and `--dtype`: where a local model runs (models/device.py)."""
    from envharness.models.device import DEVICE_CHOICES, DTYPE_CHOICES

    parser.add_argument(
        "--device",
        default="auto",
        type=str.strip,
        metavar="DEVICE",
        help=f"where a local model runs: {DEVICE_CHOICES} (default auto: the GPU when torch sees one)",
    )
    precision = (
        "the precision of the forward passes: the weights stay float32 and bfloat16/float16 run as mixed precision"
        if training
        else "the model's weights and compute"
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        type=str.strip,
        metavar="DTYPE",
        help=f"{precision}: {', '.join(DTYPE_CHOICES)} (default auto: bfloat16 on a GPU that has it, "
        "float32 on a CPU; only float32 keeps sampled and recomputed logprobs equal)",
    )


def check_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a device or dtype this machine cannot give, as argparse refuses a bad choice (exit 2)."""
    from envharness.models.device import DeviceError, resolve

    try:
        resolve(args.device, args.dtype)
    except DeviceError as exc:
        parser.error(str(exc))


# -- `serve NAME` / `mcp NAME`: which environment, with which options ----------------------
OPTION_ENV_PREFIX = "ENVHARNESS_OPTION_"


def add_env_selection(parser: argparse.ArgumentParser) -> None:
    from envharness.core.registry import ENVIRONMENTS

    parser.add_argument("name", help=f"environment: {', '.join(ENVIRONMENTS)}, or module.path:attribute")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"environment option (repeatable; also ${OPTION_ENV_PREFIX}<KEY>)",
    )


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def collect_options(pairs: list[str], environ: dict[str, str]) -> dict[str, Any]:
    """Env options from `ENVHARNESS_OPTION_<KEY>` variables, then `--option KEY=VALUE` (flags win)."""
    options = {
        k[len(OPTION_ENV_PREFIX) :].lower(): parse_value(v)
        for k, v in environ.items()
        if k.startswith(OPTION_ENV_PREFIX)
    }
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--option expects KEY=VALUE, got {pair!r}")
        options[key.strip()] = parse_value(value)
    return options
