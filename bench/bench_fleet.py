"""The fleet: rollout steps/s over 1, 2 and 3 browser servers, the router's cost per session,
and how long a dead server takes to be detected and replaced.

1. **Scale**: a TRL `rollout_func` (`build_harness_rollout_func`, scripted policy batched,
   BrowserGym sessions pooled) over `FleetRouter([url1..urlK])`, K = 1, 2, 3 `envharness serve
   browsergym` processes on loopback; one server through `ClientPool` (no router) as the
   baseline. Steps/s = tool calls / wall time. All servers share this machine's cores, so
   the column shows the router spreading work, not more hardware.
2. **Router overhead per session**: one episode's lease cycle (lease, reset, step, close)
   through `FleetRouter` over 3 echo servers against `ClientPool` on one echo server,
   sessions pooled in both; echo costs ~nothing, so the difference is the router's.
3. **Detect and replace**, without Ray: a server SIGKILLed with a session open on it
   (detected by that session's next call) and with none (detected by the health polls).
   With Ray (`--ray`, root: a 3-node `Cluster` in a private network namespace): SIGKILL a
   fleet server, time until the router has the restarted server (new port) healthy.

Usage: python bench/bench_fleet.py [--episodes 16] [--concurrency 8] [--repeats 3] [--ray]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from envharness.core import ClientPool
from envharness.core.launchers import launch_local
from envharness.envs.browsergym.client import AsyncBrowserGymEnv, BrowserGymEnv
from envharness.envs.browsergym.sessions import BrowserGymSessionFactory, build_browsergym_action_tool_call
from envharness.envs.echo.client import AsyncEchoEnv, EchoEnv
from envharness.envs.echo.models import EchoAction
from envharness.fleet import FleetRouter
from envharness.harness import BatchingModelStep, HarnessRunLimits, build_harness_rollout_func
from envharness.models.scripted import ScriptedBackend

TASKS = [
    "click-test",
    "click-button",
    "enter-text",
    "focus-text",
    "click-dialog",
    "click-checkboxes",
    "click-tab",
]


def start(name: str, n: int, *args: str) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(
            pool.map(lambda _: launch_local(name, server_args=["--max-sessions", "32", *args]), range(n))
        )


def rollout_once(
    client_factory: Any, prompts: list[str], concurrency: int, max_turns: int
) -> tuple[float, int, float]:
    """(wall s, tool calls, mean reward) of one rollout_func call."""
    factory = BrowserGymSessionFactory(
        client_factory=client_factory, reset_kwargs={"pruned_html": False, "extra_properties": False}
    )
    batcher = BatchingModelStep(
        ScriptedBackend(), tool_call_parser=build_browsergym_action_tool_call, send_tools=False
    )
    steps: list[int] = []
    rollout_func = build_harness_rollout_func(
        session_factory=factory,
        model_step_builder=lambda trainer, session: batcher.for_episode(),
        limits=HarnessRunLimits(max_turns=max_turns),
        max_concurrency=concurrency,
        on_result=lambda i, r: steps.append(len(r.tool_trace)),
    )
    started = time.perf_counter()
    out = rollout_func(prompts, None)
    wall = time.perf_counter() - started
    failed = sum(1 for m in out["verify_metrics"] if m.get("error"))
    if failed:
        raise SystemExit(
            f"{failed} episodes failed: {[m['error'] for m in out['verify_metrics'] if m.get('error')][:2]}"
        )
    return wall, sum(steps), statistics.mean(out["env_reward"])


def scale(args: argparse.Namespace) -> None:
    servers = start("browsergym", 3)
    urls = [s.base_url for s in servers]
    prompts = [TASKS[i % len(TASKS)] for i in range(args.episodes)]
    pools: list[Any] = []
    try:
        rows = [
            ("1 server, ClientPool (no router)", lambda: ClientPool(lambda: BrowserGymEnv(base_url=urls[0])))
        ]
        rows += [
            (
                f"{k} server{'s' if k > 1 else ''}, FleetRouter",
                lambda k=k: FleetRouter(urls[:k], client_class=AsyncBrowserGymEnv),
            )
            for k in (1, 2, 3)
        ]
        for _label, make in rows:
            pool = make()
            pools.append(pool)
            if isinstance(pool, FleetRouter):
                pool.wait_ready(timeout_s=60)
            rollout_once(
                pool, prompts[: args.concurrency], args.concurrency, args.max_turns
            )  # warm: sessions, browsers
        runs: list[list[tuple[float, int, float]]] = [[] for _ in rows]
        for _ in range(args.repeats):  # interleaved: a change in the machine's load hits every row
            for i, pool in enumerate(pools):
                runs[i].append(rollout_once(pool, prompts, args.concurrency, args.max_turns))
        print(
            f"\n### Scale: {args.episodes} episodes, {args.concurrency} in flight, max_turns={args.max_turns}, "
            f"scripted policy, median of {args.repeats} interleaved (this machine: {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.1f})\n"
        )
        print("| servers | wall s | steps/s | episodes/s | vs 1 server | mean reward |")
        print("|---|---|---|---|---|---|")
        base = None
        for (label, _), rs in zip(rows, runs):
            wall = statistics.median(r[0] for r in rs)
            rate = statistics.median(r[1] / r[0] for r in rs)
            base = base or rate
            print(
                f"| {label} | {wall:.2f} | {rate:.1f} | {args.episodes / wall:.2f} | {rate / base:.2f}x | "
                f"{statistics.median(r[2] for r in rs):.2f} |",
                flush=True,
            )
    finally:
        for pool in pools:
            pool.close()
        for s in servers:
            s.stop()


def lease_cycle_ms(pool: Any, n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        lease = pool()
        lease.reset()
        lease.step(EchoAction(message="x"))
        lease.close()
        times.append((time.perf_counter() - started) * 1000)
    return times


def overhead(args: argparse.Namespace) -> None:
    servers = start("echo", 3)
    urls = [s.base_url for s in servers]
    pool = ClientPool(lambda: EchoEnv(base_url=urls[0]))
    router = FleetRouter(urls, client_class=AsyncEchoEnv)
    try:
        router.wait_ready(timeout_s=30)
        lease_cycle_ms(pool, 20), lease_cycle_ms(router, 20)  # warm: connections, pooled sessions
        a, b = [], []
        for _ in range(5):  # interleaved, so load changes hit both
            a += lease_cycle_ms(pool, args.cycles // 5)
            b += lease_cycle_ms(router, args.cycles // 5)
        pa, pb = statistics.median(a), statistics.median(b)
        print(
            f"\n### Router overhead per session: lease + reset + step + close, echo, {len(a)} cycles each, interleaved\n"
        )
        print("| client factory | p50 ms | p90 ms |")
        print("|---|---|---|")
        for label, t in (("ClientPool, 1 server", a), ("FleetRouter, 3 servers", b)):
            print(f"| {label} | {statistics.median(t):.2f} | {statistics.quantiles(t, n=10)[-1]:.2f} |")
        print(f"\nrouter overhead per session (p50 difference): {pb - pa:+.2f} ms")
    finally:
        router.close()
        pool.close()
        for s in servers:
            s.stop()


def detect(args: argparse.Namespace) -> None:
    print("\n### Detecting a dead server (no Ray: fixed urls, poll every 1 s, out after 2 missed polls)\n")
    print("| how it is noticed | median s | runs |")
    print("|---|---|---|")
    by_session, by_poll = [], []
    for _ in range(args.repeats):
        servers = start("echo", 2)
        try:
            with FleetRouter([s.base_url for s in servers], client_class=AsyncEchoEnv) as router:
                router.wait_ready(timeout_s=30)
                lease = router()
                lease.reset()
                victim = next(s for s in servers if s.base_url == lease.url)
                other = next(s for s in servers if s is not victim)
                os.kill(victim.process.pid, signal.SIGKILL)
                killed = time.perf_counter()
                try:
                    lease.step(EchoAction(message="x"))
                except ConnectionError:
                    by_session.append(time.perf_counter() - killed)
                os.kill(other.process.pid, signal.SIGKILL)  # no session on this one: only the polls see it
                killed = time.perf_counter()
                while other.base_url in router.healthy_urls():
                    time.sleep(0.005)
                by_poll.append(time.perf_counter() - killed)
        finally:
            for s in servers:
                s.stop()
    print(f"| by a session on it (its next call) | {statistics.median(by_session):.3f} | {len(by_session)} |")
    print(f"| by health polls alone | {statistics.median(by_poll):.2f} | {len(by_poll)} |")


def ray_replace(args: argparse.Namespace) -> None:
    """Runs inside `unshare --net`: a local cluster, a fleet of 3 echo servers, kill & time."""
    import ray
    from ray.cluster_utils import Cluster

    from envharness.fleet import EnvFleet

    store = 80 * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": store})
    for _ in range(3):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    result: dict[str, Any] = {"detect": [], "replace": []}
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        with EnvFleet("echo", 3, host="127.0.0.1", health_poll_s=1.0) as fleet:
            fleet.wait_ready(timeout_s=180)
            router = fleet.client_pool(poll_interval_s=0.5)
            router.wait_ready(3, timeout_s=60)
            for k in range(args.repeats):
                victim = fleet.addresses()[k % 3]
                os.kill(victim["pid"], signal.SIGKILL)
                killed = time.perf_counter()
                while victim["url"] in router.healthy_urls():
                    time.sleep(0.01)
                result["detect"].append(time.perf_counter() - killed)
                while len(router.healthy_urls()) < 3:
                    time.sleep(0.01)
                result["replace"].append(time.perf_counter() - killed)
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("RAY " + json.dumps(result), flush=True)


def ray_part(args: argparse.Namespace) -> None:
    command = [
        "unshare",
        "--net",
        "sh",
        "-c",
        f'ip link set lo up && exec "{sys.executable}" "{__file__}" --ray-inside --repeats {args.repeats}',
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RAY ")), None)
    if run.returncode != 0 or line is None:
        print(f"\n(the Ray part failed: {run.stderr[-2000:]})")
        return
    data = json.loads(line[4:])
    print(
        "\n### Replacing a dead server with Ray (3-node local Cluster in a private netns, echo servers; "
        "actor health check every 1 s, router polls every 0.5 s)\n"
    )
    print("| event, from the SIGKILL | median s | runs |")
    print("|---|---|---|")
    print(
        f"| router takes the server out | {statistics.median(data['detect']):.2f} | {len(data['detect'])} |"
    )
    print(
        f"| restarted server (new port) healthy in the router | {statistics.median(data['replace']):.2f} | {len(data['replace'])} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=200, help="lease cycles per side in the overhead part")
    parser.add_argument(
        "--ray", action="store_true", help="also time a Ray restart (needs root for `unshare --net`)"
    )
    parser.add_argument("--ray-inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["scale", "overhead", "detect", "ray"], help="one part only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on `kill` too
    if args.ray_inside:
        return ray_replace(args)
    for name, part in (("scale", scale), ("overhead", overhead), ("detect", detect)):
        if args.only in (None, name):
            part(args)
    if args.ray or args.only == "ray":
        ray_part(args)


if __name__ == "__main__":
    main()
