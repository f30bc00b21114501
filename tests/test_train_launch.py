"""`envharness train --processes N` checks the whole configuration once, in the parent, before
any rank starts; the ranks load that configuration from the run folder instead of parsing the
command line again."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _jobs import run_tree

from envharness.cli import main as cli_main
from envharness.cli.train import run_rank
from envharness.integrations.trl import ranks, training
from envharness.integrations.trl.checks import config_json

pytestmark = pytest.mark.timeout(600)

BASE = ["train", "--env", "textarena", "--model", "tiny", "--threads", "1"]
WORDLE = ["--tasks", "Wordle-v0"]


@pytest.fixture
def no_launch(monkeypatch):
    """The launches `train` would make: each is recorded, none starts a rank."""
    launched: list[list[str]] = []
    monkeypatch.setattr(ranks, "launch", lambda argv, n, device, entrypoint: launched.append(list(argv)) or 0)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return launched


@pytest.mark.parametrize(
    "given, words",
    [
        ([*WORDLE, "--reward", "nope"], "unknown reward(s) ['nope']"),  # the environment's rule
        (
            [*WORDLE, "--num-generations", "3", "--groups-per-step", "1"],
            "does not split evenly across 2 processes",
        ),
        (["--tasks", "KuhnPoker-v0", "--opponent", "tiny"], "cannot run as --processes 2 yet"),
    ],
)
def test_a_bad_config_under_processes_is_refused_once_before_any_rank(
    given, words, tmp_path, no_launch, capsys
):
    out = tmp_path / "run"
    assert cli_main([*BASE, "--processes", "2", "--out", str(out), *given]) == 2
    err = capsys.readouterr().err
    assert err.count(words) == 1, err
    assert not no_launch and not out.exists()  # no rank started, nothing written


def test_the_ranks_load_the_configuration_the_parent_checked(tmp_path, no_launch, monkeypatch):
    """The parent writes what it checked; a rank started with only that file runs exactly it
    (the run folder too, even the one the parent named after the time)."""
    monkeypatch.chdir(tmp_path)
    user = [*BASE, *WORDLE, "--processes", "2", "--steps", "3", "--env-option", "games=all"]
    assert cli_main(user) == 0
    (rank_argv,) = no_launch
    assert rank_argv[:2] == ["train", "--launch-config"] and len(rank_argv) == 3  # none of the user's flags
    written = json.loads(Path(rank_argv[2]).read_text(encoding="utf-8"))
    assert written["argv"] == user
    ran = []
    monkeypatch.setattr(training, "train", lambda config: ran.append(config))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")  # a rank that says nothing when done
    assert cli_main(rank_argv) == 0
    (config,) = ran
    assert config_json(config) == {k: v for k, v in written["config"].items() if k != "overwrite"}
    assert (config.max_steps, config.processes, config.env_options) == (3, 2, {"games": "all"})
    assert os.path.dirname(rank_argv[2]) == config.output_dir
    assert config.output_dir.startswith("runs/train-")  # the parent's time, not each rank's


@pytest.mark.slow
def test_a_refusal_under_processes_comes_once_from_the_real_command(tmp_path):
    """The real command line in its own process: one refusal, exit 2, and no rank ever
    started (torchrun's agent would say which rank failed; each rank would refuse again)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "envharness.cli", *BASE, *WORDLE, "--processes", "2", "--out", str(out),
               "--reward", "nope"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = run_tree(command, capture_output=True, text=True, timeout=500, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("unknown reward(s) ['nope']") == 1
    assert "rank" not in done.stderr and not out.exists()


@pytest.mark.parametrize("stopped", [ranks.STOPPED_BY_ANOTHER_RANK, 143, -15])
def test_the_launcher_names_the_rank_that_failed_not_the_one_that_stopped_with_it(monkeypatch, stopped):
    """Rank 1 fails; rank 0, waiting on it in a collective (75) or terminated by torch's agent
    (SIGTERM: 143 through train's guard, -15 without), stops in the same second (torch stamps
    failures in whole seconds and would name the lower rank). The launcher's words name rank 1."""
    import torch.distributed.launcher.api
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    def run(*argv):
        failures = {
            0: ProcessFailure(local_rank=0, pid=100, exitcode=stopped, error_file=""),
            1: ProcessFailure(local_rank=1, pid=101, exitcode=1, error_file=""),
        }
        failures[0].timestamp = failures[1].timestamp  # the tie torch breaks by rank
        raise ChildFailedError("train", failures)

    monkeypatch.setattr(torch.distributed.launcher.api, "elastic_launch", lambda config, entrypoint: run)
    with pytest.raises(ranks.RankFailedError, match=r"^rank 1 of 2 failed \(exit code 1, pid 101\)"):
        ranks.launch(["train"], 2, "cpu", run_rank)


LAUNCH_WITHOUT_RANKS = """
import sys
from envharness.cli import main
from envharness.integrations.trl import ranks

ranks.launch = lambda argv, processes, device, entrypoint: print("launched", *sorted(
    m for m in ("transformers", "trl", "peft", "datasets") if m in sys.modules)) or 0
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "run",
    [
        [*WORDLE, "--async", "--eval-every", "1"],
        ["--mix", "browsergym:click-test", "--mix", "textarena:Wordle-v0", "--lora"],
    ],
)
def test_the_parent_of_processes_checks_the_run_without_loading_transformers_or_trl(tmp_path, run):
    """The parent only checks and launches; its ranks load TRL (~6 s of CPU the parent spares
    before any rank starts). A fresh interpreter, as a user's command."""
    command = [
        sys.executable,
        "-c",
        LAUNCH_WITHOUT_RANKS,
        *BASE,
        *run,
        "--processes",
        "2",
        "--out",
        str(tmp_path / "run"),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = run_tree(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "launched"  # and none of the four loaded
