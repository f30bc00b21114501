"""Command lines in processes forked from a Python that has already imported torch, transformers
and TRL: the README commands' test and the jobs of `_jobs.py` start ~40 of them, and each would
otherwise spend 3-7 s of CPU importing those libraries before any envharness code runs. The
`prewarmed` fixture (conftest.py) holds one such interpreter per test process.

What stays as a user's start: each command is its own process (`python -c CODE` or `python
SCRIPT`), in its own session, working folder, environment and output file, with its own exit
status; it imports every envharness module itself (the prewarmed interpreter imports none), and
it ends through the interpreter's normal shutdown (atexit handlers, thread joins). What differs:
the third-party modules of `PRELOAD` are already imported, with the environment the interpreter
was started with, so a command that sets variables those libraries read at import must start
cold (the caller's choice).

The interpreter forks only while it runs one Python thread (checked), so no lock of a Python thread
that does not exist in the child can be held. The native threads the imports start (OpenBLAS's
workers, pyarrow's jemalloc background thread) are fork-safe by their own `pthread_atfork`
handlers; torch's thread pools start on first use, in the child.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: What the prewarmed interpreter imports: what `envharness train` and `eval` load before their
#: own code runs (TRL brings datasets, accelerate and pandas).
PRELOAD = "import torch, transformers, trl; from transformers import AutoModelForCausalLM, AutoTokenizer; from trl import GRPOTrainer"

# The prewarmed interpreter. It answers each request (a JSON line: argv, cwd, env, out) with
# {"pid": N} and, once that process has ended, {"exit": N, "code": C}. The fork's child leaves the
# loop and runs the command as this interpreter's main program.
_SERVER = r"""
import gc, json, os, signal, socket, sys, threading
{preload}
sock = socket.socket(fileno=int(sys.argv[1]))
threads = threading.active_count()
sock.sendall((json.dumps({{"ready": threads}}) + "\n").encode())
if threads != 1:
    sys.exit(0)
gc.collect()
gc.freeze()

def serve():
    buffer, children = b"", set()
    sock.settimeout(0.05)
    while True:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            children.discard(pid)
            sock.sendall((json.dumps({{"exit": pid, "code": os.waitstatus_to_exitcode(status)}}) + "\n").encode())
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            sys.exit(0)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                return request
            children.add(pid)
            sock.sendall((json.dumps({{"pid": pid}}) + "\n").encode())

request = serve()
sock.close()
os.setsid()
os.chdir(request["cwd"])
out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(out, 1)
os.dup2(out, 2)
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.environ.clear()
os.environ.update(request["env"])
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if request["env"].get("PYTHONUNBUFFERED"):  # as `python -u`: read at start-up, so redone here
    import io
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0), encoding=sys.stdout.encoding, errors=sys.stdout.errors, write_through=True)
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0), encoding=sys.stderr.encoding, errors="backslashreplace", write_through=True)
del serve, sock, out
argv = request["argv"]
if argv[0] == "-c":
    sys.argv = ["-c", *argv[2:]]
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    exec(compile(argv[1], "<string>", "exec"), main.__dict__)
else:
    import runpy
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
"""


class PrewarmedProcess:
    """A started command: `pid`, `poll()`, `wait(timeout)`, `send_signal(sig)`, `kill()`, `returncode`,
    as `subprocess.Popen` has them; its output is in the file `out`."""

    def __init__(self, server: Prewarmed, pid: int, out: Path) -> None:
        self._server, self.pid, self.out = server, pid, out
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout_s=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout_s=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Prewarmed:
    """One prewarmed interpreter (started on first use, in `env`); `start()` forks a command from it."""

    def __init__(self, env: dict[str, str], *, enabled: bool = True) -> None:
        self.env = dict(env)
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._exits: dict[int, int] = {}
        self._usable = enabled

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str], out: Path) -> PrewarmedProcess | None:
        """`argv` as after `python` (`["-c", CODE, *args]` or `[SCRIPT, *args]`), run with `env`;
        None when no prewarmed interpreter is usable (start it cold then)."""
        if not self._ensure_started():
            return None
        out.touch()  # readable from now on, as a cold start's output file is
        self._send({"argv": argv, "cwd": str(cwd), "env": env, "out": str(out)})
        while True:
            message = self._read(timeout_s=60)
            if message is None:
                raise RuntimeError("the prewarmed interpreter did not answer")
            if "pid" in message:
                return PrewarmedProcess(self, message["pid"], out)

    def exit_code(self, pid: int, timeout_s: float | None) -> int | None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pid not in self._exits:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._read(timeout_s=left) is None and (deadline is not None and time.monotonic() >= deadline):
                return None
        return self._exits[pid]

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._proc is not None:
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def _ensure_started(self) -> bool:
        if self._proc is None and self._usable:
            ours, theirs = socket.socketpair()
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SERVER.format(preload=PRELOAD), str(theirs.fileno())],
                env=self.env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
            theirs.close()
            self._sock = ours
            ready = self._read(timeout_s=300)
            self._usable = ready is not None and ready.get("ready") == 1
        return self._usable

    def _send(self, message: dict) -> None:
        assert self._sock is not None
        self._sock.sendall((json.dumps(message) + "\n").encode())

    def _read(self, timeout_s: float | None) -> dict | None:
        """The next message (exit reports are filed on the way); None after `timeout_s`."""
        assert self._sock is not None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            self._sock.settimeout(None if deadline is None else max(0.0, deadline - time.monotonic()))
            try:
                chunk = self._sock.recv(65536)
            except (TimeoutError, BlockingIOError):  # (0 s: what has arrived, without waiting)
                return None
            if not chunk:
                raise RuntimeError("the prewarmed interpreter ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)
        if "exit" in message:
            self._exits[message["exit"]] = message["code"]
        return message


def prewarmed_env(root: Path) -> dict[str, str]:
    """The environment the prewarmed interpreter starts in: this one, with the checkout's `src`
    first on the path and the variables the suite's commands share."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.setdefault("PLAYWRIGHT_BROWSERS_PATH", str(root / ".venv" / "ms-playwright"))
    env.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return env


def kill_session(pid: int) -> None:
    """SIGKILL to the session `pid` leads, and to `pid` itself (a fork that has not yet made its
    session is in its parent's group)."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass
