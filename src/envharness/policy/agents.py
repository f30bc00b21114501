"""Running an agent that owns its loop, as one recorded rollout.

An agent is any function (sync or async) that plays one episode with an OpenAI client and an
MCP client of its own. It is called with keyword arguments, only those its signature names:

    base_url   the OpenAI base URL that records into this rollout (`/rollouts/{id}/v1`)
    mcp_url    the environment's `/mcp`, tagged with the rollout id (`?rollout=ID`) and the
               episode's seed (`&seed=S`): a server whose operator fixed the seed
               (`--mcp-fixed seed`, as `train --agent` does) plays that seed, whatever the
               agent's tools ask
    api_key    the rollout id (any OpenAI client needs some key)
    model      the served model's name
    task, seed which episode to play (from the dataset prompt)
    rollout_id the id itself
    ...        whatever the driver adds (`extra`: `envharness train` offers `max_turns`)

`run_agent` opens the rollout, awaits the agent, ends the rollout and reads what the
environment recorded for the tag (`GET /mcp/rollouts/{id}`): the reward comes from the
environment, never from the agent. An agent that raises or times out gives a result with
`error` set; its calls so far stay recorded.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envharness.core.concurrency import run_sync
from envharness.core.registry import load_target
from envharness.policy.traces import RolloutTrace

AGENT_ARGUMENTS = ("base_url", "mcp_url", "api_key", "model", "task", "seed", "rollout_id")


def load_agent(spec: str) -> Callable[..., Any]:
    """`module.path:function` or `path/to/file.py:function`."""
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--agent {spec!r}: expected module.path:function or path/to/agent.py:function")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise ValueError(f"--agent {spec!r}: no file {path}")
        name = f"envharness_agent_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)  # the user's own agent file, as `python file.py` would
        agent = getattr(module, attribute, None)
    else:
        try:
            agent = load_target(spec)
        except (ImportError, AttributeError, KeyError) as exc:
            raise ValueError(f"--agent {spec!r}: {exc}") from None
    if not callable(agent):
        raise ValueError(f"--agent {spec!r} is not a function")
    return agent


@dataclass
class AgentResult:
    """One agent rollout: its trace, what the environment recorded for it, how it ended."""

    trace: RolloutTrace
    outcome: dict[str, Any] = field(default_factory=dict)
    returned: Any = None
    error: str | None = None
    seconds: float = 0.0
    #: It ran past its time limit (and was cancelled): masked and counted, never a reward of 0.
    timed_out: bool = False

    @property
    def reward(self) -> float:
        return float(self.outcome.get("reward") or 0.0)


def agent_kwargs(agent: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    """The arguments `agent` names (all of them when it takes `**kwargs`)."""
    params = inspect.signature(agent).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(offered)
    return {k: v for k, v in offered.items() if k in params}


async def fetch_outcome(env_url: str, rollout_id: str, *, token: str | None = None) -> dict[str, Any]:
    """What the environment server recorded for MCP calls tagged `rollout_id` (taken: forgotten there)."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30.0, headers=headers) as client:
        response = await client.delete(f"{env_url.rstrip('/')}/mcp/rollouts/{rollout_id}")
        response.raise_for_status()
        return response.json() or {}


async def run_agent(
    agent: Callable[..., Any],
    *,
    policy: Any,
    env_url: str,
    task: Any = None,
    seed: int | None = None,
    timeout_s: float | None = None,
    env_token: str | None = None,
    extra: dict[str, Any] | None = None,
) -> AgentResult:
    """Play one rollout with `agent` against `policy` (a `PolicyServer`) and the server at `env_url`."""
    rollout_id = uuid.uuid4().hex
    trace = policy.store.open(rollout_id, task=task, seed=seed)
    offered = {
        "base_url": policy.rollout_url(rollout_id),
        "mcp_url": f"{env_url.rstrip('/')}/mcp?rollout={rollout_id}"
        + (f"&seed={seed}" if isinstance(seed, int) and seed >= 0 else ""),
        "api_key": trace.api_key,
        "model": policy.endpoint.model_name,
        "task": task,
        "seed": seed,
        "rollout_id": rollout_id,
        **(extra or {}),
    }
    kwargs = agent_kwargs(agent, offered)
    result = AgentResult(trace)
    started = time.perf_counter()
    try:
        if inspect.iscoroutinefunction(agent):
            result.returned = await asyncio.wait_for(agent(**kwargs), timeout_s)
        else:
            result.returned = await asyncio.wait_for(run_sync(agent, **kwargs), timeout_s)
    except TimeoutError:
        result.error, result.timed_out = (
            f"the agent did not finish within {timeout_s:g} s (its time limit)",
            True,
        )
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        policy.store.end(rollout_id)
        result.seconds = time.perf_counter() - started
    try:
        result.outcome = await fetch_outcome(env_url, rollout_id, token=env_token)
    except Exception as exc:
        result.error = (
            result.error or f"reading the environment's outcome failed: {type(exc).__name__}: {exc}"
        )
    return result
