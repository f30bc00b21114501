"""Options shared by `envharness serve | eval | train | sft | policy | check | mcp`.

The options of runs are declared once, as fields (`harness/run_options.py`, read by
`cli/declared.py`); the helpers here add one of those declarations to a command that has no
configuration class of its own (`check`, `policy`), refuse what only the machine or the
environment can refuse (a device, a prompt style), and read `serve NAME --option KEY=VALUE`.

`serve` and `mcp` read this module too and must start fast: the registry, the prompt styles,
the device module and the declarations are imported by the helpers that need them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from envharness.core.declared import json_or_text, key_values


def names(text: str) -> list[str]:
    """'a, b,,c' -> ['a', 'b', 'c'] (`harness/run_options.names`)."""
    from envharness.harness.run_options import names

    return names(text)


def _shared() -> Any:
    from envharness.harness import run_options

    return run_options


def add_field(parser: argparse.ArgumentParser, name: str, field: Any, **given: Any) -> None:
    from envharness.cli.declared import add_field

    add_field(parser, name, field, **given)


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


def add_env_options(parser: argparse.ArgumentParser) -> None:
    add_field(parser, "env_options", _shared().env_options())


def env_options(pairs: list[str]) -> dict[str, Any]:
    """`--env-option KEY=VALUE` pairs as options (values parsed as JSON when they parse)."""
    return _shared().key_values(pairs)


def add_tasks(parser: argparse.ArgumentParser, default: Sequence[str] = ()) -> None:
    add_field(parser, "tasks", _shared().tasks(), default=list(default))


def add_model(parser: argparse.ArgumentParser, default: str) -> None:
    add_field(parser, "model", _shared().model(default))


def add_env_url(parser: argparse.ArgumentParser) -> None:
    add_field(parser, "env_url", _shared().env_url())


def add_seed(parser: argparse.ArgumentParser, default: int, help_text: str) -> None:
    add_field(parser, "seed", _shared().seed(default, help_text))


def add_threads(parser: argparse.ArgumentParser) -> None:
    add_field(parser, "threads", _shared().threads())


def add_device(parser: argparse.ArgumentParser, training: bool = False) -> None:
    """`--device` and `--dtype`: where a local model runs (models/device.py)."""
    add_field(parser, "device", _shared().device())
    add_field(parser, "dtype", _shared().dtype(training))


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
