"""`examples/trl_environment_factory.py` runs as TRL users run it: one environment with no
dataset, then a dict of factories over the browser and Wordle; every episode is recorded in
train's format and replays identically (the tiny model, one step of each)."""

from __future__ import annotations

import json
import os

import pytest
from _examples import load_example

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_the_example_trains_records_and_replays(tmp_path, capsys):
    example = load_example("trl_environment_factory")
    argv = ["--model", "tiny", "--steps", "1", "--num-generations", "2", "--max-completion-length", "8"]
    assert example.main([*argv, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "single: 4 episodes" in printed and "mix: 4 episodes" in printed
    assert "replay: 4 of 4 identical" in printed.split("single:")[1].split("\n")[0]
    assert "replay: 4 of 4 identical" in printed.split("mix:")[1].split("\n")[0]

    single = [json.loads(line) for line in (tmp_path / "single" / "episodes.jsonl").read_text().splitlines()]
    seeds = [r["seed"] for r in single]
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]  # no dataset: one seed per group
    mix = [json.loads(line) for line in (tmp_path / "mix" / "episodes.jsonl").read_text().splitlines()]
    played = sorted((r["metrics"]["env"], r["task"]) for r in mix)
    assert played == [("browsergym", "click-test")] * 2 + [("textarena", "Wordle-v0")] * 2
    assert json.loads((tmp_path / "mix" / "train_config.json").read_text())["mix"]["textarena"] == [
        "Wordle-v0"
    ]
