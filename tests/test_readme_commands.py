"""Every command line README.md shows runs, with tiny sizes, so the front door cannot drift.

A command is a line of one of the README's ```bash blocks (`\\` continuations joined, `#`
comments cut); `code` mentions in prose are not commands. `COVERED` says how each one runs
here, in README order, in one scratch folder per block (so `runs/...` of one line is there for the next):

- `Run(set={...})` runs it with flags replaced or added (`None`: a flag without a value);
- `Serve(...)` starts a server (or a browser node), checks `/health` (CDP's `/json/version`) and stops it with SIGTERM;
- `Make({...})` expands a make target's recipe (`make -n`, nothing executed) and runs each
  recipe line with the overrides of the program it calls; `Make(run=False, why=...)` only
  checks the recipe names what the README says (the suite cannot run itself).

A README command missing from `COVERED` fails `test_every_readme_command_is_covered`:
adding one is one line there. Each command runs in its own session; the test fails if any
process of that session outlives it.

Each ```bash block is one test with its own scratch folder (a block's lines build on each other,
blocks do not); `make test` spreads them over its workers (`SPREAD_FILES` in conftest.py).

The commands start from a prewarmed interpreter (`_prewarmed.py`: torch, transformers and TRL
already imported; everything of envharness imported by the command itself), each in its own
process and session. `ENVHARNESS_TEST_COLD=1` starts every one cold instead.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from _prewarmed import Prewarmed, kill_session, prewarmed_env

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI = ["-c", "import sys; from envharness.cli import main; sys.exit(main())"]


@dataclass
class Run:
    set: dict[str, str | None] = field(default_factory=dict)
    #: Paths (relative to the scratch folder) the command must leave.
    expect: tuple[str, ...] = ()
    #: Text its output must contain.
    says: str = ""
    timeout_s: float = 900


@dataclass
class Serve:
    set: dict[str, str | None] = field(default_factory=dict)


@dataclass
class Make:
    #: recipe program (its last path part, e.g. "envharness", "bench_server.py") -> Run, e.g.
    #: Make({"bench_server.py": Run({"--steps": "10", "--sessions": "2"})}) for `make bench`
    lines: dict[str, Run] = field(default_factory=dict)
    run: bool = True
    why: str = ""


TINY_TRAIN = {"--num-generations": "2", "--groups-per-step": "1", "--max-new-tokens": "4", "--threads": "1"}
TINY_EVAL = {
    "--episodes": "1",
    "--max-steps": "2",
    "--max-new-tokens": "8",
    "--concurrency": "2",
    "--no-progress": None,
}

# README line -> how it runs here. One line per README command.
COVERED: dict[str, Run | Serve | Make] = {
    "make demo": Make(
        {
            "envharness": Run(
                {"--tasks": "click-test", **TINY_EVAL, "--max-steps": "1"}, expect=("runs/demo/report.html",)
            )
        }
    ),
    "make test": Make(run=False, why="the suite itself: running it from a test would recurse"),
    # environments
    "envharness serve browsergym --port 8000 --web": Serve({"--port": "0"}),
    "envharness eval --env textarena --model scripted --tasks rl --episodes 32 --max-turns 12 --out runs/games": Run(
        {"--episodes": "1", "--no-progress": None},
        expect=("runs/games/summary.json",),
        says="TowerOfHanoi-v0",
    ),
    # the commands: evaluate, train, evaluate the checkpoint, compare, replay
    "envharness eval --model embedded --tasks click-test,click-button --episodes 8 --out runs/mine": Run(
        {"--model": "scripted", **TINY_EVAL}, expect=("runs/mine/summary.json", "runs/mine/report.html")
    ),
    "envharness train --tasks click-test --minutes 30 --out runs/train": Run(
        {
            "--model": "tiny",
            "--minutes": "0.01",
            "--num-generations": "2",
            "--groups-per-step": "1",
            "--max-new-tokens": "4",
            "--threads": "1",
        },
        expect=("runs/train/final/config.json", "runs/train/reward_curve.png"),
    ),
    "envharness eval --model runs/train/final --prompt compact --tasks click-test --out runs/trained": Run(
        TINY_EVAL, expect=("runs/trained/summary.json",)
    ),
    "envharness eval --compare runs/mine runs/trained": Run(says="click-test"),
    "envharness replay runs/mine": Run(expect=("runs/mine/replay.json",), says="episodes identical"),
    # training on many tasks: demonstrations, then GRPO on a mix of two environments
    "envharness sft --tasks click-button,click-checkboxes,click-dialog,focus-text,enter-text,login-user "
    "--epochs 1 --lr 5e-5 --prompt compact --max-turns 4 --out runs/sft": Run(
        {"--model": "tiny", "--episodes": "1", "--epochs": "1", "--max-turns": "2", "--threads": "1"},
        expect=("runs/sft/final/config.json",),
    ),
    "envharness train --model runs/sft/final --mix browsergym:click-button,click-checkboxes,click-dialog,"
    "focus-text,enter-text,login-user --mix textarena:Wordle-v0 --curriculum signal --eval-every 10 "
    "--eval-tasks browsergym:enter-password,browsergym:login-user-popup --max-turns 4 --max-new-tokens 24 "
    "--minutes 30 --out runs/mix": Run(
        {**TINY_TRAIN, "--minutes": "0.01", "--eval-every": "1", "--eval-episodes": "1", "--max-turns": "1"},
        expect=("runs/mix/final/config.json", "runs/mix/eval_log.jsonl", "runs/mix/best/best.json"),
    ),
}


def readme_blocks(text: str) -> list[list[str]]:
    """The command lines of each ```bash block, in order."""
    blocks = []
    for block in re.findall(r"^```(?:bash|sh|shell|console)\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        commands = []
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                commands.append(" ".join(line.split()))
        if commands:
            blocks.append(commands)
    return blocks


