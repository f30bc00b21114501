"""`envharness serve NAME`: serve an environment over OpenEnv's WebSocket + HTTP wire.

Env options come from `--option key=value` (values parsed as JSON when they parse, so
`--option max_steps=3` is an int) or from `ENVHARNESS_OPTION_<KEY>` environment
variables; flags win. The token comes from `--token` or `ENVHARNESS_TOKEN`.
"""

from __future__ import annotations

import argparse
import os
import sys

# which environment, with which options: cli/options.py, which `envharness mcp NAME` shares
from envharness.cli.options import add_env_selection, collect_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_selection(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0 exposes it)"
    )
    parser.add_argument("--port", type=int, default=8000, help="port (0: a free one; the URL is printed)")
    parser.add_argument(
        "--max-sessions", type=int, default=64, help="concurrent sessions allowed (default 64)"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        help="seconds before a silent session is closed (default 600; 0 disables)",
    )
    parser.add_argument(
        "--token", default=None, help="require `Authorization: Bearer TOKEN` (default: $ENVHARNESS_TOKEN)"
    )
    parser.add_argument(
        "--max-message-bytes", type=int, default=4 * 1024 * 1024, help="largest accepted message"
    )
    # who may call it beyond loopback (core/guards.py, docs/security.md)
    parser.add_argument(
        "--allowed-hosts",
        default="",
        metavar="H1,H2",
        help="Host names served besides loopback and the bound address ('*': any; behind a proxy or a cluster DNS name)",
    )
    parser.add_argument(
        "--allowed-origins",
        default="",
        metavar="O1,O2",
        help="web page origins (https://site) allowed to call the server besides its own ('*': any)",
    )
    add_allow_null_origin(parser)
    parser.add_argument(
        "--mcp-fixed",
        default="",
        metavar="OPTION,OPTION",
        help="reset options an MCP client may not choose, e.g. seat,seed (the operator's; `train --agent` fixes both)",
    )
    parser.add_argument(
        "--ping-interval", type=float, default=20.0, help="WebSocket keepalive ping interval, seconds"
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    # the page to play by hand at /web (off unless asked; MCP at /mcp is always on)
    parser.add_argument(
        "--web", action="store_true", help="serve a page at /web to play the environment by hand"
    )
    # lifecycle: never outlive the job that started the server
    parser.add_argument(
        "--exit-with-parent",
        type=int,
        default=None,
        metavar="PID",
        help="stop (closing every browser) when process PID exits; PID is usually the parent's",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=20.0,
        help="seconds a stop may take before the server kills its browsers and exits (default 20)",
    )


def split_list(value: str) -> list[str]:
    """`a, b,c` -> ["a", "b", "c"]."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def add_allow_null_origin(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-null-origin",
        action="store_true",
        help="let --allowed-origins name 'null' (every sandboxed frame and file:// page of any site)",
    )


def checked_exposure(args: argparse.Namespace, token: str | None, prog: str) -> bool:
    """Say at start what `--allowed-hosts` / `--allowed-origins` open to the web pages the user
    visits; False, said in words, when they name the origin `null` without `--allow-null-origin`."""
    from envharness.core.guards import checked_origins, exposure_warnings

    try:
        origins = checked_origins(split_list(args.allowed_origins), allow_null=args.allow_null_origin)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return False
    for warning in exposure_warnings(split_list(args.allowed_hosts), origins, token):
        print(f"{prog}: warning: {warning}", file=sys.stderr, flush=True)
    return True


def run(args: argparse.Namespace) -> int:
    from envharness.core.registry import make_factory
    from envharness.core.server import bind_socket, create_app, serve_until_stopped, uvicorn_server

    token = args.token or os.environ.get("ENVHARNESS_TOKEN") or None
    if not checked_exposure(args, token, "envharness serve"):
        return 2
    try:
        options = collect_options(args.option, dict(os.environ))
        factory = make_factory(args.name, **options)
    except (KeyError, ValueError, TypeError, ImportError, AttributeError) as exc:
        print(f"envharness serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(
        factory,
        name=args.name,
        max_sessions=args.max_sessions,
        token=token,
        idle_timeout_s=args.idle_timeout or None,
        max_message_bytes=args.max_message_bytes,
        web=getattr(args, "web", False),
        allowed_hosts=split_list(args.allowed_hosts),
        allowed_origins=split_list(args.allowed_origins),
        allow_null_origin=args.allow_null_origin,
        mcp_fixed=split_list(args.mcp_fixed),
    )
    sock = bind_socket(args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host
    server = uvicorn_server(
        app, ping_interval_s=args.ping_interval, ping_timeout_s=args.ping_interval, log_level=args.log_level
    )
    print(
        f"envharness serve: {args.name} listening on http://{host}:{sock.getsockname()[1]}"
        f"{' (bearer token required)' if token else ''}",
        flush=True,
    )
    if getattr(args, "web", False):
        print(
            f"envharness serve: play it by hand at http://{host}:{sock.getsockname()[1]}/web"
            f"{'?token=...' if token else ''}",
            flush=True,
        )
    from envharness.core.lifecycle import bound_shutdown, exit_with_parent

    if args.exit_with_parent is not None:
        exit_with_parent(
            args.exit_with_parent, lambda: setattr(server, "should_exit", True), name="envharness serve"
        )
    bound_shutdown(lambda: server.should_exit, args.shutdown_timeout)
    serve_until_stopped(server, sock)
    sessions = app.state.sessions
    print(
        f"envharness serve: stopped; {sessions.sessions_closed} session(s) closed, "
        f"{sessions.live_environments} environment(s) still open",
        flush=True,
    )
    return 0
