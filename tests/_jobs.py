"""A job in a subprocess, tagged so that /proc shows exactly the processes it started.

Every process of the job (the command, its `envharness serve`, the Playwright driver,
Chromium) inherits `ENVHARNESS_TEST_TAG=<unique>` in its environment; `tagged()` finds
them wherever they were reparented to, and nothing else running on the machine.

A job starts with SIGINT at its default, as a command typed at a terminal does: a suite
started in the background (`nohup make test &`, a script's `cmd &`) runs with SIGINT
ignored, every child inherits that, and a Ctrl-C sent to the job would do nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from _prewarmed import Prewarmed, PrewarmedProcess

CLI = [sys.executable, "-c", "import sys; from envharness.cli import main; sys.exit(main())"]


def default_sigint() -> None:
    """`preexec_fn` of a child that must stop on Ctrl-C even when this process ignores SIGINT
    (an ignored signal stays ignored across exec; Python then installs no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tagged_processes(tag: str) -> dict[int, str]:
    """pid -> command line of every live (non-zombie) process whose environment has `tag`."""
    needle = f"ENVHARNESS_TEST_TAG={tag}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                continue
            found[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            )
        except (OSError, IndexError):
            continue
    return found


class Job:
    """`Job(args, tmp_path)` runs `envharness ARGS` (or `python SCRIPT` with `script=`), in its
    own session; with `prewarmed=` (the fixture) it is forked from the prewarmed interpreter,
    which spares it the import of torch, transformers and TRL (`_prewarmed.py`)."""

    def __init__(
        self,
        args: list[str],
        tmp_path: Path,
        *,
        script: str | None = None,
        prewarmed: Prewarmed | None = None,
    ) -> None:
        self.tag = uuid.uuid4().hex
        self.log_path = tmp_path / f"job-{self.tag[:8]}.log"
        env = dict(
            os.environ, ENVHARNESS_TEST_TAG=self.tag, TRL_EXPERIMENTAL_SILENCE="1", PYTHONUNBUFFERED="1"
        )
        command = [sys.executable, "-c", script, *args] if script is not None else [*CLI, *args]
        self.proc: subprocess.Popen | PrewarmedProcess | None = None
        if prewarmed is not None:
            self.proc = prewarmed.start(command[1:], cwd=Path.cwd(), env=env, out=self.log_path)
        if self.proc is None:
            with self.log_path.open("w") as log:
                # its own session: a Ctrl-C goes to the job's process group, as a terminal sends it
                self.proc = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                    preexec_fn=default_sigint,
                )

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_until(
        self, predicate: Callable[[], bool], timeout_s: float = 240.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            # an exit between the check and here may come after the job wrote what was awaited: look once more
            if self.proc.poll() is not None and not predicate():
                raise AssertionError(
                    f"the job exited ({self.proc.returncode}) before {what}:\n{self.output[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout_s:.0f}s:\n{self.output[-3000:]}")
            time.sleep(0.2)

    def wait_for_output(self, text: str, timeout_s: float = 240.0) -> None:
        self.wait_until(lambda: text in self.output, timeout_s, what=repr(text))

    def signal(self, sig: int, *, group: bool = False) -> None:
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)

    def wait(self, timeout_s: float = 120.0) -> int:
        return self.proc.wait(timeout_s)

    def tagged(self) -> dict[int, str]:
        """The job's processes: what it started (a forked job's own /proc environ is the prewarmed
        interpreter's, so the job process itself is not among them; `proc` is)."""
        return tagged_processes(self.tag)

    def assert_nothing_left(self, within_s: float = 30.0) -> None:
        """Every process of the job is gone within `within_s` (a guard against hangs; it takes ~1-2 s)."""
        deadline = time.monotonic() + within_s
        while (left := self.tagged()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left running: {left}"

    def kill_all(self) -> None:
        """Clean-up after a failed test: the job's own processes only."""
        for pid in self.tagged():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def held_at_step(step: int) -> str:
    """A `Job(script=...)` that runs `envharness ARGS` with every trainer held once `step`
    optimizer steps are done, before the next begins (every callback of step `step` has run: it
    is logged and counted as finished); it prints `held at step N` and waits there, so a signal
    sent on that line always arrives mid-run, however fast the machine is."""
    return (
        "import sys, time\n"
        "import transformers\n"
        "from transformers import TrainerCallback\n"
        "class Hold(TrainerCallback):\n"
        "    def on_step_begin(self, args, state, control, **kwargs):\n"
        f"        if state.global_step == {step}:\n"
        f"            print('held at step {step}', flush=True)\n"
        "            while True:\n"
        "                time.sleep(0.1)\n"
        "init = transformers.Trainer.__init__\n"
        "def held_init(self, *args, **kwargs):\n"
        "    init(self, *args, **kwargs)\n"
        "    self.add_callback(Hold())\n"
        "transformers.Trainer.__init__ = held_init\n"
        "from envharness.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )


def kill_tree(proc: subprocess.Popen, tag: str) -> None:
    """SIGKILL to `proc`'s process group and to every process tagged `tag` (those that started
    sessions of their own: a server, torchrun's ranks, Chromium)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in tagged_processes(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_tree(
    command: list[str], *, timeout: float, env: dict | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """`subprocess.run(command, timeout=...)` for a command that starts processes of its own
    (torchrun and its ranks, `eval` and its server): it runs in its own session, tagged, and on
    a timeout (or any error here) the whole tree is killed, not just the command, before
    `TimeoutExpired` is raised. `capture_output`, `text` and `cwd` as for `subprocess.run`."""
    tag = uuid.uuid4().hex
    env = {**(os.environ if env is None else env), "ENVHARNESS_TEST_TAG": tag}
    if kwargs.pop("capture_output", False):
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check = kwargs.pop("check", False)
    proc = subprocess.Popen(command, env=env, start_new_session=True, **kwargs)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        kill_tree(proc, tag)
        proc.communicate()
        raise
    done = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done
