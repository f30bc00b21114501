"""examples/mix_experiment.py runs its stages as processes: one that fails does not cut short
the run beside it (each is a 30-minute GRPO run of a pair), and nothing after it starts."""

from __future__ import annotations

import sys

import pytest
from _examples import load_example

#: A stage: `EXIT SECONDS DONE_FILE ...`: sleeps, writes DONE_FILE unless it fails, exits EXIT.
STAGE = """
import sys, time
code, seconds, done = sys.argv[1:4]
time.sleep(float(seconds))
if code == "0":
    open(done, "w").write("done")
sys.exit(int(code))
"""


def test_a_failed_stage_lets_the_one_beside_it_finish_and_starts_no_more(tmp_path, monkeypatch):
    experiment = load_example("mix_experiment")
    monkeypatch.setattr(experiment, "envharness", lambda: [sys.executable, "-c", STAGE])
    stages = [
        ([code, seconds, str(tmp_path / name)], tmp_path / name, tmp_path / f"{name}.log")
        for code, seconds, name in (("3", "0", "fails"), ("0", "3", "beside"), ("0", "0", "after"))
    ]
    with pytest.raises(SystemExit) as stopped:
        experiment.run_all(stages, parallel=2, threads=2)
    assert "stage failed (exit 3" in str(stopped.value) and "fails.log" in str(stopped.value)
    assert (tmp_path / "beside").read_text() == "done"  # not terminated when the other failed
    assert not (tmp_path / "after.log").exists()  # never started
    assert "beside" in (tmp_path / "stage_times.json").read_text()
