"""Issue 17: `envharness eval` and `train` ended every way a job ends (bad input, Ctrl-C,
SIGTERM, SIGKILL): nothing left running (checked in /proc for THAT job's processes), what
was finished kept, one line saying how to resume, and the resumed run ends where asked."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import pytest
from _jobs import Job, held_at_step

from envharness.cli import main as cli_main
from envharness.cli.interrupts import resume_command
from envharness.integrations.trl.resume import latest_checkpoint, trim_to_step

pytestmark = pytest.mark.timeout(600)

EVAL = [
    "eval",
    "--model",
    "scripted",
    "--tasks",
    "click-test,click-button",
    "--episodes",
    "3",
    "--concurrency",
    "1",
    "--no-progress",
    "--no-screenshots",
]
TRAIN = [
    "train",
    "--model",
    "tiny",
    "--lora",
    "--save-steps",
    "1",
    "--num-generations",
    "2",
    "--groups-per-step",
    "1",
    "--max-completion-length",
    "8",
    "--threads",
    "1",
]


@pytest.fixture
def jobs(tmp_path, prewarmed):
    started: list[Job] = []

    def start(args: list[str], script: str | None = None) -> Job:
        job = Job(args, tmp_path, script=script, prewarmed=prewarmed)
        started.append(job)
        return job

    yield start
    for job in started:
        job.kill_all()


def records(path: Path) -> list[dict]:
    """The whole records in `path` so far: a job still writing may have written part of the last
    (one record is more than one write), which is not a record yet."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def resume_line(output: str, command: str) -> list[str]:
    """The interrupted command's last line: what was kept and the argv that resumes."""
    assert "Traceback" not in output, output[-3000:]
    lines = [line for line in output.splitlines() if line.startswith(f"envharness {command}: stopped by")]
    assert len(lines) == 1, output[-3000:]
    assert lines[0] == output.strip().splitlines()[-1]
    return shlex.split(lines[0].split("Resume with: ")[1])


# -- eval ------------------------------------------------------------------------------
def test_eval_with_a_model_it_cannot_load_stops_its_server(jobs, tmp_path):
    job = jobs([*EVAL, "--model", "/nonexistent/model", "--out", str(tmp_path / "run")])
    assert job.wait() == 2
    assert job.output.strip().startswith("envharness eval: cannot load model '/nonexistent/model'"), (
        job.output
    )
    assert len(job.output.strip().splitlines()) == 1
    assert not job.tagged()  # the server started alongside the model was stopped before the command returned


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "ctrl-c"])
def test_eval_interrupted_keeps_finished_episodes_and_says_how_to_resume(jobs, tmp_path, sig, code):
    out = tmp_path / "run"
    job = jobs([*EVAL, "--out", str(out)])
    job.wait_until(lambda: len(records(out / "episodes.jsonl")) >= 1, what="a finished episode")
    job.signal(sig, group=sig == signal.SIGINT)  # Ctrl-C reaches the whole foreground group
    assert job.wait() == code
    argv = resume_line(job.output, "eval")
    assert argv[:2] == ["envharness", "eval"] and argv[-3:] == ["--out", str(out), "--resume"]
    kept = len({(r["task"], r["seed"]) for r in records(out / "episodes.jsonl") if not r.get("error")})
    assert f"kept {kept} finished episode(s)" in job.output and kept >= 1
    job.assert_nothing_left()


@pytest.mark.slow
def test_eval_killed_leaves_nothing_and_resume_finishes_the_run(jobs, tmp_path):
    out = tmp_path / "run"
    job = jobs([*EVAL, "--out", str(out)])
    job.wait_until(lambda: len(records(out / "episodes.jsonl")) >= 1, what="a finished episode")
    job.signal(signal.SIGKILL)
    job.wait()
    job.assert_nothing_left()

    resumed = jobs([*EVAL, "--out", str(out), "--resume"])
    assert resumed.wait(300) == 0, resumed.output[-3000:]
    keys = [(r["task"], r["seed"]) for r in records(out / "episodes.jsonl") if not r.get("error")]
    assert sorted(set(keys)) == sorted((t, s) for t in ("click-test", "click-button") for s in range(3))
    assert len(keys) == 6  # nothing lost, nothing doubled
    resumed.assert_nothing_left()


