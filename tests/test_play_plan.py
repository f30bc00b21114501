"""One plan of play: `eval`, `train` and `sft` resolve the same environment group through one
resolver (`harness/plan.py`) to an equal plan, and a mix is a plan of several rows."""

from __future__ import annotations

import pytest

from envharness.cli.sft import prepare
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.harness.groups import EnvironmentArgs
from envharness.harness.plan import EVALUATION, PlanError, resolve_mix, resolve_plan
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds import MixRun, TextRun
from envharness.integrations.trl.sft import SFTRunConfig

#: One environment group, as each command is given it.
GROUP = {"env": "textarena", "tasks": ["KuhnPoker-v0"], "opponent": "scripted", "seat": "1"}
MIX = {"browsergym": ["click-test"], "textarena": ["KuhnPoker-v0"]}


def test_eval_train_and_sft_resolve_one_group_to_one_plan(tmp_path):
    evaluated = EvalConfig(out=str(tmp_path / "eval"), model="scripted", **GROUP).check()
    trained = check_config(TrainConfig(model="tiny", output_dir=str(tmp_path / "train"), **GROUP))
    sft, _, _ = prepare(SFTRunConfig(model="tiny", output_dir=str(tmp_path / "sft"), **GROUP))

    assert evaluated.plan == trained.plan.play  # one row: the environment, tasks, seats, prompt, options
    (row,) = evaluated.plan.rows
    assert (row.name, row.tasks, row.prompt) == ("textarena", ("KuhnPoker-v0",), "default")
    assert row.seats.seat == "1" and row.seats.client_opponent is None
    assert row.server_options == {"opponent": "scripted", "seat": "1"}  # the server plays the other seat
    for config in (evaluated.config, trained.config, sft):  # each command's resolved copy says the same
        assert (config.tasks, config.env_options, config.prompt) == (
            list(row.tasks),
            row.server_options,
            row.prompt,
        )


def test_a_mix_is_a_plan_of_several_rows_and_one_environment_a_plan_of_one():
    mix = MixRun().resolve(TrainConfig(mix=MIX, opponent="scripted", model="tiny")).play
    assert mix == resolve_mix(MIX, "scripted", "alternate")
    assert [row.name for row in mix.rows] == ["browsergym", "textarena"]
    assert [row.tasks for row in mix.rows] == [("click-test",), ("KuhnPoker-v0",)]
    assert [row.prompt for row in mix.rows] == ["compact", "default"]  # each environment's training style
    assert mix.rows[0].server_options == {}  # a single-player environment plays as ever
    assert mix.rows[1].server_options == {"opponent": "scripted", "seat": "alternate"}

    single = TextRun().resolve(TrainConfig(env="textarena", tasks=["Wordle-v0"], model="tiny")).play
    assert [(row.name, row.tasks) for row in single.rows] == [("textarena", ("Wordle-v0",))]


def test_each_command_refuses_a_bad_group_with_the_resolvers_words(tmp_path):
    bad = {**GROUP, "tasks": ["Wordle-v0"]}  # one player: no other seat for the opponent
    with pytest.raises(PlanError) as said:
        resolve_plan(EnvironmentArgs(**bad), EVALUATION)  # the group alone
    assert "Wordle-v0 is a single-player game" in str(said.value)
    refusals = [
        (EvalSetupError, lambda: EvalConfig(out=str(tmp_path / "eval"), model="scripted", **bad).check()),
        (
            TrainSetupError,
            lambda: check_config(TrainConfig(model="tiny", output_dir=str(tmp_path / "t"), **bad)),
        ),
        (TrainSetupError, lambda: prepare(SFTRunConfig(model="tiny", output_dir=str(tmp_path / "s"), **bad))),
    ]
    for error, command in refusals:
        with pytest.raises(error) as refused:
            command()
        assert str(refused.value) == str(said.value)
