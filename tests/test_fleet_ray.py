"""The Ray fleet on a local multi-node cluster, inside a private network namespace.

`fleet_ray_scenario.py` runs under `unshare --net` with only `lo` up, so Ray's own traffic
(which binds the machine's interface address otherwise) cannot leave this machine. Every
process it starts (Ray's, the servers, their Chromium) carries a unique tag in its
environment; afterwards none may be left.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from envharness.fleet.server_process import TAG_ENV_VAR, tagged_pids

SCENARIO = Path(__file__).with_name("fleet_ray_scenario.py")


def _unshare() -> list[str] | None:
    """How to enter a private network namespace here: as root (`unshare --net`), or as any user
    where unprivileged user namespaces are allowed, as on most CI runners (`--user --map-root-user`)."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    for prefix in (["unshare", "--net"], ["unshare", "--user", "--map-root-user", "--net"]):
        if subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    return None


UNSHARE = _unshare()


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="needs the ray extra (pip install 'envharness[ray]')"
    ),
    pytest.mark.skipif(
        UNSHARE is None,
        reason="needs `unshare --net` (root, or unprivileged user namespaces) to keep Ray's "
        "traffic in a private namespace",
    ),
]


def _leftovers(tag: str) -> dict[int, str]:
    found = {}
    for pid in tagged_pids(tag):
        try:
            found[pid] = (
                Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
            )
        except OSError:
            pass
    return found


@pytest.mark.timeout(1200)  # a hang guard above the run's own 900 s: 178 s idle, over 300 s at load 13
def test_ray_fleet_places_replaces_and_heals_with_nothing_left_behind():
    tag = f"ray-test-{uuid.uuid4().hex[:10]}"
    env = dict(os.environ, **{TAG_ENV_VAR: tag}, RAY_USAGE_STATS_ENABLED="0")
    command = [*UNSHARE, "sh", "-c", f'ip link set lo up && exec "{sys.executable}" "{SCENARIO}"']
    try:
        run = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=900
        )  # expected: ~2-3 min
    finally:
        deadline = time.monotonic() + 60  # Ray's workers take a moment to follow the shutdown
        while _leftovers(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = _leftovers(tag)
        for pid in left:  # never leave anything running, even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert run.returncode == 0 and line, (
        f"scenario failed (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    )
    assert not left, f"processes left running after the test: {left}"
    out = json.loads(line[len("RESULT ") :])
    print(json.dumps(out, indent=1))

    assert len(set(out["nodes"])) == 3, "one server per node"
    assert out["lease_urls"] == sorted(out["urls"]), "new sessions spread over the three servers"
    # a killed server: its session fails as an infrastructure failure, Ray replaces it on its node
    assert out["killed_session_failed"]
    assert out["replace_s"] < 60 and out["replacement_node_same"]
    assert out["old_server_procs_left"] == [], "the killed server's browser was reaped"
    # a removed node: its session fails within seconds; a joining node makes the fleet whole
    assert out["node_loss_session_fail_s"] < 30
    assert len(set(out["nodes_after"])) == 3 and set(out["nodes_after"]) != set(out["nodes"])
    assert out["whole_again_s"] < 180
    urls_now = out["session_urls_now"]
    assert out["fresh_steps_ok"] and sorted(urls_now.count(u) for u in set(urls_now)) == [1, 1, 2], (
        "the healed fleet shares the load"
    )

    assert out["fleet_procs_left"] == []
    fleet_eval, single_eval = out["eval_rows"]
    assert fleet_eval == single_eval and fleet_eval[-1]["successes"] == 4, (
        "eval --servers 2 gives the single-server report"
    )
