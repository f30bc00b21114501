"""`envharness serve NAME`: serve an environment over OpenEnv's WebSocket + HTTP wire.

Env options come from `--option key=value` (values parsed as JSON when they parse, so
`--option max_steps=3` is an int) or from `ENVHARNESS_OPTION_<KEY>` environment
variables; flags win. The token comes from `--token` or `ENVHARNESS_TOKEN`.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import ClassVar

from envharness.cli import exposure
from envharness.cli.declared import add_declared, from_args
from envharness.cli.exposure import ExposureArgs, names

# which environment, with which options: cli/options.py, which `envharness mcp NAME` shares
from envharness.cli.options import add_env_selection, collect_options
from envharness.core.declared import check_options, group_values, option


@dataclass(frozen=True)
class AppArgs(ExposureArgs):
    """What `create_app` (core/server.py) takes, each option declared once and passed on by
    its name."""

    group: ClassVar[str] = "server"

    max_sessions: int = option(64, "concurrent sessions allowed (default 64)", minimum=1)
    idle_timeout_s: float | None = option(
        600.0,
        "seconds before a silent session is closed (default 600; 0 disables)",
        flags=("--idle-timeout",),
        minimum=0,
        from_cli=lambda seconds: seconds or None,
    )
    token: str | None = option(None, "require `Authorization: Bearer TOKEN` (default: $ENVHARNESS_TOKEN)")
    max_message_bytes: int = option(4 * 1024 * 1024, "largest accepted message", minimum=1)
    #: The page to play by hand at /web (off unless asked; MCP at /mcp is always on).
    web: bool = option(False, "serve a page at /web to play the environment by hand")
    mcp_fixed: list[str] = option(
        [],
        "reset options an MCP client may not choose, e.g. seat,seed (the operator's; `train --agent` fixes both)",
        type=names,
        metavar="OPTION,OPTION",
    )


@dataclass(frozen=True)
class ServeConfig(AppArgs):
    """`envharness serve`: where it listens, the app's options, and its lifecycle."""

    host: str = exposure.host()
    port: int = option(8000, "port (0: a free one; the URL is printed)", minimum=0)
    ping_interval: float = option(20.0, "WebSocket keepalive ping interval, seconds", positive=True)
    log_level: str = option("warning", "uvicorn log level")
    #: Lifecycle: never outlive the job that started the server.
    exit_with_parent: int | None = option(
        None,
        "stop (closing every browser) when process PID exits; PID is usually the parent's",
        type=int,
        metavar="PID",
    )
    shutdown_timeout: float = option(
        20.0, "seconds a stop may take before the server kills its browsers and exits (default 20)", minimum=0
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_selection(parser)
    add_declared(parser, ServeConfig)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The `ServeConfig` the command line describes (the token: `--token` or $ENVHARNESS_TOKEN),
    its bounds and rules checked (ValueError in words)."""
    token = args.token or os.environ.get("ENVHARNESS_TOKEN") or None
    config = from_args(ServeConfig, args, token=token)
    check_options(config)
    return config


def run(args: argparse.Namespace) -> int:
    from envharness.core.registry import make_factory
    from envharness.core.server import bind_socket, create_app, serve_until_stopped, uvicorn_server

    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"envharness serve: {exc}", file=sys.stderr)
        return 2
    config.say_exposure(config.token, "envharness serve")
    try:
        options = collect_options(args.option, dict(os.environ))
        factory = make_factory(args.name, **options)
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        print(f"envharness serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(factory, name=args.name, **group_values(config, AppArgs))
    sock = bind_socket(config.host, config.port)
    host = f"[{config.host}]" if ":" in config.host else config.host
    server = uvicorn_server(
        app,
        ping_interval_s=config.ping_interval,
        ping_timeout_s=config.ping_interval,
        log_level=config.log_level,
    )
    token = " (bearer token required)" if config.token else ""
    print(
        f"envharness serve: {args.name} listening on http://{host}:{sock.getsockname()[1]}{token}", flush=True
    )
    if config.web:
        print(
            f"envharness serve: play it by hand at http://{host}:{sock.getsockname()[1]}/web"
            f"{'?token=...' if config.token else ''}",
            flush=True,
        )
    from envharness.core.lifecycle import bound_shutdown, exit_with_parent

    if config.exit_with_parent is not None:
        exit_with_parent(
            config.exit_with_parent, lambda: setattr(server, "should_exit", True), name="envharness serve"
        )
    bound_shutdown(lambda: server.should_exit, config.shutdown_timeout)
    serve_until_stopped(server, sock)
    sessions = app.state.sessions
    print(
        f"envharness serve: stopped; {sessions.sessions_closed} session(s) closed, "
        f"{sessions.live_environments} environment(s) still open",
        flush=True,
    )
    return 0
