"""Issue 17: a server started by a job never outlives it, however the job ends.

Each test starts a job in a subprocess (a script using `BrowserGymEnv.from_local()`, or
`envharness serve` itself), ends it one way, and checks /proc for the processes of THAT
job (tagged through their environment): the server, the Playwright driver, Chromium.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from _jobs import Job, tagged_processes
from conftest import wait_until

from envharness.core import lifecycle

pytestmark = pytest.mark.timeout(300)

#: A user's script: a browser env from `from_local()`, one reset, then it ends as argv[1] says.
SCRIPT = """
import os, sys, time
from envharness.envs.browsergym import BrowserGymEnv
env = BrowserGymEnv.from_local()
env.reset(task="click-test", seed=1)
print("ready", flush=True)
how = sys.argv[1]
if how == "os_exit":
    os._exit(1)
if how == "exception":
    raise RuntimeError("a bug in user code")
if how == "wait":
    time.sleep(600)
# "return": the script ends without closing its env
"""


@pytest.fixture
def jobs(tmp_path):
    started: list[Job] = []

    def start(args, script=None) -> Job:
        job = Job(args, tmp_path, script=script)
        started.append(job)
        return job

    yield start
    for job in started:
        job.kill_all()


def assert_whole_tree_runs(job: Job) -> None:
    """The check can see what it must find gone: a server, a Playwright driver and Chromium."""
    procs = " | ".join(job.tagged().values())
    assert "serve browsergym" in procs and "playwright" in procs and "chromium" in procs, procs


@pytest.mark.slow
@pytest.mark.parametrize("how", ["os_exit", "exception", "return"])
def test_from_local_server_goes_with_a_script_that_ends(jobs, how):
    job = jobs([how], script=SCRIPT)
    job.wait_for_output("ready")
    rc = job.wait()
    assert rc == (0 if how == "return" else 1), job.output
    job.assert_nothing_left()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"]
)
def test_from_local_server_goes_with_a_script_killed_by_a_signal(jobs, sig):
    job = jobs(["wait"], script=SCRIPT)
    job.wait_for_output("ready")
    assert_whole_tree_runs(job)
    job.signal(sig)
    job.wait()
    job.assert_nothing_left()


@pytest.mark.slow
def test_serve_stops_when_the_process_it_watches_exits(jobs, tmp_path):
    """`--exit-with-parent PID` works for any program, not only a Python parent."""
    watched = subprocess.Popen(["sleep", "600"])
    try:
        job = jobs(["serve", "browsergym", "--port", "0", "--exit-with-parent", str(watched.pid)])
        job.wait_for_output("listening on")
        url = job.output.split("listening on ")[1].split()[0]
        from envharness.envs.browsergym import BrowserGymEnv

        with BrowserGymEnv(base_url=url) as env:
            env.reset(task="click-test", seed=1)
            assert_whole_tree_runs(job)
            watched.kill()
            watched.wait()
            assert job.wait(60) == 0
        assert f"parent process {watched.pid} exited; stopping" in job.output
        assert (
            "1 session(s) closed, 0 environment(s) still open" in job.output
        )  # browsers closed, not abandoned
        job.assert_nothing_left()
    finally:
        watched.kill()
        watched.wait()


def test_serve_stops_at_once_when_the_process_it_watches_is_already_gone(jobs):
    gone = subprocess.Popen(["true"])
    gone.wait()
    job = jobs(["serve", "echo", "--port", "0", "--exit-with-parent", str(gone.pid)])
    assert job.wait(60) == 0
    assert f"parent process {gone.pid} exited" in job.output
    job.assert_nothing_left()


def test_watch_process_and_descendants():
    child = subprocess.Popen(["sleep", "600"])
    fired = []
    try:
        assert child.pid in lifecycle.descendants(os.getpid())
        lifecycle.watch_process(child.pid, lambda: fired.append(time.monotonic()))
        time.sleep(0.3)
        assert not fired
        child.kill()
        child.wait()
        wait_until(lambda: fired, timeout_s=10)
        assert not lifecycle.pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()


def test_parent_death_signal_reaches_a_grandchild_when_its_parent_is_killed(tmp_path):
    """prctl(PR_SET_PDEATHSIG) via ctypes: the kernel ends the child when its parent dies."""
    tag = f"pdeathsig-{os.getpid()}-{time.monotonic_ns()}"
    grandchild = (
        "import signal, time; from envharness.core.lifecycle import set_parent_death_signal; "
        "assert set_parent_death_signal(signal.SIGKILL); print('armed', flush=True); time.sleep(600)"
    )
    parent = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(600)"
    )
    env = dict(os.environ, ENVHARNESS_TEST_TAG=tag)
    log = tmp_path / "out.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", parent], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "armed" in log.read_text(), timeout_s=60)
        assert len(tagged_processes(tag)) == 2
        proc.kill()
        proc.wait()
        wait_until(lambda: not tagged_processes(tag), timeout_s=30)
    finally:
        for pid in tagged_processes(tag):
            os.kill(pid, signal.SIGKILL)


def test_exit_deadline_kills_the_tree_of_a_stuck_shutdown(tmp_path):
    """A stop that hangs still ends: past the deadline the process kills its children and exits."""
    script = (
        "import subprocess, time; from envharness.core import lifecycle; "
        "subprocess.Popen(['sleep', '600']); lifecycle.exit_deadline(0.5, code=3); time.sleep(600)"
    )
    tag = f"deadline-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, ENVHARNESS_TEST_TAG=tag),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3 and "killed child processes" in proc.stderr
    wait_until(lambda: not tagged_processes(tag), timeout_s=10)
