"""Ctrl-C and SIGTERM for long commands (`eval`, `train`): one way to stop, one line to say so.

SIGTERM (a scheduler's preemption, `kill`) is handled exactly like Ctrl-C: it goes to the
SIGINT handler in force, so inside `asyncio.run` the main task is cancelled and every
`finally` runs (servers stopped, files flushed) before `KeyboardInterrupt` comes out. The
command catches that, prints one line (what was kept, the command that resumes) and
exits 130 (SIGINT) or 143 (SIGTERM), the shell's codes for death by those signals.
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any


class InterruptGuard:
    """`with InterruptGuard() as guard:` routes SIGTERM to the SIGINT path; `guard.exit_code`
    and `guard.signal_name` say which signal stopped the command."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: Any = None
        self._installed = False

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signal.SIGTERM
        handler = signal.getsignal(signal.SIGINT)  # asyncio.run's own while a loop runs
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or signal.SIGINT)

    @property
    def signal_name(self) -> str:
        return "SIGTERM" if self.signum == signal.SIGTERM else "Ctrl-C (SIGINT)"


def resume_command(
    argv: Sequence[str] | None,
    *,
    out_flag: str,
    out: str,
    drop: Sequence[str] = ("--overwrite",),
    aliases: Sequence[str] = ("--output-dir",),
) -> str:
    """The command line that resumes this run: the same arguments, the run folder named
    explicitly as `out_flag` (a default one has the start time in its name; `aliases` are its
    old spellings), plus `--resume`."""
    args = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--resume", *drop):
            continue
        if name == out_flag or name in aliases:
            skip = "=" not in arg  # its value follows
            continue
        kept.append(arg)
    return shlex.join(["envharness", *kept, out_flag, out, "--resume"])


def say_interrupted(command: str, guard: InterruptGuard, kept: str, resume: str) -> int:
    """Print the one line an interrupted command leaves; returns its exit code."""
    print(
        f"envharness {command}: stopped by {guard.signal_name}; kept {kept}. Resume with: {resume}",
        file=sys.stderr,
        flush=True,
    )
    return guard.exit_code


def say_checkpoints_kept(
    command: str,
    guard: InterruptGuard,
    argv: Sequence[str] | None,
    output_dir: str,
    kept: Callable[[Any], str] | None = None,
) -> int:
    """The line of an interrupted training run (`train`, `sft`): the newest checkpoint kept and
    the command that resumes it, or, with none, the command that starts over."""
    from envharness.integrations.trl.resume import latest_checkpoint

    latest = latest_checkpoint(output_dir)
    if latest is None:
        command_line = resume_command(argv, out_flag="--out", out=output_dir).removesuffix(" --resume")
        return say_interrupted(command, guard, f"nothing (no step finished) in {output_dir}", command_line)
    what = kept(latest) if kept else f"{latest.step} step(s) in {latest.path}"
    return say_interrupted(command, guard, what, resume_command(argv, out_flag="--out", out=output_dir))