def readme_commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks, in order."""
    return [command for block in readme_blocks(text) for command in block]


def with_overrides(args: list[str], overrides: dict[str, str | None]) -> list[str]:
    """`args` with each flag's value replaced (or the flag added); `None`: a bare flag."""
    args = list(args)
    for flag, value in overrides.items():
        if flag in args:
            i = args.index(flag)
            if value is not None:
                args[i + 1] = value
        else:
            args += [flag] if value is None else [flag, value]
    return args


def argv_for(tokens: list[str]) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) for a command line: `VAR=x` prefixes go to the environment,
    `envharness` and the venv's python run under this interpreter, repo scripts by full path."""
    env = {}
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    program, rest = tokens[0], tokens[1:]
    if Path(program).name == "envharness":
        return [sys.executable, *CLI, *rest], env
    if Path(program).name.startswith("python"):
        script = ROOT / rest[0]
        assert script.is_file(), f"{rest[0]} does not exist"
        return [sys.executable, str(script), *rest[1:]], env
    raise AssertionError(f"no way to run {program!r} here: teach argv_for")


def recipe(target: str) -> list[str]:
    """The recipe lines of a make target and its prerequisites, without running anything."""
    # run from inside `make test`, make would also print "make[1]: Entering directory ..."
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.replace("\\\n", " ").splitlines() if line.strip()]


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) == sid:  # field 6 of /proc/PID/stat: the session id
                pids.append(int(entry.name))
    return pids


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = prewarmed_env(ROOT)
    env.update(extra)
    return env


