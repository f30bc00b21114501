"""`envharness train` end to end (tiny random model, LoRA, two GRPO steps on the real browser env),
and the client pool that lets training episodes reuse browser sessions."""

from __future__ import annotations

import functools
import json
import os

import pytest

from envharness.cli import main as cli_main
from envharness.harness import read_records

pytestmark = pytest.mark.timeout(300)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_train_two_steps_leaves_checkpoints_curve_and_every_episode(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli_main(
        [
            "train",
            "--model",
            "tiny",
            "--lora",
            "--steps",
            "2",
            "--save-steps",
            "1",
            "--output-dir",
            str(out),
            "--num-generations",
            "2",
            "--groups-per-step",
            "2",
            "--max-completion-length",
            "8",
            "--reward",
            "success",
            "--reward",
            "sum",
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "[train] step 1/2" in err and "[train] step 2/2" in err  # one progress line per step

    for checkpoint in ("checkpoint-1", "checkpoint-2"):
        assert (out / checkpoint / "adapter_model.safetensors").is_file()  # LoRA: the adapter is saved
        assert (out / checkpoint / "trainer_state.json").is_file()
    assert json.loads((out / "final" / "adapter_config.json").read_text())["r"] == 16
    assert (out / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "train_config.json").read_text())["lora"] is True

    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in logs if "reward" in log]
    assert [log["step"] for log in steps] == [1, 2]
    assert all("rewards/reward_success/mean" in log and "rewards/reward_sum/mean" in log for log in steps)
    for log in steps:  # exploration along the curve: zero-variance and all-failed groups, with their errors
        assert "frac_reward_zero_std" in log and log["sampled_nll"] > 0
        assert 0 <= log["groups/all_failed"] <= 1 and isinstance(log["groups/all_failed_errors"], list)
    for log in steps:  # the decoder's split of the step: 4 episodes of one turn of at most 8 tokens
        assert 1 <= log["decoder/admissions"] <= 4  # each arrival prefilled once, alone or together
        assert 1 <= log["decoder/forwards"] <= 7 * log["decoder/admissions"]  # the prefill gives token 1
        parts = sum(log[f"decoder/{k}"] for k in ("admit_s", "forward_s", "sample_s", "finish_s"))
        assert 0 < parts <= log["time/generate_s"] + 0.02  # the decoder works while a request waits

    records = read_records(out / "episodes.jsonl")  # the shared records format, every episode of every step
    assert sorted(r.metrics["train_step"] for r in records) == [0, 0, 0, 0, 1, 1, 1, 1]
    for r in records:
        assert r.error is None and r.task == "click-test" and 1_000_000 <= r.seed < 2_000_000
        assert len(r.tool_calls) == 1 and r.tool_calls[0]["action"]  # one turn, one browser action
        assert r.messages[-1]["role"] == "tool" and r.env_reward in (0.0, 1.0)
    for step in (0, 1):  # the two episodes of a group play the same page
        seeds = [r.seed for r in records if r.metrics["train_step"] == step]
        assert sorted(seeds)[0] == sorted(seeds)[1] and sorted(seeds)[2] == sorted(seeds)[3]


def test_bad_arguments_are_refused_in_words(capsys):
    assert cli_main(["train", "--num-generations", "1"]) == 2
    assert "--num-generations must be at least 2" in capsys.readouterr().err
    assert cli_main(["train", "--temperature", "0"]) == 2
    assert "--temperature must be positive" in capsys.readouterr().err


def test_client_pool_reuses_sessions_and_replaces_a_dead_one(training_browser_server):
    from envharness.core import ClientPool
    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.envs.browsergym.models import BrowserGymAction

    pool = ClientPool(functools.partial(BrowserGymEnv, base_url=training_browser_server.base_url))
    try:
        first = pool()
        result = first.reset(task="click-test", seed=1)
        session = first._client
        assert "Click Me!" in result.observation.axtree_txt
        first.close()
        with pytest.raises(RuntimeError, match="reset\\(\\) first"):
            first.step(BrowserGymAction(action_str="noop()"))

        second = pool()
        result = second.reset(task="click-button", seed=2)  # same session, another task
        assert second._client is session and second.state().task_name == "click-button"
        assert second.state().step_count == 0
        second.close()

        session.close()  # the connection goes away while the client sits in the pool
        third = pool()
        assert third.reset(task="click-test", seed=3).observation.goal == "Click the button."
        assert third._client is not session
        assert third.step(BrowserGymAction(action_str="noop()")).done is False
        third.close()
    finally:
        pool.close()
