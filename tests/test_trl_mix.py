"""`envharness train --mix`: one GRPO batch drawn across environments (`integrations/trl/mix.py`),
each environment on its own server with its own prompt, every group one task and one seed."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest

from envharness.cli import main as cli_main
from envharness.harness import read_records
from envharness.integrations.trl.layers import FunctionRollout
from envharness.integrations.trl.mix import MixedRollout, mix_prompt, parse_mix, prompt_key

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_mix_specs_are_parsed_and_bad_ones_refused():
    assert parse_mix(
        ["browsergym:click-test, enter-text", "textarena:Wordle-v0", "browsergym:click-test"]
    ) == {
        "browsergym": ["click-test", "enter-text"],
        "textarena": ["Wordle-v0"],
    }
    for bad in ("browsergym", "browsergym:", ":click-test"):
        with pytest.raises(ValueError, match="ENV:TASK"):
            parse_mix([bad])


def test_mixed_rollout_sends_each_group_to_its_environment_and_keeps_the_order():
    """The merge by position (the environments' rollouts themselves run in the training test)."""
    calls = {}

    def fake(env):
        def rollout(prompts, trainer):
            calls[env] = list(prompts)
            return {"success": [env == "a"] * len(prompts), "which": [env] * len(prompts)}

        return FunctionRollout(rollout)

    prompts = [mix_prompt("a:x", 1), mix_prompt("b:y", 2), mix_prompt("a:x", 1), mix_prompt("b:y", 2)]
    out = MixedRollout({"a": fake("a"), "b": fake("b")})(prompts, None)
    assert out == {"success": [True, False, True, False], "which": ["a", "b", "a", "b"]}
    assert calls == {"a": [prompts[0], prompts[2]], "b": [prompts[1], prompts[3]]}
    assert prompt_key(prompts[1]) == "b:y"
    with pytest.raises(ValueError, match="names environment 'c'"):
        MixedRollout({"a": fake("a")})([mix_prompt("c:z")], None)


@pytest.mark.timeout(900)
def test_train_one_batch_across_the_browser_and_wordle(tmp_path, capsys):
    out = tmp_path / "run"
    rc = cli_main(
        [
            "train",
            "--model",
            "tiny",
            "--mix",
            "browsergym:click-test",
            "--mix",
            "textarena:Wordle-v0",
            "--max-turns",
            "2",
            "--steps",
            "2",
            "--save-steps",
            "5",
            "--output-dir",
            str(out),
            "--num-generations",
            "2",
            "--groups-per-step",
            "2",
            "--max-completion-length",
            "8",
            "--eval-every",
            "2",
            "--eval-tasks",
            "browsergym:click-button",
            "--eval-episodes",
            "1",
        ]
    )
    assert rc == 0
    # the progress line gives each environment's success beside the batch's
    assert re.search(
        r"step 1/2 .*success \d\.\d\d \(browsergym \d\.\d\d, textarena \d\.\d\d\)", capsys.readouterr().err
    )
    (held_out,) = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    assert held_out["step"] == 2 and {k for k in held_out if k.endswith("/success")} == {
        "eval/browsergym:click-test/success",
        "eval/textarena:Wordle-v0/success",
        "eval/browsergym:click-button/success",  # transfer, on the browser's server
    }
    assert (out / "best" / "best.json").is_file()
    config = json.loads((out / "train_config.json").read_text())
    assert config["mix"] == {"browsergym": ["click-test"], "textarena": ["Wordle-v0"]}
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in steps if "reward" in log]
    assert [log["step"] for log in steps] == [1, 2]
    for log in steps:  # uniform: both environments in every batch, each reported on its own
        assert sorted(log["curriculum/drawn"]) == ["browsergym:click-test", "textarena:Wordle-v0"]
        for key in log["curriculum/drawn"]:
            assert 0 <= log[f"tasks/{key}/success"] <= 1 and 0 <= log[f"tasks/{key}/zero_variance"] <= 1
        for env in ("browsergym", "textarena"):  # and each environment over its tasks
            assert (
                log[f"envs/{env}/success"]
                == log[f"tasks/{env}:{dict(browsergym='click-test', textarena='Wordle-v0')[env]}/success"]
            )
            assert 0 <= log[f"envs/{env}/zero_variance"] <= 1

    # every episode plays again on a fresh server of its own environment, and comes out the same
    assert cli_main(["replay", str(out)]) == 0
    replayed = json.loads((out / "replay.json").read_text())
    assert replayed["env"] == "browsergym+textarena" and replayed["identical"] == replayed["episodes"] == 8
    assert cli_main(["replay", str(out), "--env-url", "http://127.0.0.1:9"]) == 2  # one URL cannot serve both

    records = read_records(out / "episodes.jsonl")
    played = Counter((r.metrics["env"], r.task, r.metrics["train_step"]) for r in records)
    assert played == {
        ("browsergym", "click-test", 0): 2,
        ("textarena", "Wordle-v0", 0): 2,
        ("browsergym", "click-test", 1): 2,
        ("textarena", "Wordle-v0", 1): 2,
    }
    for r in records:  # each environment played through its own tools and parser
        assert r.error is None and r.tool_calls
        if r.metrics["env"] == "textarena":
            assert r.tool_calls[0]["name"] == "send"
        else:
            assert r.tool_calls[0]["action"]  # a browser action string


def test_a_mix_refuses_what_belongs_to_one_environment(capsys):
    rc = cli_main(["train", "--model", "tiny", "--mix", "textarena:Wordle-v0", "--reward", "greens"])
    assert rc == 2 and "a mix takes" in capsys.readouterr().err
    rc = cli_main(["train", "--model", "tiny", "--mix", "textarena:Wordle-v0", "--tasks", "click-test"])
    assert rc == 2 and "leave out --tasks" in capsys.readouterr().err
    rc = cli_main(["train", "--model", "tiny", "--mix", "nosuchenv:x"])
    assert rc == 2 and "--mix nosuchenv" in capsys.readouterr().err
    rc = cli_main(
        [
            "train",
            "--model",
            "tiny",
            "--mix",
            "textarena:Wordle-v0",
            "--eval-every",
            "1",
            "--eval-tasks",
            "click-test",
        ]
    )
    assert rc == 2 and "name ENV:TASK of one of textarena" in capsys.readouterr().err
