"""The Ray fleet scenario that `test_fleet_ray.py` runs inside a private network namespace.

A local multi-node cluster (a head with no CPUs and three 1-CPU nodes), three browsergym
servers on distinct nodes. One server is SIGKILLed (replaced by Ray on a new port), one
node is removed (its session fails, the fleet shrinks) and a node joins (the fleet is
whole again). Then `envharness eval --servers 2` on the cluster and on one server. Prints one JSON line of findings and timings for the test to check; exits
non-zero with the reason when a step cannot complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from envharness.cli import main as cli_main
from envharness.envs.browsergym.models import BrowserGymAction
from envharness.fleet import EnvFleet, ServerLostError
from envharness.fleet.server_process import tagged_pids

STORE = 80 * 1024 * 1024
NODE = {"num_cpus": 1, "object_store_memory": STORE}


def until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout_s}s waiting for {what}")


def fail_time(lease) -> float:
    """Seconds until a step on `lease` raises ServerLostError (stepping all along)."""
    started = time.monotonic()
    while time.monotonic() - started < 120:
        try:
            lease.step(BrowserGymAction(action_str="noop()"))
        except ServerLostError:
            return time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit("a session on a removed node never failed")


def eval_rows(flags: list[str], name: str) -> list[dict]:
    """`envharness eval` (scripted model) with `flags`; its summary rows without timings."""
    folder = Path(tempfile.mkdtemp(prefix="fleet-eval-")) / name
    try:
        with contextlib.redirect_stdout(sys.stderr):
            code = cli_main(
                [
                    "eval",
                    "--no-progress",
                    "--no-screenshots",
                    "--model",
                    "scripted",
                    "--tasks",
                    "click-test,enter-text",
                    "--episodes",
                    "2",
                    "--out",
                    str(folder),
                    *flags,
                ]
            )
        if code != 0:
            raise SystemExit(f"envharness eval {' '.join(flags)} exited {code}")
        rows = json.loads((folder / "summary.json").read_text())["tasks"]
        return [{k: v for k, v in row.items() if k != "mean_seconds"} for row in rows]
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)


def main() -> None:
    out: dict = {}
    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": STORE})
    nodes = [cluster.add_node(**NODE) for _ in range(3)]
    fleet = None
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        out["cluster_start_s"] = time.monotonic() - t0
        fleet = EnvFleet(
            "browsergym", servers=3, host="127.0.0.1", server_args=["--max-sessions", "4"], health_poll_s=1.0
        )
        fleet.wait_ready(timeout_s=300)
        out["fleet_ready_s"] = time.monotonic() - t0
        first = fleet.addresses()
        out["nodes"] = [a["node_id"] for a in first]
        out["urls"] = [a["url"] for a in first]
        router = fleet.client_pool(poll_interval_s=0.5, acquire_timeout_s=120)
        router.wait_ready(3, timeout_s=60)

        leases = [router() for _ in range(3)]
        for lease in leases:  # one session (and one Chromium) per server
            lease.reset(task="click-test", seed=0)
        out["lease_urls"] = sorted(lease.url for lease in leases)
        by_url = {lease.url: lease for lease in leases}

        # 1. a server SIGKILLed: its session fails, Ray brings a new one up on a new port
        victim = first[0]
        os.kill(victim["pid"], signal.SIGKILL)
        killed = time.monotonic()
        try:
            by_url[victim["url"]].step(BrowserGymAction(action_str="noop()"))
            out["killed_session_failed"] = False
        except ServerLostError:
            out["killed_session_failed"] = True
        new = until(
            lambda: next((e for e in fleet.endpoints() if e.url not in out["urls"]), None),
            120,
            "a replacement server",
        )
        out["replace_s"] = time.monotonic() - killed
        until(lambda: new.url in router.healthy_urls(), 60, "the router to take the replacement in")
        out["replace_in_router_s"] = time.monotonic() - killed
        out["replacement_node_same"] = new.node_id == victim["node_id"]
        # nothing of the killed server is left: its Playwright driver and Chromium are gone too
        out["old_server_procs_left"] = tagged_pids(f"{fleet.tag}/0/{victim['generation']}")

        # 2. a node removed: its session fails within seconds, its server leaves the router
        gone = first[1]
        node = next(n for n in nodes if n.node_id == gone["node_id"])
        cluster.remove_node(node)
        out["node_loss_session_fail_s"] = fail_time(by_url[gone["url"]])
        until(
            lambda: gone["url"] not in router.healthy_urls(),
            60,
            "the router to drop the removed node's server",
        )

        # 3. a node joins: the fleet is whole again, one server per node
        joined = time.monotonic()
        cluster.add_node(**NODE)
        fleet.wait_ready(timeout_s=180)
        router.wait_ready(3, timeout_s=120)
        out["whole_again_s"] = time.monotonic() - joined
        now = fleet.addresses()
        out["nodes_after"] = [a["node_id"] for a in now]

        fresh = [router() for _ in range(3)]
        for lease in fresh:
            lease.reset(task="click-test", seed=1)
        # with the untouched server's session still open, four sessions over three servers
        out["session_urls_now"] = sorted([lease.url for lease in fresh] + [by_url[first[2]["url"]].url])
        out["fresh_steps_ok"] = all(
            lease.step(BrowserGymAction(action_str="noop()")).reward == 0.0 for lease in fresh
        )
        for lease in fresh:
            lease.close()
        for lease in leases:
            lease.close()
        tag = fleet.tag
        fleet.shutdown()
        fleet = None
        out["fleet_procs_left"] = (
            until(lambda: not tagged_pids(tag), 60, "the fleet's processes to end") and []
        )

        # 4. `envharness eval --servers 2` on this cluster gives the single-server report
        started = time.monotonic()
        out["eval_rows"] = [
            eval_rows(["--servers", "2", "--ray-address", cluster.address], "fleet"),
            eval_rows([], "single"),
        ]
        out["eval_s"] = time.monotonic() - started
    finally:
        if fleet is not None:
            fleet.shutdown()
        ray.shutdown()
        cluster.shutdown()
        out["total_s"] = time.monotonic() - t0
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
