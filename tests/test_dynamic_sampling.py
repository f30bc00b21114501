"""Dynamic sampling (DAPO): a group whose rewards all agree is replaced before the loss pass,
up to a bound of extra groups a step; the log counts, per task, the groups drawn, kept and
dropped; the curriculum learns from the dropped ones. Real TRL GRPOTrainer, tiny model, CPU;
the episodes are scripted (their successes chosen per call) so each case is exact."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter

import pytest
from _jobs import run_tree
from transformers import TrainerCallback

from envharness.cli import main as cli_main
from envharness.curriculum import make_sampler
from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.curriculum import CurriculumLayer
from envharness.integrations.trl.dynamic_sampling import DynamicSampling
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.layers import Rollout, stack_layers
from envharness.integrations.trl.mix import prompt_key
from envharness.integrations.trl.rewards import reward_success
from envharness.integrations.trl.rollout import parse_task_prompt
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TASKS = ["click-test", "click-button"]


class ScriptedEpisodes(Rollout):
    """Plays each call's prompts with fixed tokens; call k's successes come from `outcomes(k, i)`
    (row i of the call). Each row's completion names its call, so the test sees which episode
    reached TRL."""

    def __init__(self, outcomes):
        self.outcomes, self.calls = outcomes, []

    def __call__(self, prompts, trainer):
        k, n = len(self.calls), len(prompts)
        self.calls.append(list(prompts))
        return {
            "prompt_ids": [[1, 9690, 198, 2683]] * n,
            "completion_ids": [[28 + k, 40 + i % 2, 2] for i in range(n)],
            "logprobs": [[-1.0, -1.0, 0.0]] * n,
            "env_mask": [[1, 1, 0]] * n,
            "success": [self.outcomes(k, i) for i in range(n)],
        }


def one_step(tmp_path, outcomes, max_extra):
    """One GRPO step (2 groups of 2) through the curriculum and dynamic sampling layers."""
    from trl import GRPOTrainer

    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        micro_batch=4,
        max_completion_length=4,
    )
    sampler = make_sampler("uniform", TASKS, seed=0)
    episodes = ScriptedEpisodes(outcomes)
    seen = []  # what TRL got back from the rollout
    layers = [
        lambda inner: DynamicSampling(
            inner, max_extra, on_dropped=lambda group, s: sampler.update(prompt_key(group), s)
        ),
        lambda inner: CurriculumLayer(inner, sampler),
    ]
    rollout = stack_layers(episodes, layers)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_success],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(TASKS, 4),
        rollout_func=lambda prompts, trainer: seen.append(rollout(prompts, trainer)) or seen[-1],
        callbacks=[*rollout.callbacks(), Logged()],
    )
    trainer.train()
    return episodes, seen[0], Logged.steps[-1], sampler


class Logged(TrainerCallback):
    """Each step's log as the layers' callbacks left it (what train_log.jsonl holds)."""

    steps: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            Logged.steps.append(dict(logs))


def test_groups_without_signal_are_replaced_and_counted(tmp_path):
    # the first draw: every episode fails (no signal); the replacements: one of two succeeds
    episodes, out, logged, sampler = one_step(tmp_path, lambda k, i: k > 0 and i % 2 == 0, max_extra=4)
    assert len(episodes.calls) == 2 and len(episodes.calls[1]) == 4  # both groups played again
    first, again = episodes.calls
    for old, new in zip(first, again):  # the same task on a fresh seed
        assert parse_task_prompt(new)[0] == parse_task_prompt(old)[0]
        assert parse_task_prompt(new)[1] != parse_task_prompt(old)[1]
    assert [ids[0] for ids in out["completion_ids"]] == [29] * 4  # every row from the replacement
    assert out["success"] == [True, False, True, False]
    assert logged["reward"] == pytest.approx(0.5) and logged["frac_reward_zero_std"] == 0.0
    assert logged["dynamic/extra_groups"] == 2 and logged["dynamic/without_signal"] == 0
    for task in TASKS:  # one group each: drawn twice, dropped once, kept once
        assert [logged[f"dynamic/{task}/{what}"] for what in ("drawn", "kept", "dropped")] == [2, 1, 1]
    # the curriculum learned from all four groups: the dropped ones' failures too
    assert {task: p["episodes"] for task, p in sampler.plan().items()} == {t: 4 for t in TASKS}


def test_the_bound_holds_and_the_step_says_it_found_no_signal(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="envharness.integrations.trl.dynamic_sampling"):
        episodes, out, logged, sampler = one_step(tmp_path, lambda k, i: False, max_extra=3)
    assert [len(call) for call in episodes.calls] == [4, 4, 2]  # 2 + 1 extra groups, then the bound
    assert logged["dynamic/extra_groups"] == 3 and logged["dynamic/without_signal"] == 2
    assert sum(logged[f"dynamic/{t}/dropped"] for t in TASKS) == 3
    assert sum(logged[f"dynamic/{t}/kept"] for t in TASKS) == 2
    assert sum(logged[f"dynamic/{t}/drawn"] for t in TASKS) == 5
    assert "2 of 2 groups still without signal after 3 extra group(s)" in caplog.text
    assert sum(p["episodes"] for p in sampler.plan().values()) == 10  # every group drawn, 2 each


def test_nothing_is_replaced_with_a_bound_of_zero(tmp_path):
    episodes, out, logged, _ = one_step(tmp_path, lambda k, i: False, max_extra=0)
    assert len(episodes.calls) == 1
    assert logged["dynamic/extra_groups"] == 0 and logged["dynamic/without_signal"] == 2


def test_a_bad_bound_is_refused_in_words(capsys):
    assert cli_main(["train", "--model", "tiny", "--max-extra-groups", "-1"]) == 2
    assert "--max-extra-groups must be at least 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_extra must be >= 0"):
        DynamicSampling(ScriptedEpisodes(lambda k, i: False), -1)


@pytest.mark.timeout(900)
def test_train_replaces_groups_and_its_curriculum_counts_the_dropped_ones(tmp_path):
    """`envharness train` end to end (MiniWoB, the tiny model, whose episodes all fail): each
    step's groups are dropped and replaced up to the bound, the log says so per task, and the
    curriculum's plan of step 2 counts every episode of step 1, the dropped groups' too. With
    `--beta` the step also carries the reference model's memory and time."""
    out = tmp_path / "run"
    options = ["--tasks", "click-test", "--max-extra-groups", "2", "--beta", "0.04"]
    rc = cli_main(
        ["train", "--model", "tiny", "--steps", "2", "--save-steps", "5", "--output-dir", str(out)]
        + ["--num-generations", "2", "--max-completion-length", "8", *options]
    )
    assert rc == 0
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in steps if "reward" in log]
    assert len(steps) == 2
    for log in steps:
        assert log["dynamic/extra_groups"] == 2 and log["dynamic/without_signal"] == 2
        assert [log[f"dynamic/click-test/{w}"] for w in ("drawn", "kept", "dropped")] == [4, 2, 2]
        assert log["ref/memory_mb"] > 0 and log["ref/forward_s"] > 0
    assert steps[1]["curriculum/plan"]["click-test"]["episodes"] == 8  # 4 groups of 2, not 2
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sum(r["metrics"]["train_step"] == 0 for r in records) == 8  # every group played is kept


