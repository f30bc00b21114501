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
def server_url(training_browser_server):
    """Started as `train` starts its server, so replay (which starts one the same way) matches."""
    return training_browser_server.base_url


@pytest.fixture()
def make_env(server_url):
    from envharness.envs.browsergym import BrowserGymEnv

    return environment_factory(
        "browsergym", functools.partial(BrowserGymEnv, base_url=server_url), task="click-test"
    )


def test_tools_drive_the_browser_and_the_reward_follows(make_env):
    with make_env() as env:
        text = env.reset(prompt=task_prompt("click-test", 3))
        opening = len(env.messages)  # the session's own opening (a worked example included)
        assert "Goal: Click the button." in text
        bid = re.search(r"\[(\w+)\] button 'Click Me!'", text).group(1)
        assert env.get_reward() == 0.0

        missing = env.click("no-such-bid")
        assert missing.startswith("Error: ") and "no-such-bid" in missing
        assert env.get_reward() == 0.0

        solved = env.click(bid)
        assert "The episode is over (reward 1.0)" in solved and env.get_reward() == 1.0
        calls = [m["tool_calls"][0]["function"] for m in env.messages[opening:] if m.get("tool_calls")]
        assert calls == [
            {"name": "click", "arguments": {"bid": "no-such-bid"}},
            {"name": "click", "arguments": {"bid": bid}},
        ]
        assert [m["role"] for m in env.messages[opening:]] == ["assistant", "tool"] * 2
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


def test_grpo_trainer_takes_it_as_environment_factory(server_url, tmp_path):
    """TRL probes the class, lists its tools, resets one instance per rollout and scores with
    get_reward; with no dataset each group of rollouts plays one seed; the episodes land in the
    log as train writes them and replay identically; the environments close when training ends."""
    from trl import GRPOTrainer

    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.harness.records import read_records
    from envharness.integrations.trl.environment import EpisodeLog, close_at_train_end, load_model
    from envharness.integrations.trl.grpo_args import grpo_config
    from envharness.integrations.trl.training import TrainConfig
    from envharness.replay import replay_run

    model, tokenizer = load_model("tiny", tools=True)  # no template swap by hand
    factory = environment_factory(
        "browsergym",
        functools.partial(BrowserGymEnv, base_url=server_url),
        task="click-test",
        tokenizer=tokenizer,
        num_generations=2,
        log=EpisodeLog(tmp_path / "run"),
    )
    config = TrainConfig(
        model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=2,
        max_completion_length=8, learning_rate=1e-2,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=factory,
        args=grpo_config(config, save_strategy="no"),
        callbacks=[close_at_train_end(factory)],
    )
    assert {tool.__name__ for tool in trainer._env_tools[None]} == TOOLS
    assert trainer.reward_func_names == ["BrowserGymToolEnv"]
    trainer.train()
    assert trainer.state.global_step == 1
    assert len(trainer.environments) == 4
    assert all(env._session is None for env in factory.instances)  # closed at the end of training
    records = read_records(tmp_path / "run" / "episodes.jsonl")
    assert len(records) == 4 and {r.task for r in records} == {"click-test"}
    seeds = [r.seed for r in records]
    assert seeds[0] == seeds[1] != seeds[2] == seeds[3]  # one seed per group, rollouts in order
    assert all(r.env_reward in (0.0, 1.0) and r.metrics["env"] == "browsergym" for r in records)
    report = replay_run(tmp_path / "run")
    assert report.identical == len(report.episodes) == 4


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


def test_a_vision_style_returns_screenshots_as_image_blocks(server_url):
    """With the browser's vision style a tool returns TRL's multimodal content: the screenshot as an
    image block (a PIL image) beside the text; without it, text only."""
    from PIL import Image

    from envharness.envs.browsergym import BrowserGymEnv

    clients = functools.partial(BrowserGymEnv, base_url=server_url)
    with environment_factory("browsergym", clients, task="click-test", style="vision")() as env:
        opening = env.reset(task="click-test", seed=3)
        # as train shows a VLM: the system text, then the goal, then the first screenshot; the
        # style's worked example is marked as one, with its answer, before the real goal
        assert [b["type"] for b in opening] == ["text", "image"] and isinstance(
            opening[1]["image"], Image.Image
        )
        text = opening[0]["text"]
        assert text.startswith("You control a web browser. You see a screenshot")
        assert (
            text.index('Open the "next" link')
            < text.index("the reply is:")
            < text.index("Goal: Click the button.")
        )
        assert "Goal: Click the button." in text.split("</tool_call>")[-1]
        blocks = env.noop()
        assert isinstance(blocks, list)
        images = [b["image"] for b in blocks if b["type"] == "image"]
        assert len(images) == 1 and isinstance(images[0], Image.Image) and images[0].size[0] > 100
        assert any(b["type"] == "text" and b["text"] for b in blocks)
    with environment_factory("browsergym", clients, task="click-test")() as env:
        env.reset(task="click-test", seed=3)
        assert isinstance(env.noop(), str)
    with pytest.raises(ValueError, match="unknown prompt style"):
        environment_factory("browsergym", clients, style="no-such-style")


