"""`envharness train` as several processes (torchrun, gloo on this CPU): one batch learned the
same way as by one process, one decision where ranks could disagree, every file written once."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from _jobs import run_tree
from _prewarmed import Prewarmed, PrewarmedProcess, kill_session
from conftest import wait_until

from envharness.cli.train import run_rank
from envharness.integrations.trl import ranks
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.grpo_args import loss_passes
from envharness.integrations.trl.training import TrainConfig, TrainSetupError

pytestmark = pytest.mark.timeout(600)
STEP = Path(__file__).with_name("distributed_step.py")
HELD_OUT = Path(__file__).with_name("distributed_held_out.py")
VISION_STEP = Path(__file__).with_name("distributed_vision_step.py")


def run_script(
    processes: int, command: list[str], env: dict, timeout: float, prewarmed: Prewarmed | None = None
) -> subprocess.CompletedProcess:
    """`python COMMAND` to its end as `processes` processes: forked from the prewarmed interpreter
    where one is given (`start_ranks`: each cold rank would spend ~11 CPU-s importing torch,
    transformers and TRL), else through torchrun's agent. Their output comes back as stderr.
    COMMAND is `SCRIPT OUT ...`, OUT a path in the test's folder."""
    if prewarmed is not None:
        started = start_ranks(prewarmed, processes, command, env)
        if started is not None:
            return wait_ranks(command, started, timeout)
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    full = [sys.executable, *(launcher if processes > 1 else []), *command]
    return run_tree(full, capture_output=True, text=True, timeout=timeout, env=env)


def start_ranks(
    prewarmed: Prewarmed, processes: int, command: list[str], env: dict
) -> list[tuple[PrewarmedProcess, Path]] | None:
    """`processes` ranks of `python COMMAND` forked from the prewarmed interpreter, met as
    torchrun's ranks meet (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT: `env://`), each
    with its output file; None when no prewarmed interpreter is usable. What torchrun's agent
    adds (its rendezvous, restarts, stopping the others when one fails) is tested where
    torchrun is the point: the users' launchers, `train --processes`, a rank that dies."""
    with socket.socket() as probe:  # a free port for rank 0's store (torchrun --standalone does the same)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    meet = {"WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)} if processes > 1 else {}  # fmt: skip
    started = []
    for rank in range(processes):
        log = Path(f"{command[1]}.p{processes}r{rank}.log")
        ranked = {**env, **meet, **({"RANK": str(rank), "LOCAL_RANK": str(rank)} if meet else {})}
        process = prewarmed.start(command, cwd=Path.cwd(), env=ranked, out=log)
        if process is None:
            return None
        started.append((process, log))
    return started


def wait_ranks(
    command: list[str], started: list[tuple[PrewarmedProcess, Path]], timeout: float
) -> subprocess.CompletedProcess:
    """The ranks to their end (all stopped once one fails, as torchrun's agent does); their
    output, each line prefixed `[rankN]:` where there are several, comes back as stderr."""
    deadline, code = time.monotonic() + timeout, 0
    try:
        while any(p.poll() is None for p, _ in started) and time.monotonic() < deadline:
            if code := next((p.returncode for p, _ in started if p.returncode), 0):
                break
            time.sleep(0.2)
        code = next((p.poll() for p, _ in started if p.poll()), code)
        if code == 0 and any(p.poll() is None for p, _ in started):
            code = -signal.SIGKILL  # past the timeout
    finally:
        for process, _ in started:
            kill_session(process.pid)
    output = [log.read_text(errors="replace") for _, log in started]
    if len(output) > 1:
        output = [
            "".join(f"[rank{r}]: {line}\n" for line in text.splitlines()) for r, text in enumerate(output)
        ]
    return subprocess.CompletedProcess(command, code, "", "".join(output))


