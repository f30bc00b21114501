"""The policy endpoint's overhead per model call, against calling the backend directly.

    .venv/bin/python bench/bench_policy_endpoint.py                 # tiny model + a null backend, 1 and 16 rollouts
    .venv/bin/python bench/bench_policy_endpoint.py --model embedded --turns 4 --calls 64

Every rollout is a multi-turn conversation (`--turns` calls, each re-sending the whole history
plus a new user message, as an agent does). Two ways to make the same calls, in one run:

- **direct**: the harness's own path, `BatchingModelStep(backend).generate(...)` with the
  rollout's exact `prefix_ids` (what envharness's own loop pays; concurrent calls batched);
- **endpoint**: an HTTP client (httpx, keep-alive; the openai SDK rides on it) posting
  `/rollouts/{id}/v1/chat/completions` to `PolicyServer` on loopback: JSON, validation, the
  continuation match over the history, the same batcher, recording, the OpenAI reply.

overhead = endpoint p50 - direct p50: the latency an agent sees added to each call. With 16
rollouts at once a call also waits for the others' requests to be handled (one server, one
process), so "extra wall per call" = (endpoint round's wall time - direct round's) / calls
gives the cost per call of serving them all. The `null` backend answers instantly with fixed tokens
(no model), so its endpoint column is the overhead itself, without model noise; the model
rows show it next to real generation. "endpoint without HTTP" calls `PolicyEndpoint.complete`
in-process (null backend): validation, the continuation match, batching and recording alone. Client and server share this process (and its GIL),
so the numbers include the client's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import httpx  # noqa: E402

from envharness.harness.model_step import BatchingModelStep  # noqa: E402
from envharness.models.base import Generation, GenerationRequest, SamplingParams  # noqa: E402
from envharness.policy import PolicyServer  # noqa: E402

FLOOR: list[float] = []


class NullBackend:
    """No model: the prompt is the prefix plus 8 made-up ids per new message, the reply 4 ids."""

    name = "null"

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        out = []
        for r in requests:
            new = len(r.messages) - (
                max(i for i, m in enumerate(r.messages) if m["role"] == "assistant") + 1
                if r.prefix_ids
                else 0
            )
            prompt = list(r.prefix_ids or []) + [7] * (8 * new)
            out.append(
                Generation(
                    text=f"reply {len(prompt)}",
                    prompt_ids=prompt,
                    completion_ids=[5, 6, 7, 2],
                    logprobs=[-0.5] * 4,
                )
            )
        return out

    async def aclose(self) -> None:
        pass


SYSTEM = {"role": "system", "content": "You control a web page. Answer with one tool call as JSON."}


def user(turn: int) -> dict:
    return {
        "role": "user",
        "content": f"Observation {turn}: [13] button 'Click Me!' [14] textbox 'Name' ..." * 3,
    }


async def direct_rollout(batcher: BatchingModelStep, turns: int, max_tokens: int, times: list[float]) -> None:
    messages, prefix = [SYSTEM, user(0)], None
    for turn in range(turns):
        started = time.perf_counter()
        gen = await batcher.generate(
            GenerationRequest(
                list(messages), None, SamplingParams(temperature=1.0, max_tokens=max_tokens), prefix
            )
        )
        times.append(time.perf_counter() - started)
        prefix = gen.prompt_ids + gen.completion_ids
        messages += [{"role": "assistant", "content": gen.text}, user(turn + 1)]


async def endpoint_rollout(
    http: httpx.AsyncClient, policy: PolicyServer, turns: int, max_tokens: int, times: list[float]
) -> None:
    rollout = policy.store.open()
    url = f"{policy.rollout_url(rollout.rollout_id)}/chat/completions"
    messages = [SYSTEM, user(0)]
    for turn in range(turns):
        started = time.perf_counter()
        reply = await http.post(
            url, json={"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 1.0}
        )
        body = reply.json()
        times.append(time.perf_counter() - started)
        assert reply.status_code == 200, body
        assert not body["envharness"]["fork"], body
        messages += [body["choices"][0]["message"], user(turn + 1)]
    policy.store.discard(rollout.rollout_id)


async def in_process_rollout(policy: PolicyServer, turns: int, max_tokens: int, times: list[float]) -> None:
    """`PolicyEndpoint.complete` called directly: the endpoint's own work without HTTP."""
    rollout = policy.store.open()
    messages = [SYSTEM, user(0)]
    for turn in range(turns):
        started = time.perf_counter()
        body = await policy.endpoint.complete(
            rollout.rollout_id,
            {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 1.0},
        )
        times.append(time.perf_counter() - started)
        messages += [body["choices"][0]["message"], user(turn + 1)]
    policy.store.discard(rollout.rollout_id)