# -- train -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,message",
    ids=["missing-model", "relative-model", "task", "env-url", "resume-no-dir"],
    argvalues=[
        (["--model", "/nonexistent/model"], "--model /nonexistent/model: no model directory there"),
        (["--model", "./not/a/model/dir"], "no model directory there"),
        (["--task", "no-such-task"], "no-such-task"),
        (["--env-url", "localhost:8000"], "--env-url must be an http(s) URL"),
        (["--resume"], "--resume needs --out"),
    ],
)
def test_train_refuses_bad_arguments_in_one_line_before_starting(tmp_path, capsys, args, message):
    out = tmp_path / "run"
    extra = [] if "--resume" in args else ["--out", str(out)]
    assert cli_main(["train", *args, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("envharness train: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()  # refused before anything was made


def test_train_refuses_a_used_folder_without_resume_and_resume_without_a_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["train", "--model", "tiny", "--out", str(out), "--resume"]) == 2
    assert "--resume: no complete checkpoint in" in capsys.readouterr().err
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    assert cli_main(["train", "--model", "tiny", "--out", str(out)]) == 2
    assert "already holds a run (checkpoint-3): pass --resume" in capsys.readouterr().err
    (out / "train_config.json").write_text(json.dumps({"model": "embedded", "tasks": ["click-test"]}))
    assert cli_main(["train", "--model", "tiny", "--out", str(out), "--resume"]) == 2
    assert "was trained with other settings (model: 'embedded' -> 'tiny'" in capsys.readouterr().err


@pytest.mark.slow
def test_train_sigterm_checkpoints_finished_steps_and_says_how_to_resume(jobs, tmp_path):
    out = tmp_path / "run"
    job = jobs(
        [*TRAIN, "--steps", "6", "--save-steps", "5", "--out", str(out)], script=held_at_step(2)
    )  # waits at step 2
    job.wait_for_output("held at step 2", timeout_s=400)
    job.signal(signal.SIGTERM)
    assert job.wait() == 143
    argv = resume_line(job.output, "train")
    assert argv[-3:] == ["--out", str(out), "--resume"]
    latest = latest_checkpoint(out)  # saved at the interrupt: no periodic save came before step 5
    assert latest is not None and 2 <= latest.step < 6
    assert f"kept {latest.step} step(s) in {latest.path}" in job.output
    job.assert_nothing_left()


@pytest.mark.slow
def test_train_killed_then_resumed_ends_at_the_requested_steps_counting_none_twice(jobs, tmp_path):
    out = tmp_path / "run"
    job = jobs([*TRAIN, "--steps", "3", "--out", str(out)])
    job.wait_until(lambda: latest_checkpoint(out) is not None, timeout_s=400, what="a first checkpoint")
    job.signal(signal.SIGKILL)
    job.wait()
    job.assert_nothing_left()
    killed_at = latest_checkpoint(out).step
    assert killed_at < 3

    resumed = jobs([*TRAIN, "--steps", "3", "--out", str(out), "--resume"])
    assert resumed.wait(400) == 0, resumed.output[-3000:]
    assert f"[train] step {killed_at + 1}/3" in resumed.output and "trained 3 steps" in resumed.output
    steps = sorted(r["metrics"]["train_step"] for r in records(out / "episodes.jsonl"))
    assert steps == [0, 0, 1, 1, 2, 2]  # every step's group exactly once
    logged = [e["step"] for e in records(out / "train_log.jsonl") if "reward" in e]
    assert logged == [1, 2, 3]  # the learning curve continues
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "reward" in h] == [1, 2, 3]
    resumed.assert_nothing_left()


# -- helpers -----------------------------------------------------------------------------
def test_resume_command_names_the_folder_and_drops_contradictions():
    argv = ["eval", "--model", "scripted", "--overwrite", "--out=runs/a", "--episodes", "3"]
    assert (
        resume_command(argv, out_flag="--out", out="runs/a")
        == "envharness eval --model scripted --episodes 3 --out runs/a --resume"
    )
    assert (
        resume_command(["train", "--resume", "--out", "x y"], out_flag="--out", out="x y")
        == "envharness train --out 'x y' --resume"
    )
    # the old spelling of the run folder's flag is replaced, not repeated
    assert (
        resume_command(["train", "--output-dir", "runs/t", "--steps", "3"], out_flag="--out", out="runs/t")
        == "envharness train --steps 3 --out runs/t --resume"
    )


def test_trim_to_step_keeps_exactly_the_checkpointed_steps(tmp_path):
    lines = [{"metrics": {"train_step": s}, "version": 1} for s in (0, 0, 1, 1, 2)]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')
    log = [
        {"step": 1, "reward": 0.0},
        {"step": 2, "reward": 1.0},
        {"step": 3, "reward": 0.5},
        {"step": 2, "train_runtime": 9},
    ]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log))
    assert trim_to_step(tmp_path, 2) == 4
    assert [r["metrics"]["train_step"] for r in records(tmp_path / "episodes.jsonl")] == [0, 0, 1, 1]
    assert [e["step"] for e in records(tmp_path / "train_log.jsonl")] == [1, 2]


def test_latest_checkpoint_skips_one_torn_by_a_kill(tmp_path):
    for step in (1, 2):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-3").mkdir()  # killed before trainer_state.json (written last)
    (tmp_path / "checkpoint-3" / "model.safetensors").write_bytes(b"partial")
    assert latest_checkpoint(tmp_path).step == 2
