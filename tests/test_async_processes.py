"""`train --async` as two processes (gloo on this CPU): each rank samples its share one
step off on its own decoder copy, the sampling thread's gathers on a process group of its own,
and the step it trains is the step one process trains."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _jobs import run_tree
from test_many_processes import assert_same_step, one_step

pytestmark = pytest.mark.timeout(900)
ASYNC_STEP = Path(__file__).with_name("distributed_async_step.py")


@pytest.mark.slow
def test_async_on_two_processes_takes_the_step_of_one(tmp_path, prewarmed):
    # fixed episodes: step 2 trains the batch sampled during step 1 (policy version 0), the same
    # gradient and weights on 1 and on 2 processes
    one = one_step(tmp_path, 1, script=ASYNC_STEP, prewarmed=prewarmed)
    two = one_step(tmp_path, 2, script=ASYNC_STEP, prewarmed=prewarmed)
    assert one["last"]["policy_version"] == two["last"]["policy_version"] == 0
    assert one["last"]["staleness"] == two["last"]["staleness"] == 1
    assert_same_step(one, two)


@pytest.mark.slow
def test_train_async_on_two_processes_records_policy_versions_and_resumes(tmp_path):
    """Two steps, then a third by --resume; the curriculum and dynamic sampling gather across
    ranks on the sampling thread while the loss pass all-reduces the gradient and the held-out
    evaluation gathers its seeds' results (`--eval-on-start`: also before the first step)."""
    out = tmp_path / "run"
    train = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena", "--tasks", "Wordle-v0",
             "--model", "tiny", "--processes", "2", "--threads", "1", "--async", "--curriculum", "signal",
             "--max-extra-groups", "2", "--save-steps", "1", "--max-completion-length", "8", "--out", str(out),
             "--eval-every", "1", "--eval-episodes", "2", "--eval-on-start"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    first = run_tree([*train, "--steps", "2"], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("trained 2 steps") == 1  # rank 0 alone reports
    again = run_tree(
        [*train, "--steps", "3", "--resume"], capture_output=True, text=True, timeout=600, env=env
    )
    assert again.returncode == 0, again.stderr[-3000:]
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    # every step's batch once per rank, in rank order, with the version of the policy that sampled it:
    # 0 and 1 from the first run (1 sampled ahead by policy 0), the batch it sampled for step 2 cut
    # by --resume and played again at once by policy 2, then step 3 sampled ahead by policy 2
    steps = sorted({(r["metrics"]["train_step"], r["metrics"]["policy_version"]) for r in records})
    assert steps == [(0, 0), (1, 0), (2, 2), (3, 2)]
    for step in range(4):
        ranks_of = [r["metrics"]["rank"] for r in records if r["metrics"]["train_step"] == step]
        assert ranks_of == sorted(ranks_of) and set(ranks_of) == {0, 1}, (step, ranks_of)
        # each rank's groups on seeds of their own: those sampled ahead drawn over the whole batch
        seeds = [{r["seed"] for r in records if r["metrics"]["train_step"] == step and r["metrics"]["rank"] == k}
                 for k in (0, 1)]  # fmt: skip
        assert seeds[0] and seeds[1] and not seeds[0] & seeds[1], (step, seeds)
    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    trained = [
        (log["step"], log["async/policy_version"], log["async/staleness"]) for log in logs if "loss" in log
    ]
    assert trained == [(1, 0, 0), (2, 0, 1), (3, 2, 0)]  # each step once, logged once; versions resumed
    evaluated = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    # 2 held-out seeds, one a rank, logged once; the starting model first, and not again on --resume
    assert [e["step"] for e in evaluated] == [0, 1, 2, 3]