async def measure(
    backend, rollouts: int, turns: int, calls: int, max_tokens: int
) -> tuple[list[float], list[float], list[float], float]:
    """Per-call latencies of the three paths, and the endpoint's extra wall time per call over whole rounds."""
    direct, endpoint, inproc, extra = [], [], [], 0.0
    batcher = BatchingModelStep(backend, max_wait_s=0.0)
    with PolicyServer(backend) as policy:
        limits = httpx.Limits(max_connections=rollouts + 4, max_keepalive_connections=rollouts + 4)
        async with httpx.AsyncClient(limits=limits, timeout=600) as http:
            floor = []
            for _ in range(64):  # the HTTP floor: a keep-alive GET of /health on the same server
                started = time.perf_counter()
                await http.get(f"{policy.base_url}/health")
                floor.append(time.perf_counter() - started)
            FLOOR.append(statistics.median(floor))
            await endpoint_rollout(http, policy, 2, max_tokens, [])  # warm up both paths
            await direct_rollout(batcher, 2, max_tokens, [])
            rounds = max(1, calls // (rollouts * turns))
            for _ in range(rounds):  # alternate, so a load change on the machine hits both alike
                started = time.perf_counter()
                await asyncio.gather(
                    *(direct_rollout(batcher, turns, max_tokens, direct) for _ in range(rollouts))
                )
                middle = time.perf_counter()
                await asyncio.gather(
                    *(endpoint_rollout(http, policy, turns, max_tokens, endpoint) for _ in range(rollouts))
                )
                extra += (time.perf_counter() - middle) - (middle - started)
            if backend.name == "null":  # the endpoint's own work, on this thread's loop (no model to share)
                for _ in range(rounds):
                    await asyncio.gather(
                        *(in_process_rollout(policy, turns, max_tokens, inproc) for _ in range(rollouts))
                    )
    return direct, endpoint, inproc, extra / len(endpoint)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="tiny", help="a model spec (load_backend), besides the null backend"
    )
    parser.add_argument("--rollouts", default="1,16", help="concurrent rollouts, comma-separated")
    parser.add_argument("--turns", type=int, default=4, help="calls per rollout (history grows each call)")
    parser.add_argument("--calls", type=int, default=128, help="calls per row and path (at least one round)")
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from envharness.models import load_backend

    backends = [("null", NullBackend())] + (
        [(args.model, load_backend(args.model))] if args.model != "null" else []
    )
    rows = []
    for name, backend in backends:
        for n in [int(x) for x in args.rollouts.split(",")]:
            direct, endpoint, inproc, extra = asyncio.run(
                measure(backend, n, args.turns, args.calls, args.max_tokens)
            )
            rows.append(
                (
                    name,
                    n,
                    len(endpoint),
                    pct(direct, 50),
                    pct(endpoint, 50),
                    pct(direct, 90),
                    pct(endpoint, 90),
                    extra,
                    pct(inproc, 50) if inproc else None,
                )
            )
    print(
        f"\npolicy endpoint overhead per call ({args.turns} turns per rollout, {args.max_tokens} new tokens per call)\n"
    )
    print(
        "| backend | rollouts | calls | direct p50 | endpoint p50 | **overhead p50** | direct p90 | endpoint p90 "
        "| extra wall per call | endpoint without HTTP p50 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, n, count, d50, e50, d90, e90, extra, i50 in rows:
        inproc = f"{i50 * 1e3:.3f} ms" if i50 is not None else ""
        print(
            f"| {name} | {n} | {count} | {d50 * 1e3:.2f} ms | {e50 * 1e3:.2f} ms | **{(e50 - d50) * 1e3:.2f} ms** "
            f"| {d90 * 1e3:.2f} ms | {e90 * 1e3:.2f} ms | {extra * 1e3:.2f} ms | {inproc} |"
        )

    print(
        f"\nHTTP floor (keep-alive GET /health on the same server, same client): p50 {statistics.median(FLOOR) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
