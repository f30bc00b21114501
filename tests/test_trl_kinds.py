"""The kinds of training run answer one interface from a frozen plan: what `--eval-every` can
play is said once (`why_no_held_out`) and `evaluate_task` agrees with it, and the layers a
rollout is stacked in forward what it says."""

from __future__ import annotations

import dataclasses

import pytest

from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.exploration import GroupStats
from envharness.integrations.trl.kinds import AgentRun, MixRun, OpponentRun, SelfPlayRun, TextRun, VisionRun
from envharness.integrations.trl.layers import FunctionRollout, Layer, Rollout, stack_layers

MIX = {"browsergym": ["click-test"], "textarena": ["KuhnPoker-v0"]}

#: kind, configuration, whether --eval-every can play its held-out tasks
KINDS = [
    (TextRun, TrainConfig(env="textarena", tasks=["Wordle-v0"], model="tiny"), True),
    (VisionRun, TrainConfig(env="browsergym", tasks=["click-test"], model="tiny"), False),
    (SelfPlayRun, TrainConfig(env="textarena", tasks=["TicTacToe-v0"], opponent="self", model="tiny"), False),
    (OpponentRun, TrainConfig(env="textarena", tasks=["KuhnPoker-v0"], opponent="tiny", model="tiny"), False),
    (AgentRun, TrainConfig(env="textarena", tasks=["Wordle-v0"], agent="agent.py:play", model="tiny"), False),
    (MixRun, TrainConfig(mix=MIX, model="tiny"), True),
    (MixRun, TrainConfig(mix=MIX, opponent="scripted", model="tiny"), True),  # the server plays it
    (MixRun, TrainConfig(mix=MIX, opponent="self", model="tiny"), False),  # a model in a seat
]


@pytest.mark.parametrize(("kind", "config", "evaluates"), KINDS, ids=lambda k: getattr(k, "name", None))
def test_evaluate_task_is_there_exactly_where_held_out_evaluation_is_allowed(kind, config, evaluates):
    run = kind()
    plan = run.resolve(config)
    why = run.why_no_held_out(plan)
    task = run.evaluate_task(plan, tokenizer=None, clients={})
    assert (why is None) is evaluates
    assert (task is not None) is evaluates, why


def test_the_check_refuses_eval_every_with_the_kinds_own_words():
    for kind, config, evaluates in KINDS:
        if kind in (VisionRun, AgentRun) or evaluates:  # vision needs a VLM; an agent, its file
            continue
        plan = kind().resolve(config)
        with pytest.raises(TrainSetupError) as refused:
            check_config(dataclasses.replace(config, eval_every=1))
        assert str(refused.value) == kind().why_no_held_out(plan)


def test_a_kind_keeps_no_state_between_its_calls():
    """Two plans from one kind stay apart: the plan is the state, not the kind."""
    run = MixRun()
    seated = run.resolve(TrainConfig(mix=MIX, opponent="scripted", model="tiny"))
    plain = run.resolve(TrainConfig(mix={"browsergym": ["click-test"]}, model="tiny"))
    assert [row.name for row in seated.rows] == ["browsergym", "textarena"]
    assert [row.name for row in plain.rows] == ["browsergym"]
    assert dict(seated.rows[1].seats.server_options) == {"opponent": "scripted", "seat": "alternate"}
    assert vars(run) == {}


def test_layers_are_built_inside_out_and_forward_what_the_rollout_says():
    order: list[str] = []
    closed: list[str] = []

    class Played(Rollout):
        records = "the writer"  # what the kind's rollout writes to

        def __call__(self, prompts, trainer):
            order.append("played")
            self.metrics = {"episodes": len(prompts)}
            return {"success": [True] * len(prompts)}

        def close(self):
            closed.append("played")

    def named(name):
        class Named(Layer):
            def __call__(self, prompts, trainer):
                order.append(name)
                return self.inner(prompts, trainer)

        return Named

    rollout = stack_layers(Played(), [named("inner"), GroupStats, named("outer")])
    assert rollout(["p", "p"], None) == {"success": [True, True]}
    assert order == ["outer", "inner", "played"]  # the last layer is the one TRL calls
    assert rollout.records == "the writer" and rollout.metrics == {"episodes": 2}
    assert [type(c).__name__ for c in rollout.callbacks()] == ["_GroupStatsCallback"]
    rollout.close()
    assert closed == ["played"]
    assert FunctionRollout(lambda p, t: {}).metrics == {}
