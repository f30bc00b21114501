"""`envharness mcp NAME`: serve an environment's tools to a desktop MCP client over stdio.

The client starts this command itself (see the README's config snippet). Environment
options as for `serve`: `--option key=value` or `ENVHARNESS_OPTION_<KEY>`. For MCP over
HTTP instead, `envharness serve NAME` already answers at `/mcp`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from envharness.cli.options import add_env_selection, collect_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_selection(parser)  # NAME and --option, as `serve` takes them
    parser.add_argument("--log-level", default="warning", help="log level of messages on stderr")


def run(args: argparse.Namespace) -> int:
    import mcp  # noqa: F401  (fail here, with the extras hint, when the SDK is missing)

    from envharness.core.registry import make_factory
    from envharness.mcp.stdio import serve_stdio

    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    try:
        factory = make_factory(args.name, **collect_options(args.option, dict(os.environ)))
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        print(f"envharness mcp: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve_stdio(factory, args.name))
    except KeyboardInterrupt:
        pass
    return 0
