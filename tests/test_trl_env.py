"""Any environment as TRL's `environment_factory` (`integrations/trl/environment.py`): the browser
(click-test) and Wordle, their tools as methods made from their own tool specs."""

from __future__ import annotations

import functools
import os
import re

import pytest

from envharness.integrations.trl import task_prompt
from envharness.integrations.trl.environment import environment_factory

pytestmark = pytest.mark.timeout(240)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TOOLS = {"click", "fill", "send_keys", "scroll", "noop"}


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


@pytest.fixture()
def make_env(server_url):
    from envharness.envs.browsergym import BrowserGymEnv

    return environment_factory(
        "browsergym", functools.partial(BrowserGymEnv, base_url=server_url), task="click-test"
    )


def test_tools_drive_the_browser_and_the_reward_follows(make_env):
    with make_env() as env:
        text = env.reset(prompt=task_prompt("click-test", 3))
        assert "Goal: Click the button." in text
        bid = re.search(r"\[(\w+)\] button 'Click Me!'", text).group(1)
        assert env.get_reward() == 0.0

        missing = env.click("no-such-bid")
        assert missing.startswith("Error: ") and "no-such-bid" in missing
        assert env.get_reward() == 0.0

        solved = env.click(bid)
        assert "Reward: 1.0  Done: True" in solved and env.get_reward() == 1.0
        assert "episode is over" in env.noop()

        env.reset(task="click-test", seed=4)  # a dataset row may name task and seed itself
        assert env.get_reward() == 0.0


def test_bad_arguments_come_back_as_text_for_the_model(make_env):
    with make_env() as env:
        env.reset()
        assert env.scroll("sideways").startswith("Error: bad arguments for scroll")
        assert env.get_reward() == 0.0


def test_public_methods_are_exactly_the_environments_tools_with_their_schemas(make_env):
    """The methods say what the environment's tool specs say (TRL reads them with get_json_schema)."""
    import inspect

    from transformers.utils import get_json_schema

    with make_env() as env:
        cls = type(env)
    assert cls.__name__ == "BrowserGymToolEnv"
    public = {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}
    assert public == TOOLS | {"reset", "get_reward"}
    specs = {t["name"]: t for t in cls.tools}
    for name in TOOLS:
        schema = get_json_schema(getattr(cls, name))["function"]
        assert schema["description"] == specs[name]["description"]
        assert schema["parameters"].get("required", []) == specs[name]["inputSchema"].get("required", [])
        assert set(schema["parameters"].get("properties", {})) == set(
            specs[name]["inputSchema"]["properties"]
        )
    assert get_json_schema(cls.click)["function"]["parameters"]["properties"]["bid"]["type"] == "string"


def test_wordle_through_the_same_adapter(tmp_path):
    """A second environment needs nothing of its own: its one tool `send` becomes the method."""
    from envharness.core.launchers import LocalServer
    from envharness.envs.textarena import TextArenaEnv

    with LocalServer("textarena") as server:
        make = environment_factory(
            "textarena", functools.partial(TextArenaEnv, base_url=server.base_url), task="Wordle-v0"
        )
        with make() as env:
            assert type(env).__name__ == "TextArenaToolEnv"
            opening = env.reset(task="Wordle-v0", seed=1)
            assert "Wordle" in opening
            answer = env.send(message="[crane]")
            assert "crane" in answer.lower() and env.get_reward() >= 0.0
            assert env.send(message="").startswith("Error: ")  # refused with a message; the game goes on
            assert "slate" in env.send(message="[slate]").lower()  # the session lived on


def test_grpo_trainer_takes_it_as_environment_factory(make_env, tmp_path):
    """TRL probes the class, lists its tools, resets one instance per rollout and scores with get_reward."""
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from envharness.integrations.trl.training import TrainConfig, grpo_config
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model()
    tokenizer.chat_template = (
        qwen2_5_chat_template  # SmolLM2's template has no tool calls; same ChatML tokens
    )
    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=1,
        max_completion_length=8,
        learning_rate=1e-2,
    )
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
        assert (
            env._session is not None and env._session.task == "click-test" and env.get_reward() in (0.0, 1.0)
        )
        env.__exit__(None, None, None)