def launch(processes: int, script: Path, *args: str, prewarmed: Prewarmed | None = None) -> None:
    """`script ARGS` run to its end as `processes` processes (see `run_script`)."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a rank that aborts shows where
    done = run_script(processes, [str(script), *args], env, 500, prewarmed)
    assert done.returncode == 0, done.stderr[-3000:]


def one_step(
    tmp_path: Path, processes: int, *args: str, script: Path, prewarmed: Prewarmed | None = None
) -> dict:
    """The weights and gradient of the one step `script OUT.pt ARGS` saves, as `processes` processes."""
    out = tmp_path / f"{script.stem}-p{processes}-{'-'.join(args)}.pt"
    launch(processes, script, str(out), *args, prewarmed=prewarmed)
    return torch.load(out)


def steps(
    tmp_path: Path, processes: int, specs: list[str], prewarmed: Prewarmed | None = None
) -> dict[str, dict]:
    """The weights and gradient of one GRPO step on fixed episodes for each spec
    (tests/distributed_step.py: LOSS,MICRO_BATCH,SIGNAL[,lora]), as `processes` processes."""
    out = tmp_path / f"steps-p{processes}"
    out.mkdir()
    launch(processes, STEP, str(out), *specs, prewarmed=prewarmed)
    return {spec: torch.load(out / f"{spec}.pt") for spec in specs}


def assert_same_step(one: dict, two: dict, what: str = "") -> None:
    assert (one["processes"], two["processes"]) == (1, 2), what  # the ranks met: one step, not two alone
    grads, weights = one["grads"], one["weights"]
    assert grads and grads.keys() == two["grads"].keys(), what
    scale = max(g.abs().max().item() for g in grads.values())
    assert scale > 0, what  # the step learned something
    for name, g in grads.items():
        assert torch.allclose(two["grads"][name], g, rtol=1e-4, atol=1e-6 * scale), (what, name)
    for name, w in weights.items():
        assert torch.allclose(two["weights"][name], w, rtol=1e-4), (what, name)


#: The text steps compared on 1 and 2 processes, each a fresh model, all in one launch a count:
#: grpo with micro-batch 2 (each rank's 4 episodes in 2 loss passes, against 4 passes on one
#: process); --lora's adapter; dapo where rank 0's group has one reward for all its episodes
#: and rank 1's does not (a rank that skipped its loss alone would leave DDP's gradient
#: all-reduce waiting: it hangs, checked).
GRPO, LORA, NO_SIGNAL_ON_ONE_RANK = "grpo,2,all", "grpo,0,all,lora", "dapo,0,one"


@pytest.mark.slow
def test_two_processes_take_the_step_of_one_full_lora_and_without_signal_on_a_rank(tmp_path, prewarmed):
    specs = [GRPO, LORA, NO_SIGNAL_ON_ONE_RANK]
    one, two = steps(tmp_path, 1, specs, prewarmed), steps(tmp_path, 2, specs, prewarmed)
    # --lora: only the adapter's weights have gradients, and they match across process counts
    assert one[LORA]["grads"] and all("lora_" in name for name in one[LORA]["grads"])
    assert one[NO_SIGNAL_ON_ONE_RANK]["grads"]
    for spec in specs:
        assert_same_step(one[spec], two[spec], spec)


@pytest.mark.slow
def test_two_processes_take_the_vision_step_of_one(tmp_path, prewarmed):
    # VisionGRPOTrainer, tiny Qwen2-VL, one screenshot an episode: each rank's loss pass gets the
    # pixels of its own rows, and DDP's average equals the one-process step
    one = one_step(tmp_path, 1, script=VISION_STEP, prewarmed=prewarmed)
    two = one_step(tmp_path, 2, script=VISION_STEP, prewarmed=prewarmed)
    assert any(n.startswith("model.visual") and g.abs().max() > 0 for n, g in one["grads"].items())
    assert_same_step(one, two)


def held_out(
    tmp_path: Path, processes: int, episodes: int, fail_rank: int = -1, prewarmed: Prewarmed | None = None
) -> tuple[subprocess.CompletedProcess, Path]:
    """One held-out evaluation (tests/distributed_held_out.py) as `processes` processes, and
    the folder it wrote."""
    out = tmp_path / f"held-out-{processes}-{fail_rank}"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    command = [str(HELD_OUT), str(out), str(episodes), str(fail_rank)]
    return run_script(processes, command, env, 300, prewarmed), out


@pytest.mark.slow
def test_held_out_seeds_split_across_ranks_count_as_on_one(tmp_path, prewarmed):
    (one, one_out), (two, two_out) = (held_out(tmp_path, n, 7, prewarmed=prewarmed) for n in (1, 2))
    assert one.returncode == 0, one.stderr[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    alone = json.loads((one_out / "rank0.json").read_text())
    shares = [json.loads((two_out / f"rank{r}.json").read_text()) for r in (0, 1)]
    for task in ("a", "b"):  # every seed played once, on one rank or the other (4 + 3)
        assert sorted(shares[0]["played"][task] + shares[1]["played"][task]) == list(range(7))
        assert len(shares[0]["played"][task]) == 4 and len(shares[1]["played"][task]) == 3
    # seeds 0, 3, 6 win task a, 0 and 1 task b: 3/7 and 2/7 on one process and on two
    assert alone["entry"]["eval/a/success"] == 3 / 7 and alone["entry"]["eval/b/success"] == 2 / 7
    assert shares[0]["entry"] == shares[1]["entry"] == alone["entry"]
    assert len((two_out / "eval_log.jsonl").read_text().splitlines()) == 1  # rank 0 logs it once
    assert json.loads((two_out / "best" / "best.json").read_text())["eval/trained_mean"] == 3 / 7


@pytest.mark.slow
def test_a_rank_whose_held_out_episodes_fail_stops_every_rank_in_words(tmp_path):
    # rank 1's episodes fail, rank 0's do not: rank 0 learns why at the gather, and neither goes on
    failed, out = held_out(tmp_path, 2, 3, fail_rank=1)
    assert failed.returncode != 0
    assert (
        "held-out evaluation failed on rank 1: RuntimeError: the environment server went away"
        in failed.stderr
    )
    assert "[rank0]: RuntimeError: held-out evaluation failed on rank 1" in failed.stderr  # torchrun's prefix
    assert not list(out.glob("rank*.json")) and not (out / "best").exists()


def test_the_batch_must_split_across_processes():
    config = TrainConfig(num_generations=4, groups_per_step=2)
    assert loss_passes(config, 2) == (4, 1)
    assert loss_passes(TrainConfig(num_generations=4, groups_per_step=2, micro_batch=2), 2) == (2, 2)
    with pytest.raises(TrainSetupError, match="does not split evenly across 3 processes"):
        loss_passes(config, 3)
    with pytest.raises(TrainSetupError, match="must divide each process.s 4 of the batch of 8"):
        loss_passes(TrainConfig(num_generations=4, groups_per_step=2, micro_batch=3), 2)


def test_what_cannot_run_on_many_processes_is_refused_in_words(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert ranks.world_size() == 2
    base = dict(model="tiny", env="textarena", tasks=["Wordle-v0"], output_dir=str(tmp_path))
    assert check_config(TrainConfig(**base, eval_every=2)).config.eval_every == 2  # runs on every rank
    with pytest.raises(TrainSetupError, match="--processes 3 under a launcher that started 2"):
        check_config(TrainConfig(**base, processes=3))


#: A sitecustomize that patches `module.NAME` once `module` is imported, wherever that happens:
#: in a rank, or in the forkserver the ranks fork from (which imports it before any rank exists,
#: so what a patch does per rank it decides when called, from the rank's RANK).
PATCH_ON_IMPORT = """
import importlib.util, os, sys


