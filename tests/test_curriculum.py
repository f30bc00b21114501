"""The task samplers (`envharness.curriculum`) and `train --curriculum`: weights follow the success
rates they are fed, every task keeps a floor, each group keeps one task and one seed, and each
step's plan and per-task success reach train_log.jsonl."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from envharness.cli import main as cli_main
from envharness.curriculum import SignalSampler, UniformSampler, make_sampler
from envharness.harness import read_records

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def train_tiny(out, *options: str) -> int:
    """Two GRPO steps of the tiny model, 2 episodes a group, and `options`."""
    return cli_main(
        ["train", "--model", "tiny", "--steps", "2", "--save-steps", "5", "--output-dir", str(out)]
        + ["--num-generations", "2", "--max-completion-length", "8", *options]
    )


def feed(sampler, task: str, successes: int, failures: int) -> None:
    sampler.update(task, [True] * successes + [False] * failures)


def test_signal_weights_follow_success_rates():
    sampler = SignalSampler(["solved", "half", "hard", "new"], window=20, floor=0.02)
    feed(sampler, "solved", 20, 0)  # p = 1: nothing to learn
    feed(sampler, "half", 10, 10)  # p = 1/2: the most signal
    feed(sampler, "hard", 2, 18)  # p = 0.1: some
    weights = sampler.weights()
    assert abs(sum(weights.values()) - 1) < 1e-9
    raw = {task: weights[task] / weights["half"] * 0.25 for task in weights}  # back to p(1-p) units
    assert raw["solved"] == pytest.approx(0.02)  # the floor, not 0
    assert raw["half"] == pytest.approx(0.25) and raw["new"] == pytest.approx(0.25)  # never played: tried
    assert raw["hard"] == pytest.approx(0.1 * 0.9)
    drawn = Counter(sampler.choose(4000))
    assert drawn["half"] > drawn["hard"] > drawn["solved"] > 0

    feed(sampler, "solved", 0, 10)  # forgotten since: half its window failed, weight back up
    assert sampler.weights()["solved"] > weights["solved"] * 5
    plan = sampler.plan()
    assert plan["solved"] == {
        "weight": pytest.approx(sampler.weights()["solved"], abs=1e-4),
        "success": 0.5,
        "episodes": 30,
    }
    assert plan["new"]["success"] is None and plan["new"]["episodes"] == 0


def test_samplers_are_deterministic_and_uniform_cycles():
    a, b = SignalSampler(["x", "y", "z"], seed=3), SignalSampler(["x", "y", "z"], seed=3)
    feed(a, "x", 3, 1)
    feed(b, "x", 3, 1)
    assert a.choose(50) == b.choose(50)
    uniform = UniformSampler(["x", "y", "z"])
    feed(uniform, "x", 0, 8)
    assert uniform.choose(4) + uniform.choose(2) == ["x", "y", "z", "x", "y", "z"]


def test_bad_sampler_settings_are_refused():
    with pytest.raises(ValueError, match="unknown curriculum"):
        make_sampler("harder-first", ["x"])
    with pytest.raises(ValueError, match="floor"):
        make_sampler("signal", ["x"], floor=0)
    with pytest.raises(ValueError, match="at least one task"):
        make_sampler("uniform", [])
    with pytest.raises(ValueError, match="unknown task"):
        SignalSampler(["x"]).update("y", [True])


@pytest.mark.timeout(600)
def test_train_with_the_signal_curriculum_logs_its_plan_and_each_task(tmp_path):
    out = tmp_path / "run"
    rc = train_tiny(
        out, "--tasks", "click-test,click-button", "--curriculum", "signal", "--groups-per-step", "3"
    )
    assert rc == 0
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in steps if "reward" in log]
    assert [log["step"] for log in steps] == [1, 2]
    first = steps[0]["curriculum/plan"]
    assert set(first) == {"click-test", "click-button"}
    assert all(p["episodes"] == 0 and p["weight"] == 0.5 for p in first.values())  # nothing played yet
    assert sum(p["episodes"] for p in steps[1]["curriculum/plan"].values()) == 6  # step 1's 3 groups of 2
    for log in steps:
        drawn = log["curriculum/drawn"]
        assert len(drawn) == 3 and set(drawn) <= {"click-test", "click-button"}
        for task in set(drawn):  # per task: success and the share of groups without signal
            assert 0 <= log[f"tasks/{task}/success"] <= 1 and 0 <= log[f"tasks/{task}/zero_variance"] <= 1

    records = read_records(out / "episodes.jsonl")
    for step in (0, 1):  # each group: one task, one seed (the slot's)
        groups = Counter((r.task, r.seed) for r in records if r.metrics["train_step"] == step)
        assert sorted(groups.values()) in ([2, 2, 2], [2, 4])  # two slots may share a seed only by chance
        drawn = Counter(steps[step]["curriculum/drawn"])
        played = Counter()
        for (task, _), n in groups.items():
            played[task] += n // 2
        assert played == drawn


def test_an_unknown_curriculum_is_refused_in_words(capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--model", "tiny", "--curriculum", "hardest"])
    assert "--curriculum" in capsys.readouterr().err


@pytest.mark.timeout(600)
def test_eval_every_logs_held_out_results_and_keeps_the_best_model(tmp_path):
    out = tmp_path / "run"
    rc = train_tiny(
        out,
        "--tasks",
        "click-test",
        "--eval-every",
        "1",
        "--eval-tasks",
        "click-button",
        "--eval-episodes",
        "2",
        "--groups-per-step",
        "1",
    )
    assert rc == 0
    evals = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [1, 2]
    for e in evals:  # every trained task and the transfer task, on held-out seeds
        assert 0 <= e["eval/click-test/success"] <= 1 and 0 <= e["eval/click-button/success"] <= 1
        assert e["eval/trained_mean"] == e["eval/click-test/success"]
        assert e["eval/transfer_mean"] == e["eval/click-button/success"]
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in steps if "reward" in log]
    assert [log["eval/trained_mean"] for log in steps] == [e["eval/trained_mean"] for e in evals]
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["eval/trained_mean"] == max(e["eval/trained_mean"] for e in evals)
    assert best["step"] == min(
        e["step"] for e in evals if e["eval/trained_mean"] == best["eval/trained_mean"]
    )
    assert (out / "best" / "config.json").is_file()


def test_each_step_logs_the_plan_of_the_batch_it_trains():
    """Under `--async` the batch for step 1 is drawn while step 0 trains and may be done before
    step 0's log: each step's log names its own batch's task, none twice and none missing."""
    from types import SimpleNamespace

    from envharness.integrations.trl.curriculum import CurriculumLayer
    from envharness.integrations.trl.layers import Rollout

    class Played(Rollout):
        def __call__(self, prompts, trainer):
            return {"success": [False] * len(prompts)}

    layer = CurriculumLayer(Played(), make_sampler("uniform", ["a", "b"], seed=0))
    (callback,) = layer.callbacks()
    slot = '{"task": "a", "seed": 7}'

    def log(step):
        logs = {"loss": 0.0}
        callback.on_log(None, SimpleNamespace(global_step=step), None, logs=logs)
        return logs.get("curriculum/drawn")

    callback.on_step_begin(None, SimpleNamespace(global_step=0), None)
    layer([slot, slot], SimpleNamespace(state=SimpleNamespace(global_step=0)))  # step 0's batch
    layer([slot, slot], SimpleNamespace(state=SimpleNamespace(global_step=1)))  # step 1's, ahead
    first = log(1)
    callback.on_step_begin(None, SimpleNamespace(global_step=1), None)
    assert [first, log(2)] == [["a"], ["b"]]  # uniform: the tasks in turn