def test_the_opening_asks_for_tool_calls_in_the_templates_form(make_env, server_url):
    """reset() asks for tool calls and shows one exactly as the model's template writes it; none
    of the plain-text reply formats TRL's loop never plays is left."""
    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.integrations.trl.environment import load_model
    from envharness.integrations.trl.tool_opening import render_tool_call

    _, tokenizer = load_model("tiny", tools=True)
    call = render_tool_call(tokenizer, "click", {"bid": "4"})
    assert call == '<tool_call>\n{"name": "click", "arguments": {"bid": "4"}}\n</tool_call>'
    clients = functools.partial(BrowserGymEnv, base_url=server_url)
    with environment_factory("browsergym", clients, task="click-test", tokenizer=tokenizer)() as env:
        text = env.reset(task="click-test", seed=3)
    assert "Act only by calling the tools (click, fill, send_keys, scroll, noop)" in text
    assert call in text and text.index(call) < text.index("Goal: Click the button.")
    assert "Reply with" not in text and "Action:" not in text and "click('" not in text
    own = environment_factory("browsergym", clients, opening="Use {tools}. Like: {call}")()
    with own as env:
        assert env.reset(task="click-test", seed=3).split("\n\n")[1].startswith("Use click, fill")
    with environment_factory("browsergym", clients, opening=lambda messages: "mine")() as env:
        assert env.reset(task="click-test", seed=3) == "mine"


def test_every_environment_gets_the_tool_opening_wordle_and_echo():
    """Wordle registers its own tool opening (a `send` call with its example move); echo
    registers none and still gets the generic instruction with a call of its tool."""
    from envharness.core.launchers import LocalServer
    from envharness.envs.echo.client import EchoEnv
    from envharness.envs.textarena import TextArenaEnv
    from envharness.integrations.trl.environment import load_model

    _, tokenizer = load_model("tiny", tools=True)
    with LocalServer("textarena") as server:
        clients = functools.partial(TextArenaEnv, base_url=server.base_url)
        with environment_factory("textarena", clients, task="Wordle-v0", tokenizer=tokenizer)() as env:
            text = env.reset(seed=1)
    assert (
        '{"name": "send", "arguments": {"message": "[crane]"}}' in text and "You are Playing Wordle" in text
    )
    assert "last bracketed move" not in text
    with (
        LocalServer("echo") as server,
        environment_factory("echo", functools.partial(EchoEnv, base_url=server.base_url))() as env,
    ):
        text = env.reset()
        assert "Act only by calling the tools (echo)" in text and '"name": "echo"' in text
        assert env.echo(message="hello there, world") and env.get_reward() == 1.0


def test_named_rewards_as_train_takes_them(tmp_path):
    """`reward="greens"` makes get_reward Wordle's shaped reward; `reward_funcs` adds columns that
    score only their environment's rollouts; an unknown name is refused with the choices."""
    from envharness.core.launchers import LocalServer
    from envharness.envs.textarena import TextArenaEnv
    from envharness.envs.textarena.wordle import FEEDBACK
    from envharness.integrations.trl.environment import reward_funcs

    with LocalServer("textarena") as server:
        clients = functools.partial(TextArenaEnv, base_url=server.base_url)
        with environment_factory("textarena", clients, task="Wordle-v0", reward="greens")() as env:
            env.reset(seed=1)
            feedback = env.send(message="[crane]")
            marks = FEEDBACK.findall(feedback)[-1][2].replace(" ", "")  # the game's G/Y/X for crane
            assert env.get_reward() == marks.count("G") / len(marks)
            assert env._reward == 0.0  # the game's own reward: not won
            (column,) = reward_funcs("textarena", "yellows")
            assert column.__name__ == "textarena_yellows"
            values = column(["x", "y"], environments=[env, object()])
            assert values == [marks.count("Y") / len(marks), None]
    with pytest.raises(ValueError, match="unknown reward 'nope'.*greens"):
        environment_factory("textarena", clients, reward="nope")


def test_driven_episodes_are_logged_and_replay_identically(make_env, server_url, tmp_path):
    """Episodes with tool calls, logged by the adapter, replay identically with `envharness replay`."""
    from envharness.cli import main as cli_main
    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.harness.records import read_records
    from envharness.integrations.trl.environment import EpisodeLog

    log = EpisodeLog(tmp_path / "run")
    clients = functools.partial(BrowserGymEnv, base_url=server_url)
    with environment_factory("browsergym", clients, task="click-test", log=log) as factory:
        env = factory()
        for seed in (5, 6):
            text = env.reset(seed=seed)
            env.click("no-such-bid")
            env.click(re.search(r"\[(\w+)\] button 'Click Me!'", text).group(1))
    records = read_records(tmp_path / "run" / "episodes.jsonl")
    assert [(r.seed, len(r.tool_calls), r.env_reward, r.metrics["success"]) for r in records] == [
        (5, 2, 1.0, True),
        (6, 2, 1.0, True),
    ]
    assert records[0].tool_calls[0]["error"] and records[0].messages[-1]["role"] == "tool"
    assert records[0].messages[-2]["tool_calls"][0]["function"]["name"] == "click"
    assert cli_main(["replay", str(tmp_path / "run")]) == 0


def test_one_seed_per_group_without_seeds_in_the_rows():
    """The k-th reset of a batch is in group k // num_generations; a batch starts over when an
    instance is reset again; without a group size a batch shares one seed."""
    from envharness.integrations.trl.environment_log import GroupSeeds

    seeds, envs = GroupSeeds(2, seed=0), [object() for _ in range(4)]
    first = [seeds.next(e) for e in envs]
    second = [seeds.next(e) for e in envs]
    assert first[0] == first[1] != first[2] == first[3] and second[0] == second[1] != second[2] == second[3]
    assert len(set(first + second)) == 4
    batch = GroupSeeds(seed=0)
    assert len({batch.next(e) for e in envs}) == 1