def patch_on_import(module_name, patch):
    class Hook:
        def find_spec(self, name, path=None, target=None):
            if name != module_name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            load = spec.loader.exec_module

            def exec_module(module):
                load(module)
                patch(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Hook())
"""

#: The --minutes budget is endless on rank 0 and spent on rank 1 (at its first step's end,
#: however long the step took).
ONLY_RANK_1_RUNS_OUT_OF_TIME = (
    PATCH_ON_IMPORT
    + """

def patch(module):
    init = module.TimeBudgetCallback.__init__

    def budget(self, minutes):
        init(self, minutes)
        self.seconds = {"0": float("inf"), "1": 0.0}.get(os.environ.get("RANK"), self.seconds)

    module.TimeBudgetCallback.__init__ = budget


patch_on_import("envharness.integrations.trl.callbacks", patch)
"""
)


@pytest.mark.slow
def test_train_processes_2_writes_each_file_once_and_resumes(tmp_path):
    """Two steps, then one more by --resume under --minutes; with --curriculum signal on two
    tasks: every rank plays the plan rank 0 logs, drawn from every rank's episodes, and --minutes
    stops every rank at the same step though only rank 1's budget runs out (a sitecustomize
    only this run puts on the path makes rank 0's endless and rank 1's spent after one step,
    whatever a step takes: a rank 0 that went on alone would wait for rank 1 at its next step's
    gather until the timeout kills the run)."""
    out = tmp_path / "run"
    train = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena",
             "--tasks", "Wordle-v0,Mastermind-v0", "--curriculum", "signal", "--model", "tiny",
             "--processes", "2", "--threads", "1", "--out", str(out), "--eval-every", "1", "--eval-episodes", "3"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    first = run_tree([*train, "--steps", "2"], capture_output=True, text=True, timeout=500, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("trained 2 steps") == 1  # rank 0 alone reports
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(ONLY_RANK_1_RUNS_OUT_OF_TIME)
    env_hooked = {**env, "PYTHONPATH": os.pathsep.join([str(hook), env.get("PYTHONPATH", "")])}
    again = run_tree([*train, "--minutes", "60", "--resume"], capture_output=True, text=True, timeout=500,
                     env=env_hooked)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    # 8 episodes a step, 4 from each rank, every one once and whole
    assert [r["metrics"]["train_step"] for r in records] == [s for s in range(3) for _ in range(8)]
    assert [r["metrics"]["rank"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1] * 3
    steps = [json.loads(line).get("step") for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [s for s in steps[:-1]] == [1, 2, 3]  # then the run's summary line
    logged = json.loads((out / "train_log.jsonl").read_text().splitlines()[0])
    assert logged["num_tokens"] > 0 and "reward" in logged
    assert (out / "final" / "config.json").exists() and (out / "reward_curve.png").exists()
    # held-out evaluation: 3 seeds split 2 + 1 across the ranks, one entry a step, counted whole
    evaluated = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evaluated] == [1, 2, 3]
    assert all(e["eval/Wordle-v0/success"] * 3 in (0, 1, 2, 3) for e in evaluated)
    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()[:-1]]
    assert [e["eval/trained_mean"] for e in logs] == [e["eval/trained_mean"] for e in evaluated]
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["held_out_seeds"] == 3 and best["step"] in (1, 2, 3)
    assert (out / "best" / "config.json").exists()
    # the curriculum: each step's groups (rank 0's, then rank 1's) played the tasks rank 0 drew,
    # and rank 0's plan counts every rank's episodes (8 a step, not its own 4)
    for step, entry in enumerate(logs):
        played = [r["task"] for r in records if r["metrics"]["train_step"] == step]
        assert played == [task for task in entry["curriculum/drawn"] for _ in range(4)], (step, entry)
    assert [sum(t["episodes"] for t in e["curriculum/plan"].values()) for e in logs[:2]] == [0, 8]


@pytest.mark.skipif(torch.cuda.device_count() >= 4, reason="a machine with 4 GPUs can start 4 processes")
def test_more_processes_than_gpus_is_refused_before_any_starts():
    with pytest.raises(ValueError, match=r"--processes 4: this machine has \d GPU\(s\), one process per GPU"):
        ranks.launch(["train", "--device", "cuda"], 4, "cuda", run_rank)


#: Rank 1, once it joins the others, crashes hard when the run has logged a step: no cleanup, no words.
DIE_AFTER_FIRST_STEP = (
    PATCH_ON_IMPORT
    + """
