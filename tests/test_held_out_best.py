"""`best/` is chosen on held-out seeds of every trained task: each evaluation plays seeds
0..n-1 of every task the run trains (also those the curriculum did not draw that step), and the
kept model is the one with the best mean over all of them, so a step that wins one task by
losing another is not kept for it; transfer tasks are measured but never choose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from envharness.cli import main as cli_main
from envharness.integrations.trl.held_out import HeldOutEvaluation


class _Model(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(2, 2)
        self.saved = 0

    def save_pretrained(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        self.saved += 1


def test_best_is_the_mean_over_every_trained_task_not_one_task_or_the_transfer(tmp_path):
    # step -> task -> held-out success; step 3 doubles task a by losing task b entirely
    rates = {
        1: {"a": 0.5, "b": 0.5, "c": 0.5, "x": 0.0},
        2: {"a": 0.5, "b": 1.0, "c": 0.5, "x": 0.0},
        3: {"a": 1.0, "b": 0.0, "c": 1.0, "x": 1.0},
    }
    played: list[tuple[int, str, list[int]]] = []
    step = {"now": 0}

    def evaluate(model, task, seeds):
        played.append((step["now"], task, list(seeds)))
        return rates[step["now"]][task]

    held_out = HeldOutEvaluation(
        evaluate, every=1, tasks=["a", "b", "c"], transfer=["x"], episodes=4, out=tmp_path
    )
    model = _Model()
    for now in (1, 2, 3):
        step["now"] = now
        held_out.run(model, now)
    for now in (1, 2, 3):  # every trained task and the transfer task, on the held-out seeds
        assert sorted(t for s, t, _ in played if s == now) == ["a", "b", "c", "x"]
    assert all(seeds == [0, 1, 2, 3] for _, _, seeds in played)
    best = json.loads((tmp_path / "best" / "best.json").read_text())
    assert best["step"] == 2 and best["eval/trained_mean"] == pytest.approx(2 / 3)
    assert model.saved == 2  # steps 1 and 2; step 3 (mean 2/3, not better; transfer 1.0) is not kept
    assert {best[f"eval/{t}/success"] for t in "abc"} == {0.5, 1.0}


class _State:
    def __init__(self, global_step: int) -> None:
        self.global_step = global_step


def test_eval_on_start_keeps_the_starting_model_when_every_step_loses_ground(tmp_path):
    """`--eval-on-start`: the model the run starts from is step 0's candidate for `best/`, so a
    run whose updates only lose ground keeps it; a resumed run does not evaluate it again."""
    rates = iter([0.75, 0.5, 0.25])  # step 0 (the start), then steps 1 and 2, each worse
    held_out = HeldOutEvaluation(
        lambda model, task, seeds: next(rates), every=1, tasks=["a"], episodes=2, on_start=True, out=tmp_path
    )
    model = _Model()
    held_out.on_train_begin(None, _State(0), None, model=model)
    for step in (1, 2):
        held_out.on_step_end(None, _State(step), None, model=model)
    evals = [json.loads(line) for line in (tmp_path / "eval_log.jsonl").read_text().splitlines()]
    assert [(e["step"], e["eval/trained_mean"]) for e in evals] == [(0, 0.75), (1, 0.5), (2, 0.25)]
    assert json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 0
    assert model.saved == 1
    resumed = HeldOutEvaluation(
        lambda *a: pytest.fail("evaluated the start of a resumed run"), every=1, tasks=["a"], on_start=True,
        out=tmp_path,
    )  # fmt: skip
    resumed.on_train_begin(None, _State(2), None, model=model)
    unasked = HeldOutEvaluation(
        lambda *a: pytest.fail("evaluated without on_start"), every=1, tasks=["a"], out=tmp_path
    )
    unasked.on_train_begin(None, _State(0), None, model=model)


@pytest.mark.timeout(900)
def test_train_evaluates_every_trained_task_even_those_the_curriculum_did_not_draw(tmp_path):
    """`envharness train` end to end: one group a step (one task drawn of two), yet every
    evaluation plays both trained tasks, and `best/` holds their mean."""
    out = tmp_path / "run"
    rc = cli_main(
        ["train", "--model", "tiny", "--steps", "2", "--save-steps", "5", "--output-dir", str(out)]
        + ["--num-generations", "2", "--max-completion-length", "8", "--groups-per-step", "1"]
        + [
            "--tasks",
            "click-test,click-button",
            "--eval-every",
            "1",
            "--eval-episodes",
            "2",
            "--eval-on-start",
        ]
    )
    assert rc == 0
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    drawn = [log["curriculum/drawn"] for log in steps if "reward" in log]
    assert all(len(d) == 1 for d in drawn)  # each step trained one task
    evals = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1, 2]  # --eval-on-start: the starting model first
    for e in evals:
        mean = (e["eval/click-test/success"] + e["eval/click-button/success"]) / 2
        assert e["eval/trained_mean"] == pytest.approx(mean)
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["eval/trained_mean"] == max(e["eval/trained_mean"] for e in evals)
    assert {"eval/click-test/success", "eval/click-button/success"} <= set(best)


@pytest.mark.parametrize("command", ["train", "sft"])
def test_eval_on_start_without_eval_every_is_refused_in_words(command, capsys):
    assert (
        cli_main([command, "--model", "tiny", "--tasks", "click-test", "--eval-on-start", "--out", "unused"])
        == 2
    )
    assert "--eval-on-start plays --eval-every's held-out seeds" in capsys.readouterr().err