@pytest.mark.slow
def test_two_processes_take_the_same_decisions(tmp_path):
    """Under `--processes 2` each rank plays half the batch: both gather the whole batch's
    rewards and replace the same group on the same seed (the rank without a row of it plays
    nothing, yet joins every collective), and the run says once that the bound was reached."""
    out = tmp_path / "run"
    train = [sys.executable, "-m", "envharness.cli", "train", "--env", "textarena", "--tasks", "Wordle-v0",
             "--model", "tiny", "--processes", "2", "--threads", "1", "--out", str(out), "--steps", "1",
             "--groups-per-step", "2", "--num-generations", "2", "--max-extra-groups", "1"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = run_tree(train, capture_output=True, text=True, timeout=500, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (log,) = [
        json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines() if "reward" in line
    ]
    assert [log[f"dynamic/Wordle-v0/{w}"] for w in ("drawn", "kept", "dropped")] == [3, 2, 1]
    assert log["dynamic/extra_groups"] == 1 and log["dynamic/without_signal"] == 2
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(Counter(r["seed"] for r in records).values()) == [2, 2, 2]  # 3 groups, each whole
    assert (done.stdout + done.stderr).count("2 of 2 groups still without signal") == 1


def test_counts_belong_to_the_step_whose_loss_pass_takes_the_batch():
    """Under `--async` the batch for step 1 is sampled (its groups replaced) while step 0 trains,
    and may finish after step 1 began: each step's log counts its own batch's groups, none
    twice and none lost. Each batch: the first draw fails everywhere, its replacements disagree."""
    from types import SimpleNamespace

    layer = DynamicSampling(ScriptedEpisodes(lambda k, i: k % 2 == 1 and i % 2 == 0), max_extra=4)
    (callback,) = layer.callbacks()
    prompts = [p for p in task_dataset(TASKS, 2)["prompt"] for _ in range(2)]  # 2 groups of 2

    def trainer(step):
        return SimpleNamespace(reward_funcs=[reward_success], state=SimpleNamespace(global_step=step))

    def log(step):
        logs = {"loss": 0.0}
        callback.on_log(None, SimpleNamespace(global_step=step), None, logs=logs)
        return logs

    callback.on_step_begin(None, SimpleNamespace(global_step=0), None)
    layer(prompts, trainer(0))  # step 0's batch, played when asked
    layer(prompts, trainer(1))  # step 1's, sampled beside step 0's loss pass
    first = log(1)
    callback.on_step_begin(None, SimpleNamespace(global_step=1), None)
    second = log(2)
    for logged in (first, second):
        assert logged["dynamic/extra_groups"] == 2 and logged["dynamic/without_signal"] == 0
        for task in TASKS:
            assert [logged[f"dynamic/{task}/{what}"] for what in ("drawn", "kept", "dropped")] == [2, 1, 1]
