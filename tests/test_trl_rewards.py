"""Reward functions and task prompts of the TRL integration (pure functions, no trainer)."""

from __future__ import annotations

import json

import pytest

from envharness.integrations.trl import parse_task_prompt, task_dataset, task_prompt
from envharness.integrations.trl.rewards import (
    REWARD_FUNCS,
    reward_max,
    reward_mean,
    reward_success,
    reward_sum,
)

FIELDS = {
    "step_rewards": [[0.0, 1.0], [0.0, 0.0, 0.5], [], [1.0]],
    "success": [True, False, False, True],
    "verify_metrics": [{}, {}, {}, {"error": "ConnectionError: server went away"}],
}
COMPLETIONS = ["a", "b", "c", "d"]


def test_step_reward_functions_reduce_each_episode_and_skip_failed_ones():
    assert reward_sum(COMPLETIONS, **FIELDS) == [1.0, 0.5, 0.0, None]
    assert reward_mean(COMPLETIONS, **FIELDS) == [0.5, pytest.approx(0.5 / 3), 0.0, None]
    assert reward_max(COMPLETIONS, **FIELDS) == [1.0, 0.5, 0.0, None]
    assert reward_success(COMPLETIONS, **FIELDS) == [1.0, 0.0, 0.0, None]


def test_reward_functions_have_the_names_trl_logs():
    assert [f.__name__ for f in REWARD_FUNCS.values()] == [
        "reward_success",
        "reward_sum",
        "reward_mean",
        "reward_max",
    ]


def test_missing_or_misaligned_fields_are_explained():
    with pytest.raises(KeyError, match="step_rewards"):
        reward_sum(COMPLETIONS, success=FIELDS["success"])
    with pytest.raises(ValueError, match="3 values of 'success' for 4 completions"):
        reward_success(COMPLETIONS, success=[True, False, True])


def test_task_prompts_round_trip_and_bad_ones_are_refused():
    assert parse_task_prompt(task_prompt("click-button", 7)) == ("click-button", 7)
    assert parse_task_prompt(task_prompt("click-test")) == ("click-test", None)
    assert parse_task_prompt({"task": "enter-text", "seed": 3}) == ("enter-text", 3)
    assert parse_task_prompt("click-test") == ("click-test", None)
    chat = [{"role": "user", "content": "solve it"}]
    assert parse_task_prompt(chat) == (chat, None)
    with pytest.raises(ValueError, match="seed must be an integer"):
        parse_task_prompt('{"task": "click-test", "seed": "7"}')
    with pytest.raises(ValueError, match="looks like JSON but is not"):
        parse_task_prompt('{"task": click-test}')


def test_task_dataset_cycles_tasks_with_reproducible_training_seeds():
    ds = task_dataset(["click-test", "click-button"], 6, seed=1)
    rows = [json.loads(p) for p in ds["prompt"]]
    assert [r["task"] for r in rows] == ["click-test", "click-button"] * 3
    assert all(1_000_000 <= r["seed"] < 2_000_000 for r in rows)  # apart from held-out eval seeds
    assert ds["prompt"] == task_dataset(["click-test", "click-button"], 6, seed=1)["prompt"]
    with pytest.raises(ValueError):
        task_dataset([], 3)


def test_a_step_whose_every_episode_failed_is_printed_not_a_crash(tmp_path):
    """TRL logs reward None when no episode of the batch has a reward; the progress line says n/a."""
    import io
    from types import SimpleNamespace

    from envharness.integrations.trl.callbacks import ProgressCallback

    stream = io.StringIO()
    callback = ProgressCallback(tmp_path / "log.jsonl", stream)
    state = SimpleNamespace(global_step=1, max_steps=3, is_world_process_zero=True)
    callback.on_log(
        None, state, None, logs={"reward": None, "loss": None, "rewards/reward_success/mean": None}
    )
    assert "reward n/a" in stream.getvalue() and "loss n/a" in stream.getvalue()
    assert json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])["reward"] is None