def _finish(proc: Any, name: str) -> None:
    """Fail if anything the command started (its session) is still alive; kill it if so."""
    deadline = time.monotonic() + 20
    while (left := _session_pids(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{name}: left processes behind: {left}")


#: Variables a command line may set (`VAR=x cmd`) and still fork from the prewarmed interpreter:
#: none of its preloaded libraries reads them (Playwright is not preloaded).
FORK_SAFE_VARIABLES = {"PLAYWRIGHT_BROWSERS_PATH"}


def start(argv: list[str], env: dict[str, str], cwd: Path, prewarmed: Prewarmed) -> tuple[Any, Path]:
    """(process, its output file): forked from the prewarmed interpreter when it can be (see
    `_prewarmed`), else a cold start; a command line that sets other variables than
    `FORK_SAFE_VARIABLES` starts cold, since the preloaded libraries may read them at import.
    Either way, its own session."""
    out = cwd / f".output-{uuid.uuid4().hex[:8]}.txt"
    full_env = _env(env)
    proc = (
        None if set(env) - FORK_SAFE_VARIABLES else prewarmed.start(argv[1:], cwd=cwd, env=full_env, out=out)
    )
    if proc is None:
        with out.open("w") as sink:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    return proc, out


def run_line(
    argv: list[str], env: dict[str, str], cwd: Path, spec: Run, name: str, prewarmed: Prewarmed
) -> None:
    proc, out = start(argv, env, cwd, prewarmed)
    try:
        proc.wait(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        kill_session(proc.pid)
        proc.wait(60)
        raise AssertionError(f"{name}: still running after {spec.timeout_s}s") from None
    output = out.read_text(errors="replace")
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{output[-4000:]}"
    assert spec.says in output, f"{name}: output lacks {spec.says!r}:\n{output[-2000:]}"
    for path in spec.expect:
        assert (cwd / path).exists(), f"{name}: did not leave {path}:\n{output[-2000:]}"
    _finish(proc, name)


def serve_line(argv: list[str], env: dict[str, str], cwd: Path, name: str, prewarmed: Prewarmed) -> None:
    proc, out = start(argv, env, cwd, prewarmed)
    try:
        deadline = time.monotonic() + 300
        while (
            "\n" not in (output := out.read_text(errors="replace"))
            and proc.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        line = output.split("\n", 1)[
            0
        ]  # "envharness serve: NAME listening on http://HOST:PORT" (browser: cdp://)
        match = re.search(r"listening on ((?:http|cdp)://\S+)", line)
        assert match, f"{name}: no URL in its first line: {output[-2000:]!r}"
        url = match.group(1)  # a browser node answers CDP's /json/version, a server /health
        reply = httpx.get(
            url.replace("cdp://", "http://") + ("/json/version" if url.startswith("cdp://") else "/health"),
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        rest = out.read_text(errors="replace")
        assert proc.returncode == 0 and "stopped" in rest, f"{name}: exit {proc.returncode}:\n{rest[-2000:]}"
    finally:
        if proc.poll() is None:
            kill_session(proc.pid)
            proc.wait(60)
    _finish(proc, name)


def test_every_readme_command_is_covered():
    commands = readme_commands(README.read_text())
    assert (
        "envharness train --tasks click-test --minutes 30 --out runs/train" in commands
    )  # the extraction works
    missing = [c for c in commands if c not in COVERED]
    assert not missing, (
        "README.md shows commands tests/test_readme_commands.py does not run; add them to COVERED:\n"
        + "\n".join(missing)
    )
    stale = [c for c in COVERED if c not in commands]
    assert not stale, "COVERED has commands README.md no longer shows:\n" + "\n".join(stale)
    for command, spec in COVERED.items():  # every make recipe line has its overrides
        if isinstance(spec, Make) and spec.run:
            programs = [Path(t).name for line in recipe(command.split()[1]) for t in shlex.split(line)[:4]]
            for program in spec.lines:
                assert program in programs, f"{command}: its recipe no longer runs {program}"


def test_overrides_replace_or_add_flags():
    args = shlex.split("eval --tasks a,b --episodes 8 --out runs/x")
    assert with_overrides(args, {"--episodes": "1", "--no-progress": None, "--seed": "3"}) == [
        "eval",
        "--tasks",
        "a,b",
        "--episodes",
        "1",
        "--out",
        "runs/x",
        "--no-progress",
        "--seed",
        "3",
    ]
    assert readme_commands(
        "```bash\nmake demo   # x\nenvharness a \\\n  --b 1\n```\n```python\nenvharness no\n```\n"
    ) == ["make demo", "envharness a --b 1"]


BLOCKS = readme_blocks(README.read_text())


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b[0][:48]) for b in reversed(BLOCKS)]
)  # the costliest blocks are last
def test_readme_commands_run_with_tiny_sizes(block, tmp_path, prewarmed):
    for command in block:
        assert command in COVERED, f"{command}: not in COVERED (see test_every_readme_command_is_covered)"
        spec = COVERED[command]
        if isinstance(spec, Make):
            lines = recipe(command.split()[1])
            if not spec.run:
                assert lines, f"{command}: empty recipe"
                continue
            for line in lines:
                tokens = shlex.split(line)
                if tokens[:2] == ["bash", "scripts/setup.sh"]:
                    continue  # the set-up this test runs in
                env_free = [t for t in tokens if not re.match(r"^[A-Z_][A-Z0-9_]*=", t)]
                key = (
                    Path(env_free[0]).name
                    if Path(env_free[0]).name == "envharness"
                    else Path(env_free[1]).name
                )
                assert key in spec.lines, f"{command}: no overrides for its recipe line {line!r}"
                argv, env = argv_for(tokens)
                sub = spec.lines[key]
                run_line(with_overrides(argv, sub.set), env, tmp_path, sub, f"{command}: {key}", prewarmed)
        elif isinstance(spec, Serve):
            argv, env = argv_for(shlex.split(command))
            serve_line(with_overrides(argv, spec.set), env, tmp_path, command, prewarmed)
        else:
            argv, env = argv_for(shlex.split(command))
            run_line(with_overrides(argv, spec.set), env, tmp_path, spec, command, prewarmed)
