"""What the commands share beyond their declared options (`core/declared.py`, read by
`cli/declared.py`): the help texts that depend on what is installed, refusing what only the
machine or the environment can refuse (a device, a prompt style), torch's threads, and
`serve NAME --option KEY=VALUE` (`serve`, `mcp`).

`serve` and `mcp` read this module too and must start fast: the registry, the prompt styles
and the device module are imported by the helpers that need them.
"""

from __future__ import annotations

import argparse
from typing import Any

from envharness.core.declared import json_or_text, key_values


def help_values() -> dict[str, str]:
    """What declared help texts say that depends on what is installed: the environments and
    the prompt styles."""
    from envharness.core.registry import ENVIRONMENTS
    from envharness.prompts import prompt_styles

    return {
        "environments": ", ".join(
            f"{n} ({s.summary})" if s.summary else n for n, s in ENVIRONMENTS.items() if s.harness
        ),
        "prompt_styles": "; ".join(f"{s.name}: {s.description}" for s in prompt_styles()),
    }


def resume_needs_out(args: argparse.Namespace) -> None:
    """`--resume` continues a run folder named with `--out` (`train`, `sft`): without one, the
    folder would be a new one named after the time (ValueError in words)."""
    if args.resume and not args.out:
        raise ValueError("--resume needs --out (the run folder to continue)")


def check_prompt(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse an unknown `--prompt` of `--env` as argparse refuses a bad choice (exit 2)."""
    from envharness.prompts import get_prompt_style

    if not args.prompt or ":" in args.prompt:  # module:function builders are imported when the run is checked
        return
    try:
        get_prompt_style(args.prompt, args.env)
    except (ValueError, KeyError, ImportError, AttributeError) as exc:
        parser.error(f"argument --prompt: {exc}")


def set_threads(threads: int | None) -> None:
    """Apply `--threads` (torch is imported only when asked)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError("--threads must be at least 1")
    import torch

    torch.set_num_threads(threads)


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


#: An option's value from the command line: JSON when it parses, the text otherwise.
parse_value = json_or_text


def collect_options(pairs: list[str], environ: dict[str, str]) -> dict[str, Any]:
    """Env options from `ENVHARNESS_OPTION_<KEY>` variables, then `--option KEY=VALUE` (flags win)."""
    options = {
        k[len(OPTION_ENV_PREFIX) :].lower(): parse_value(v)
        for k, v in environ.items()
        if k.startswith(OPTION_ENV_PREFIX)
    }
    options.update(key_values(pairs, "--option"))
    return options
