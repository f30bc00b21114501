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
from dataclasses import dataclass

from envharness.cli import exposure, options
from envharness.cli.declared import add_declared, from_args
from envharness.cli.exposure import ExposureArgs
from envharness.core.declared import check_options, group_values, option
from envharness.harness.groups import ModelArgs
from envharness.policy.limits import PolicyLimits


@dataclass(frozen=True)
class PolicyConfig(PolicyLimits, ExposureArgs, ModelArgs):
    """`envharness policy`: where it listens, how it samples, and the groups it takes: the
    model (`harness/groups.py`), who may call it (`cli/exposure.py`) and the endpoint's limits
    (`policy/limits.py`), each option declared once."""

    host: str = exposure.host()
    port: int = option(9000, "port (0: a free one; default %(default)s)", minimum=0)
    max_new_tokens: int = option(
        256, "tokens per reply when a request names none (default %(default)s)", metavar="N", minimum=1
    )
    temperature: float | None = option(
        None,
        "force this sampling temperature on every call (default: what each request asks)",
        type=float,
        metavar="T",
        minimum=0,
    )
    context_length: int | None = option(
        None,
        "refuse prompts of N tokens or more (default: the model's own window)",
        type=int,
        metavar="N",
        minimum=1,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_declared(parser, PolicyConfig, options.help_values())


def config_from_args(args: argparse.Namespace) -> PolicyConfig:
    """The `PolicyConfig` the command line describes (the token: `--token` or
    $ENVHARNESS_TOKEN), its bounds and rules checked (ValueError in words)."""
    token = args.token or os.environ.get("ENVHARNESS_TOKEN") or None
    config = from_args(PolicyConfig, args, token=token)
    check_options(config)
    return config


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    options.check_device(parser, args)


def run(args: argparse.Namespace) -> int:
    from envharness.core.server import bind_socket, serve_until_stopped, uvicorn_server
    from envharness.models import load_backend
    from envharness.policy.app import create_policy_app
    from envharness.policy.endpoint import PolicyEndpoint

    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"envharness policy: {exc}", file=sys.stderr)
        return 2
    config.say_exposure(config.token, "envharness policy")
    options.set_threads(config.threads)
    try:
        backend = load_backend(config.model, device=config.device, dtype=config.dtype)
    except (ValueError, OSError, ImportError, RuntimeError) as exc:
        print(f"envharness policy: {exc}", file=sys.stderr)
        return 2
    sampling = {"temperature": config.temperature} if config.temperature is not None else None
    limits = PolicyLimits(**group_values(config, PolicyLimits))
    endpoint = PolicyEndpoint(
        backend,
        sampling=sampling,
        default_max_tokens=config.max_new_tokens,
        context_length=config.context_length,
        limits=limits,
    )
    sock = bind_socket(config.host, config.port)
    host = f"[{config.host}]" if ":" in config.host else config.host
    app = create_policy_app(endpoint, **group_values(config, ExposureArgs))
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