import threading, time
from pathlib import Path


def die():
    log = Path(os.environ["DIE_WHEN_LOGGED"])
    while not (log.exists() and log.read_text().strip()):
        time.sleep(0.2)
    os._exit(3)


def patch(module):
    join = module.join

    def join_then_die():
        if os.environ.get("RANK") == "1":
            threading.Thread(target=die, daemon=True).start()
        join()

    module.join = join_then_die


patch_on_import("envharness.integrations.trl.ranks", patch)
"""
)


def group_left(pgid: int) -> list[str]:
    """The processes of process group `pgid` still running (`ps`)."""
    ps = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if line.split()[1] == str(pgid) and "Z" not in line.split()[2]]


@pytest.mark.slow
def test_a_rank_that_dies_stops_the_run_in_words_and_leaves_nothing_running(tmp_path):
    # rank 1 exits hard after step 1 (a sitecustomize only this test puts on the path); rank 0
    # is then waiting on it in a collective, and the run must end, say which rank died, and
    # leave no rank or server behind
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DIE_AFTER_FIRST_STEP)
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(PYTHONPATH=os.pathsep.join([str(hook), env.get("PYTHONPATH", "")]),
               DIE_WHEN_LOGGED=str(out / "train_log.jsonl"))  # fmt: skip
    train = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena", "--tasks", "Wordle-v0",
             "--model", "tiny", "--processes", "2", "--threads", "1", "--out", str(out), "--steps", "50"]  # fmt: skip
    process = subprocess.Popen(train, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=500)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
    assert process.returncode == 1, stderr[-3000:]
    assert "envharness train: rank 1 of 2 failed (exit code 3" in stderr
    assert "Traceback" not in stderr  # words: neither the launcher's traceback nor rank 0's
    assert "trained" not in stdout
    assert len((out / "train_log.jsonl").read_text().splitlines()) < 50
    deadline = time.monotonic() + 60  # a server told its parent is gone stops on its own
    while group_left(process.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not group_left(process.pid)


@pytest.mark.slow
def test_a_killed_launcher_leaves_no_rank_running(tmp_path):
    # the command the user started is SIGKILLed once the run has logged a step: its ranks (whose
    # parent is the forkserver, not it), the forkserver and the environment server stop by themselves
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    train = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena", "--tasks", "Wordle-v0",
             "--model", "tiny", "--processes", "2", "--threads", "1", "--out", str(out), "--steps", "500"]  # fmt: skip
    with (tmp_path / "output.txt").open("w") as output:  # a file: no pipe left full with nobody reading
        process = subprocess.Popen(train, stdout=output, stderr=output, env=env, start_new_session=True)
    log = out / "train_log.jsonl"
    try:
        wait_until(lambda: log.exists() and log.read_text().strip() or process.poll() is not None, 300)
        assert process.poll() is None, (tmp_path / "output.txt").read_text()[-3000:]
        assert len(group_left(process.pid)) >= 4  # the launcher, the forkserver, two ranks (and a server)
        process.kill()
        process.wait()
        deadline = time.monotonic() + 60
        while group_left(process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not group_left(process.pid), (tmp_path / "output.txt").read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def listening(pid: int) -> set[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket of process `pid` and its descendants, read
    from the sockets themselves (psutil), never by connecting."""
    try:
        tree = [psutil.Process(pid)]
        tree += tree[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    found = set()
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for sock in process.net_connections(kind="tcp"):
                if sock.status == psutil.CONN_LISTEN:
                    found.add((process.pid, sock.laddr.ip, sock.laddr.port))
    return found


def run_watching_sockets(
    command: list[str], env: dict, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess, set]:
    """`command` run to its end, and (pid, address, port) of the sockets its process tree listened on
    meanwhile (pid 0 stands for the command's own process)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=cwd, start_new_session=True)  # fmt: skip
    seen: set[tuple[int, str, int]] = set()
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(0.2):
            seen.update(
                (0 if pid == process.pid else pid, ip, port) for pid, ip, port in listening(process.pid)
            )

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        stdout, stderr = process.communicate(timeout=500)
    finally:
        finished.set()
        if process.poll() is None:
            os.killpg(process.pid, 9)
    watcher.join(timeout=60)
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), seen


def plant_imports(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A folder with an `envharness/` package and a `pydantic.py` that each leave a marker file
    when imported, and the markers."""
    here = tmp_path / "here"
    (here / "envharness").mkdir(parents=True)
    markers = [tmp_path / "ran-envharness", tmp_path / "ran-pydantic"]
    (here / "envharness" / "__init__.py").write_text(f"open({str(markers[0])!r}, 'w').write('pwned')\n")
    (here / "pydantic.py").write_text(f"open({str(markers[1])!r}, 'w').write('pwned')\n")
    return here, markers


@pytest.mark.slow
def test_a_server_opponent_trains_on_two_processes_started_as_a_user_would(tmp_path):
    """Started as a user would (the `envharness` script) in a folder with a planted `envharness/`
    and `pydantic.py`: torchrun starts each rank as `python -m envharness.cli`, which would put
    that folder first on the rank's path, so a rank that imported them leaves a marker. (`--lora`
    and `--mix` on two processes: the launcher runs below.)"""
    here, markers = plant_imports(tmp_path)
    out = tmp_path / "run"
    train = [str(Path(sys.executable).with_name("envharness")), "train", "--model", "tiny", "--processes", "2",
             "--threads", "1", "--steps", "1", "--out", str(out), "--env", "textarena", "--tasks", "KuhnPoker-v0",
             "--opponent", "random"]  # fmt: skip
    env = {
        k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "PYTHONSAFEPATH")
    }
    done, sockets = run_watching_sockets(train, env, cwd=here)
    assert not [m.name for m in markers if m.exists()], done.stderr[-3000:]  # nothing from the cwd
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("trained 1 steps") == 1
    # the rendezvous (the launcher's stores), the ranks' gloo pairs and the environment servers
    # all listen on loopback: nothing of the run is reachable from another machine
    assert len([ip for pid, ip, _ in sockets if pid == 0]) >= 2, (
        sockets
    )  # the launcher's two stores were seen
    assert not [ip for _, ip, _ in sockets if not ipaddress.ip_address(ip).is_loopback], sockets
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["metrics"]["rank"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1]  # each episode once
    assert len((out / "train_log.jsonl").read_text().splitlines()) == 2  # step 1, then the summary
    assert (out / "final" / "model.safetensors").exists()


