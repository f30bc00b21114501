"""Exploration metrics of a GRPO step: all-failed groups with their error, all-succeeded groups,
and the sampled tokens' negative log-probability (what `train_log.jsonl` and the curve show)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from envharness.integrations.trl.exploration import GroupStats, group_stats
from envharness.integrations.trl.layers import FunctionRollout
from envharness.integrations.trl.rollout import task_prompt


def _batch():
    a, b, c = (
        task_prompt("enter-text", 1_000_001),
        task_prompt("login-user", 1_000_002),
        task_prompt("enter-text", 1_000_003),
    )
    prompts = [a, a, b, b, c, c]
    out = {
        "success": [False, False, True, False, True, True],
        "error": [
            "ElementNotActionable: element 12 is covered by element 13\ntrace",
            "ElementNotActionable: element 12 is covered by element 13",
            None,
            None,
            None,
            None,
        ],
        "logprobs": [[-1.0, 0.0], [-3.0], [-2.0], [-2.0], [-0.5], [-0.5]],
        "env_mask": [[1, 0], [1], [1], [1], [1], [1]],  # the page's tokens (mask 0) are not the policy's
    }
    return prompts, out


def test_all_failed_groups_are_named_with_their_commonest_error():
    prompts, out = _batch()
    stats = group_stats(prompts, out)
    assert stats["groups/all_failed"] == pytest.approx(1 / 3)  # page a: both episodes failed
    assert stats["groups/all_succeeded"] == pytest.approx(1 / 3)  # page c: nothing left to learn
    assert stats["groups/all_failed_errors"] == [
        "enter-text 1000001: ElementNotActionable: element 12 is covered by element 13 (2/2)"
    ]
    assert stats["sampled_nll"] == pytest.approx((1 + 3 + 2 + 2 + 0.5 + 0.5) / 6)


def test_a_failure_without_an_error_says_so():
    prompt = task_prompt("login-user", 1_000_004)
    stats = group_stats([prompt, prompt], {"success": [False, False], "error": [None, None]})
    assert stats["groups/all_failed_errors"] == ["login-user 1000004: no error (2/2)"]
    assert "sampled_nll" not in stats  # no token logprobs: nothing to estimate from


def test_a_mix_is_reported_per_task_and_per_environment():
    from envharness.integrations.trl.mix import mix_prompt

    a, b, c = (
        mix_prompt("browsergym:enter-text", 1),
        mix_prompt("browsergym:login-user", 2),
        mix_prompt("textarena:Wordle-v0", 3),
    )
    stats = group_stats([a, a, b, b, c, c], {"success": [True, False, True, True, False, False]})
    assert stats["tasks/browsergym:enter-text/success"] == 0.5
    assert stats["tasks/browsergym:login-user/zero_variance"] == 1.0
    assert stats["envs/browsergym/success"] == 0.75  # both its tasks' episodes
    assert stats["envs/browsergym/zero_variance"] == 0.5  # one of its two groups agrees
    assert stats["envs/textarena/success"] == 0.0 and stats["envs/textarena/zero_variance"] == 1.0
    single = group_stats([task_prompt("enter-text", 1)] * 2, {"success": [True, False]})
    assert not any(k.startswith("envs/") for k in single)  # one environment: its tasks say it all


def test_group_stats_reach_the_step_log_once_per_step():
    prompts, out = _batch()
    calls = iter([{k: v[:4] for k, v in out.items()}, {k: v[4:] for k, v in out.items()}])
    rollout = GroupStats(FunctionRollout(lambda p, trainer: next(calls)))
    [callback] = rollout.callbacks()
    callback.on_step_begin(None, None, None)
    rollout(prompts[:4], None)  # a step may roll out in several calls
    rollout(prompts[4:], None)
    logs = {"loss": 0.0}
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs=logs)  # step 0 done
    assert logs["groups/all_failed"] == pytest.approx(1 / 3) and not math.isnan(logs["sampled_nll"])
    callback.on_step_begin(None, None, None)  # the next step starts empty
    quiet = {"loss": 0.0}
    callback.on_log(None, SimpleNamespace(global_step=2), None, logs=quiet)
    assert quiet == {"loss": 0.0}


def test_each_step_logs_the_groups_of_the_batch_it_trains():
    """Under `--async` the batch for step 1 is sampled while step 0 trains and may be done before
    step 0's log: each step's log counts its own batch's groups, none twice and none missing."""
    prompts, out = _batch()
    rollout = GroupStats(FunctionRollout(lambda p, trainer: out))
    [callback] = rollout.callbacks()

    def log(step):
        logs = {"loss": 0.0}
        callback.on_log(None, SimpleNamespace(global_step=step), None, logs=logs)
        return logs.get("groups/all_failed"), logs.get("groups/all_succeeded")

    callback.on_step_begin(None, SimpleNamespace(global_step=0), None)
    rollout(prompts, SimpleNamespace(state=SimpleNamespace(global_step=0)))  # step 0's batch
    rollout(prompts, SimpleNamespace(state=SimpleNamespace(global_step=1)))  # step 1's, ahead
    first = log(1)
    callback.on_step_begin(None, SimpleNamespace(global_step=1), None)
    assert [first, log(2)] == [(pytest.approx(1 / 3), pytest.approx(1 / 3))] * 2  # 3 groups each


def test_the_curve_of_a_mix_draws_each_environment(tmp_path, monkeypatch):
    import matplotlib.axes

    from envharness.integrations.trl.callbacks import plot_reward_curve

    labels = []
    plot = matplotlib.axes.Axes.plot

    def record(self, *args, label=None, **kwargs):
        labels.append(label)
        return plot(self, *args, label=label, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", record)
    history = [  # one group per step: each step logs the one environment it drew
        {"step": 1, "reward": 1.0, "envs/browsergym/success": 1.0},
        {"step": 2, "reward": 0.0, "envs/textarena/success": 0.0},
        {"step": 3, "reward": 0.5, "envs/browsergym/success": 0.5},
    ]
    assert plot_reward_curve(history, tmp_path / "curve.png").is_file()
    assert "browsergym success (5 of its steps)" in labels and "textarena success (5 of its steps)" in labels
