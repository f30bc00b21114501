"""`envharness serve | eval | train | sft | mcp | policy | replay | check`, and the commands environments
register (the browser's `browser`): one dispatcher, one module per command.

Only the chosen command's module is imported, so `envharness serve echo` never pays for
torch or TRL. Benchmarks live in `bench/` (`make bench`).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

# command -> module with `add_arguments(parser)` and `run(args) -> int`
COMMANDS = {
    "serve": ("envharness.cli.serve", "Serve an environment (OpenEnv-compatible WebSocket + HTTP)"),
    "eval": (
        "envharness.cli.eval",
        "Evaluate a model on an environment's tasks (MiniWoB++ by default) and write a report",
    ),
    "train": ("envharness.cli.train", "Train a model with TRL's GRPO through the harness"),
    "sft": (
        "envharness.cli.sft",
        "Fine-tune a model on demonstrations (the scripted policy's, or a run's successes)",
    ),
    "mcp": ("envharness.cli.mcp", "Serve an environment's tools to an MCP client over stdio"),
    "policy": (
        "envharness.cli.policy",
        "Serve a model as an OpenAI-compatible endpoint that records each rollout's exact tokens",
    ),
    "replay": (
        "envharness.cli.replay",
        "Replay a run's recorded episodes on a fresh server and report any that come out different",
    ),
    "check": (
        "envharness.cli.check",
        "Check an environment's contract (reset, step, bad actions, tasks), or its adversarial floor (--floor)",
    ),
}


def all_commands() -> dict[str, tuple[str, str]]:
    """The commands above, then those environments register (`EnvSpec.commands`)."""
    from envharness.core.registry import ENVIRONMENTS

    commands = dict(COMMANDS)
    for spec in ENVIRONMENTS.values():
        for name, module, help_text in spec.commands:
            commands.setdefault(name, (module, help_text))
    return commands


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="envharness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = argv[0] if argv else None
    for name, (module_name, help_text) in all_commands().items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name != chosen:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional extra is missing: say which
            sp.set_defaults(
                _missing=f"`envharness {name}` is unavailable ({exc}); "
                f"install the extras: pip install 'envharness[all]'"
            )
            continue
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run, _argv=argv)  # _argv: for the resume line of an interrupted run
        if hasattr(module, "check_args"):  # choices that depend on other flags (--prompt on --env)
            sp.set_defaults(_check=lambda args, sp=sp, check=module.check_args: check(sp, args))
    args = parser.parse_args(argv)
    if getattr(args, "_check", None):
        args._check(args)
    if getattr(args, "_missing", None):
        print(args._missing, file=sys.stderr)
        return 2
    code = int(args._run(args) or 0)
    if from_command_line:  # the process ends next: its teardown need not garbage-collect a model's
        gc.freeze()  # heap object by object (seconds after `train`)
    return code


if __name__ == "__main__":
    sys.exit(main())