def test_every_browser_tool_becomes_a_method_with_a_schema():
    """All 22 browser tools (array-typed arguments and aliases included) as methods TRL can read."""
    from transformers.utils import get_json_schema

    from envharness.core.registry import env_harness
    from envharness.integrations.trl.environment import _tools_of, tool_environment_class

    harness = env_harness("browsergym")
    defaults = harness.session_factory(lambda: None).tool_specs
    from envharness.envs.browsergym.action_text import ACTION_TOOLS

    factory = harness.session_factory(lambda: None, tools=list(ACTION_TOOLS))
    cls = tool_environment_class("browsergym", _tools_of(factory))
    assert len(cls.tools) == len(ACTION_TOOLS) == 22 > len(defaults) == 5
    for spec in cls.tools:
        schema = get_json_schema(getattr(cls, spec["name"]))["function"]
        assert schema["name"] == spec["name"] and set(schema["parameters"].get("properties", {})) == set(
            spec["inputSchema"]["properties"]
        )


def test_grpo_trainer_steps_on_a_mix_of_the_browser_and_wordle(server_url, tmp_path):
    """TRL's `dict` of factories: each row's `environment` picks its environment, the row's task
    and seed reach that environment's reset, and each environment scores its own rollouts."""
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from envharness.core.launchers import LocalServer
    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.envs.textarena import TextArenaEnv
    from envharness.integrations.trl.environment import environment_dataset
    from envharness.integrations.trl.training import TrainConfig, grpo_config
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model()
    tokenizer.chat_template = qwen2_5_chat_template
    config = TrainConfig(
        model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=2
    )
    with LocalServer("textarena") as wordle:
        factories = {
            "browsergym": environment_factory(
                "browsergym", functools.partial(BrowserGymEnv, base_url=server_url)
            ),
            "textarena": environment_factory(
                "textarena", functools.partial(TextArenaEnv, base_url=wordle.base_url), task="Wordle-v0"
            ),
        }
        dataset = environment_dataset({"browsergym": ["click-test"], "textarena": ["Wordle-v0"]}, 4)
        assert dataset["environment"] == ["browsergym", "textarena", "browsergym", "textarena"]
        assert all(1_000_000 <= s < 2_000_000 for s in dataset["seed"])
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            environment_factory=factories,
            train_dataset=dataset,
            args=grpo_config(config, save_strategy="no", max_completion_length=8),
        )
        assert {t.__name__ for t in trainer._env_tools["textarena"]} == {"send"}
        assert {t.__name__ for t in trainer._env_tools["browsergym"]} == TOOLS
        assert sorted(trainer.reward_func_names) == ["BrowserGymToolEnv", "TextArenaToolEnv"]
        trainer.train()
        assert trainer.state.global_step == 1
        played = sorted((type(env).__name__, env._session.task) for env in trainer.environments)
        assert played == [("BrowserGymToolEnv", "click-test")] * 2 + [("TextArenaToolEnv", "Wordle-v0")] * 2
        for env in trainer.environments:
            assert env.get_reward() >= 0.0
            env.__exit__(None, None, None)


def test_a_vision_style_returns_screenshots_as_image_blocks(server_url):
    """With the browser's vision style a tool returns TRL's multimodal content: the screenshot as an
    image block (a PIL image) beside the text; without it, text only."""
    from PIL import Image

    from envharness.envs.browsergym import BrowserGymEnv

    clients = functools.partial(BrowserGymEnv, base_url=server_url)
    with environment_factory("browsergym", clients, task="click-test", style="vision")() as env:
        env.reset(task="click-test", seed=3)
        blocks = env.noop()
        assert isinstance(blocks, list)
        images = [b["image"] for b in blocks if b["type"] == "image"]
        assert len(images) == 1 and isinstance(images[0], Image.Image) and images[0].size[0] > 100
        assert any(b["type"] == "text" and b["text"] for b in blocks)
    with environment_factory("browsergym", clients, task="click-test")() as env:
        env.reset(task="click-test", seed=3)
        assert isinstance(env.noop(), str)
    with pytest.raises(ValueError, match="no sessions of its own"):
        environment_factory("browsergym", clients, style="compact")
