"""One registry of prompt styles for eval and train, and proof that both run a style the same way.

The end-to-end tests play one episode through train's rollout function (`build_env_rollout_func`
with `prompt_options(style)`, the trainer's generation replaced by a given backend) and one
through `run_eval` with the same backend, on the same real browser server, task and seed: the
messages (and, for a conversation style, the exact token ids and env mask) must be equal.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from envharness import prompts
from envharness.cli import main as cli_main
from envharness.core.client_pool import ClientPool
from envharness.envs.browsergym import BrowserGymEnv
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.eval.runner import run_eval
from envharness.harness import HarnessRunLimits, read_records
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.prompting import prompt_options
from envharness.integrations.trl.rollout import build_env_rollout_func, task_prompt
from envharness.integrations.trl.training import TrainConfig, TrainSetupError
from envharness.prompts import PromptStyle, get_prompt_style, prompt_names, register_prompt_style

pytestmark = pytest.mark.timeout(600)


# -- the registry ----------------------------------------------------------------------------
def _echo_goal(observation, task, tool_names):
    return [{"role": "user", "content": f"Goal: {observation.goal}"}]


def goal_step(ctx):
    return [{"role": "user", "content": f"Goal: {ctx.goal}"}]


def test_the_registry_names_the_styles_eval_and_train_share(monkeypatch):
    assert {"default", "compact", "harness"} <= set(prompt_names())
    assert get_prompt_style("compact").conversation and not get_prompt_style("default").conversation
    assert get_prompt_style(None) is get_prompt_style("default")
    with pytest.raises(
        ValueError, match="unknown prompt style 'nope'; choose from default, compact, harness"
    ):
        get_prompt_style("nope")
    user = get_prompt_style(f"{__name__}:goal_step")  # a user's per-step builder
    assert not user.conversation and user.step is goal_step
    with pytest.raises(ValueError, match="exactly one of"):
        PromptStyle("broken", "neither")

    # registering a style is one call; both commands then accept it
    monkeypatch.setattr(prompts, "_STYLES", dict(prompts._STYLES))
    register_prompt_style(PromptStyle("goal-only", "just the goal", opening=_echo_goal))
    with pytest.raises(ValueError, match="already registered"):
        register_prompt_style(PromptStyle("goal-only", "again", opening=_echo_goal))
    EvalConfig(out="x", prompt="goal-only", tasks=["click-test"], record_tokens=True).check()
    opts = prompt_options("goal-only")
    assert opts["prompt_builder"] is _echo_goal


def test_both_commands_refuse_an_unknown_style_and_train_a_per_step_style_over_turns(capsys):
    for command in ("eval", "train"):
        with pytest.raises(SystemExit) as exit_info:
            cli_main([command, "--prompt", "nope"])
        assert exit_info.value.code == 2
        assert "unknown prompt style 'nope'" in capsys.readouterr().err
    with pytest.raises(TrainSetupError, match="fresh prompt every step"):
        check_config(TrainConfig(prompt="default", max_turns=2))
    check_config(TrainConfig(prompt="default", max_turns=1))
    check_config(TrainConfig(prompt="compact", max_turns=3))
    with pytest.raises(EvalSetupError, match="--record-tokens needs a conversation prompt style"):
        EvalConfig(out="x", prompt="default", tasks=["click-test"], record_tokens=True).check()


# -- eval plays an episode exactly as train's rollout does -------------------------------------
@pytest.fixture(scope="module")
def browser_url(training_browser_server):
    return training_browser_server.base_url


@pytest.fixture(scope="module")
def tiny_backend():
    from envharness.models import load_backend

    return load_backend("tiny")


def _backend(kind, tiny_backend):
    if kind == "tiny":
        return tiny_backend
    from envharness.models import load_backend

    return load_backend("scripted")


def train_episode(url, backend, style, task, seed, turns, max_tokens, tmp_path):
    pool = ClientPool(functools.partial(BrowserGymEnv, base_url=url))
    tokenizer = getattr(backend, "tokenizer", None)
    rollout = build_env_rollout_func(
        "browsergym",
        pool,
        default_task=task,
        limits=HarnessRunLimits(max_turns=turns),
        records=tmp_path / "train.jsonl",
        include_tokens_in_records=True,
        session_factory_kwargs=prompt_options(style, tokenizer),
        backend_factory=lambda trainer: backend,
    )
    # what rollout_func reads from TRL's trainer (its model is replaced by `backend_factory`)
    trainer = SimpleNamespace(
        args=SimpleNamespace(temperature=0.0, top_p=1.0, top_k=0, max_completion_length=max_tokens),
        state=SimpleNamespace(global_step=0),
    )
    try:
        out = rollout([task_prompt(task, seed)], trainer)
    finally:
        rollout.records.close()
        pool.close()
    (record,) = read_records(tmp_path / "train.jsonl")
    assert record.error is None, record.error
    return out, record


def eval_episode(url, backend, style, task, seed, turns, max_tokens, tmp_path, record_tokens):
    config = EvalConfig(
        out=str(tmp_path / "eval"),
        tasks=[task],
        episodes=1,
        seed=seed,
        model="given",
        prompt=style,
        temperature=0.0,
        max_steps=turns,
        max_new_tokens=max_tokens,
        env_url=url,
        concurrency=1,
        screenshots=False,
        progress=False,
        record_tokens=record_tokens,
    )
    (record,) = run_eval(config, backend=backend).records
    assert record["error"] is None, record["error"]
    return record


@pytest.mark.parametrize(
    "style, kind, task, turns",
    [
        ("compact", "scripted", "enter-text", 3),  # real actions and page changes over three turns
        ("harness", "scripted", "enter-text", 3),
        ("compact", "tiny", "click-test", 2),  # a real tokenizer and model: exact token ids
        ("default", "tiny", "click-test", 1),  # a per-step style: train's one turn is eval's step 1
    ],
)
def test_eval_builds_the_messages_train_builds(style, kind, task, turns, browser_url, tiny_backend, tmp_path):
    backend = _backend(kind, tiny_backend)
    seed, max_tokens = 7, 6
    out, train = train_episode(browser_url, backend, style, task, seed, turns, max_tokens, tmp_path)
    conversation = get_prompt_style(style).conversation
    evaluated = eval_episode(
        browser_url, backend, style, task, seed, turns, max_tokens, tmp_path, record_tokens=conversation
    )

    assert evaluated["messages"] == train.messages
    if kind == "scripted":
        assert evaluated["env_reward"] == train.env_reward == 1.0  # the scripted policy solved it both ways
    # each step of the eval report shows what the model was given at that step of train's conversation
    steps = evaluated["steps"]
    opening = len(steps[0]["prompt"])
    replies = [i for i, m in enumerate(train.messages) if m["role"] == "assistant" and i >= opening]
    assert len(replies) == len(steps) == len(train.tool_calls) >= 1
    for step, at in zip(steps, replies):
        assert step["prompt"] == train.messages[:at]
        assert step["completion"] == train.messages[at]["content"]
    if kind == "tiny" and conversation:
        for key in ("prompt_ids", "completion_ids", "env_mask"):
            assert evaluated["token_ids"][key] == train.token_ids[key] == out[key][0]
        assert len(out["completion_ids"][0]) > max_tokens  # more than one turn in the sequence