LAUNCHERS = {
    "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
    # without a GPU, accelerate starts one process unless told --multi_gpu (its torchrun path, gloo here)
    "accelerate": ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
                   "1", "--mixed_precision", "no", "--dynamo_backend", "no"],
}  # fmt: skip


#: What each launcher's run trains besides: `--lora` (only the adapter is saved) and a mix of
#: a one-player game and a two-player one (each rank plays its share of both).
LAUNCHED = {
    "torchrun": (["--env", "textarena", "--tasks", "Wordle-v0", "--lora"], "adapter_model.safetensors"),
    "accelerate": (
        ["--mix", "textarena:Wordle-v0", "--mix", "textarena:TicTacToe-v0", "--max-turns", "2"],
        "model.safetensors",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_train_under_the_users_launcher_writes_each_file_once(tmp_path, launcher):
    """`torchrun ... -m envharness.cli train` and `accelerate launch ... -m envharness.cli train`,
    as the docs give them: two ranks, two steps, every episode once with its rank, one report;
    one run trains `--lora`, the other a mix."""
    out = tmp_path / "run"
    run, made = LAUNCHED[launcher]
    command = [sys.executable, *LAUNCHERS[launcher], "-m", "envharness.cli", "train", *run, "--model", "tiny",
               "--steps", "2", "--threads", "1", "--out", str(out)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = run_tree(command, capture_output=True, text=True, timeout=500, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("trained 2 steps") == 1
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert [r["metrics"]["train_step"] for r in records] == [s for s in range(2) for _ in range(8)]
    assert [r["metrics"]["rank"] for r in records] == [0, 0, 0, 0, 1, 1, 1, 1] * 2
    if launcher == "accelerate":  # both games of the mix were played
        assert {r["task"] for r in records} == {"Wordle-v0", "TicTacToe-v0"}, [r["task"] for r in records]
    steps = [json.loads(line).get("step") for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps[:-1] == [1, 2] and (out / "final" / made).exists()
