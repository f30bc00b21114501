"""`BrowserGymToolEnv` as TRL's `environment_factory`, on the real browser env (click-test)."""

from __future__ import annotations

import functools
import os
import re

import pytest

from envharness.integrations.trl import task_prompt
from envharness.integrations.trl.environment import BrowserGymToolEnv, browsergym_environment_factory

pytestmark = pytest.mark.timeout(240)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TOOLS = {"click", "fill", "send_keys", "scroll", "noop"}


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


@pytest.fixture()
def make_env(server_url):
    from envharness.envs.browsergym import BrowserGymEnv

    return browsergym_environment_factory(functools.partial(BrowserGymEnv, base_url=server_url), task="click-test")


def test_tools_drive_the_browser_and_the_reward_follows(make_env):
    with make_env() as env:
        text = env.reset(prompt=task_prompt("click-test", 3))
        assert "Goal: Click the button." in text
        bid = re.search(r"\[(\w+)\] button 'Click Me!'", text).group(1)
        assert env.get_reward() == 0.0

        missing = env.click("no-such-bid")
        assert "Previous action error:" in missing and "no-such-bid" in missing
        assert env.get_reward() == 0.0

        solved = env.click(bid)
        assert "Reward: 1.0  Done: True" in solved and env.get_reward() == 1.0
        assert "episode is over" in env.noop()

        env.reset(task="click-test", seed=4)  # a dataset row may name task and seed itself
        assert env.get_reward() == 0.0


def test_bad_arguments_come_back_as_text_for_the_model(make_env):
    with make_env() as env:
        env.reset()
        assert "Previous action error:" in env.scroll("sideways")
        assert env.get_reward() == 0.0


def test_public_methods_are_exactly_the_browser_tools_with_schemas():
    from transformers.utils import get_json_schema

    public = {n for n in vars(BrowserGymToolEnv) if not n.startswith("_") and callable(getattr(BrowserGymToolEnv, n))}
    assert public == TOOLS | {"reset", "get_reward"}
    click = get_json_schema(BrowserGymToolEnv.click)["function"]
    assert click["description"] == "Click an element of the page."
    assert click["parameters"]["properties"]["bid"]["type"] == "string"
    assert click["parameters"]["required"] == ["bid"]
    fill = get_json_schema(BrowserGymToolEnv.fill)["function"]["parameters"]
    assert set(fill["required"]) == {"bid", "text"}


def test_grpo_trainer_takes_it_as_environment_factory(make_env, tmp_path):
    """TRL probes the class, lists its tools, resets one instance per rollout and scores with get_reward."""
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from envharness.integrations.trl.training import TrainConfig, grpo_config
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model()
    tokenizer.chat_template = qwen2_5_chat_template  # SmolLM2's template has no tool calls; same ChatML tokens
    config = TrainConfig(model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=1,
                         max_completion_length=8, learning_rate=1e-2)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=make_env,
        args=grpo_config(config, save_strategy="no"),
    )
    assert {tool.__name__ for tool in trainer._env_tools[None]} == TOOLS
    assert trainer.reward_func_names == ["BrowserGymToolEnv"]
    trainer.train()
    assert trainer.state.global_step == 1
    assert len(trainer.environments) == 2
    for env in trainer.environments:
        state = env._client.state()
        assert state.task_name == "click-test" and env.get_reward() in (0.0, 1.0)
        env.__exit__(None, None, None)
