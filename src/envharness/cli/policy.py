"""`envharness policy`: a model as an OpenAI-compatible endpoint that records exact tokens per rollout.

    envharness policy --model embedded --port 9000
    curl -X POST http://127.0.0.1:9000/rollouts          # -> {"rollout_id": ..., "base_url": ".../rollouts/ID/v1"}
    # your agent: OpenAI(base_url=<that base_url>, api_key="any"); then
    curl -X POST http://127.0.0.1:9000/rollouts/ID/end; curl http://127.0.0.1:9000/rollouts/ID/sample

For developing an agent against the endpoint that `envharness train --agent` trains it
through (`policy/`). Any `--model` spec `eval` takes; `--temperature` forces one sampling
temperature on every call (what training does), unset: the agent's own.
"""

from __future__ import annotations

import argparse
import os
import sys

from envharness.cli import options
from envharness.policy.limits import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TOKENS_LIMIT, PolicyLimits


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add_model(parser, "embedded")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000, help="port (0: a free one; default %(default)s)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=256,
        metavar="N",
        help="tokens per reply when a request names none (default %(default)s)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        metavar="T",
        help="force this sampling temperature on every call (default: what each request asks)",
    )
    parser.add_argument(
        "--context-length",
        type=int,
        default=None,
        metavar="N",
        help="refuse prompts of N tokens or more (default: the model's own window)",
    )
    options.add_threads(parser)
    options.add_device(parser)
    # limits (policy/limits.py)
    parser.add_argument(
        "--token",
        default=None,
        help="require `Authorization: Bearer TOKEN` on the driver's routes, and the token or a rollout's own "
        "api_key on agents' calls (default: $ENVHARNESS_TOKEN; none: open, on loopback by default)",
    )
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=DEFAULT_MAX_REQUEST_BYTES,
        metavar="N",
        help="largest request body accepted (default %(default)s: room for screenshots)",
    )
    parser.add_argument(
        "--max-tokens-limit",
        type=int,
        default=DEFAULT_MAX_TOKENS_LIMIT,
        metavar="N",
        help="the most tokens one reply may ask for (max_tokens); more: context_length_exceeded (default %(default)s)",
    )
    parser.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        metavar="N",
        help="refuse prompts of more than N tokens, longer ones unread (default: the context less one)",
    )
    parser.add_argument(
        "--allowed-hosts",
        default="",
        metavar="H1,H2",
        help="Host names served besides loopback and the bound address ('*': any)",
    )
    parser.add_argument(
        "--allowed-origins",
        default="",
        metavar="O1,O2",
        help="web page origins allowed to call the endpoint besides its own ('*': any)",
    )
    from envharness.cli.serve import add_allow_null_origin

    add_allow_null_origin(parser)
    parser.add_argument(
        "--max-calls-per-rollout",
        type=int,
        default=PolicyLimits.max_calls_per_rollout,
        metavar="N",
        help="model calls one rollout may make (default %(default)s; 0: no limit)",
    )
    parser.add_argument(
        "--rollout-idle-timeout",
        type=float,
        default=PolicyLimits.rollout_idle_s,
        metavar="S",
        help="end a rollout no call reached for S seconds (default %(default)s; 0: never)",
    )


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_device(parser, args)
    if args.max_request_bytes < 1024 or args.max_calls_per_rollout < 0 or args.rollout_idle_timeout < 0:
        parser.error(
            "--max-request-bytes must be at least 1024; --max-calls-per-rollout and --rollout-idle-timeout not negative"
        )
    if args.max_tokens_limit < 1:
        parser.error("--max-tokens-limit must be at least 1")
    if args.max_prompt_tokens is not None and args.max_prompt_tokens < 1:
        parser.error("--max-prompt-tokens must be at least 1")


def run(args: argparse.Namespace) -> int:
    from envharness.cli.serve import checked_exposure, split_list
    from envharness.core.server import bind_socket, serve_until_stopped, uvicorn_server
    from envharness.models import load_backend
    from envharness.policy.app import create_policy_app
    from envharness.policy.endpoint import PolicyEndpoint

    token = args.token or os.environ.get("ENVHARNESS_TOKEN") or None
    if not checked_exposure(args, token, "envharness policy"):
        return 2
    options.set_threads(args.threads)
    try:
        backend = load_backend(args.model, device=args.device, dtype=args.dtype)
    except (ValueError, OSError, ImportError, RuntimeError) as exc:
        print(f"envharness policy: {exc}", file=sys.stderr)
        return 2
    sampling = {"temperature": args.temperature} if args.temperature is not None else None
    limits = PolicyLimits(
        token=token,
        max_request_bytes=args.max_request_bytes,
        max_calls_per_rollout=args.max_calls_per_rollout or None,
        rollout_idle_s=args.rollout_idle_timeout or None,
        max_tokens_limit=args.max_tokens_limit,
        max_prompt_tokens=args.max_prompt_tokens,
    )
    endpoint = PolicyEndpoint(
        backend,
        sampling=sampling,
        default_max_tokens=args.max_new_tokens,
        context_length=args.context_length,
        limits=limits,
    )
    sock = bind_socket(args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host
    app = create_policy_app(
        endpoint,
        allowed_hosts=split_list(args.allowed_hosts),
        allowed_origins=split_list(args.allowed_origins),
        allow_null_origin=args.allow_null_origin,
    )
    server = uvicorn_server(app)
    where = getattr(backend, "placement", None)
    print(
        f"envharness policy: {endpoint.model_name}{f' on {where.device} in {where.dtype_name}' if where else ''}"
        f"{' (bearer token required)' if limits.token else ''} listening on http://{host}:{sock.getsockname()[1]} "
        "(POST /rollouts, then an OpenAI client on /rollouts/ID/v1)",
        flush=True,
    )
    serve_until_stopped(server, sock)
    print(f"envharness policy: stopped; {endpoint.store.open_count} rollout(s) still open", flush=True)
    return 0
