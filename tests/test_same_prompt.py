"""The text the model sees is the same in `sft`, `eval` and `train`.

For one episode of each environment (a MiniWoB task over two turns, a TextArena game), the same
actions on the same seed give the same pages and history; the messages the model is shown, and
their tokens, must then be byte for byte the same whether the episode was played to make an SFT
demonstration (`sft`'s demonstrations), by `envharness eval`, or by `train`'s rollout function.
Every path plays the environment's scripted policy, in the student's tokens, so nothing but the
prompt path differs.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from envharness.cli import main as cli_main
from envharness.cli.sft import prepare
from envharness.core.registry import resolve_environment
from envharness.eval.demonstrations import read_run, scripted_records
from envharness.harness.types import HarnessRunLimits
from envharness.integrations.trl.prompting import prompt_options
from envharness.integrations.trl.rollout import build_env_rollout_func, task_prompt
from envharness.integrations.trl.servers import env_clients
from envharness.integrations.trl.sft import SFTRunConfig
from envharness.models.embedded import tiny_test_model
from envharness.models.scripted import ScriptedBackend
from envharness.models.teacher import TeacherForcedBackend

pytestmark = pytest.mark.timeout(600)
SEED, TURNS = 4242, 3
EPISODES = [("browsergym", "enter-text"), ("textarena", "Wordle-v0")]


def sft_episode(env: str, task: str, out) -> dict:
    """The demonstration `envharness sft` would train on (its own preparation, its own player)."""
    config = SFTRunConfig(
        env=env, tasks=[task], model="tiny", episodes=1, seed=SEED, max_turns=TURNS, output_dir=str(out)
    )
    _, _, demos = prepare(config)
    _, tokenizer = tiny_test_model()
    (record,) = asyncio.run(scripted_records(demos, tokenizer))
    return record


def eval_episode(env: str, task: str, prompt: str, out) -> dict:
    """The episode `envharness eval --record-tokens` plays (the scripted policy)."""
    args = ["eval", "--env", env, "--model", "scripted", "--prompt", prompt, "--tasks", task]
    args += ["--episodes", "1", "--seed", str(SEED), "--max-turns", str(TURNS), "--no-progress"]
    assert cli_main([*args, "--out", str(out)]) == 0
    (record,) = read_run(out)
    return record


def train_episode(env: str, task: str, prompt: str, out) -> dict:
    """The episode `train`'s rollout function plays, its policy the scripted one in the student's tokens."""
    resolved = resolve_environment(env)
    _, tokenizer = tiny_test_model()
    player = TeacherForcedBackend(tokenizer, ScriptedBackend(env=env))
    with env_clients(resolved) as clients:
        rollout = build_env_rollout_func(
            resolved,
            clients,
            default_task=task,
            limits=HarnessRunLimits(max_turns=TURNS),
            records=out / "episodes.jsonl",
            include_tokens_in_records=True,
            session_factory_kwargs=prompt_options(prompt, tokenizer, resolved),
            backend_factory=lambda trainer: player,
        )
        trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), args=SimpleNamespace(temperature=1.0))
        rollout([task_prompt(task, SEED)], trainer)
        rollout.records.close()
    (line,) = (out / "episodes.jsonl").read_text().splitlines()
    return json.loads(line)


@pytest.mark.parametrize("env,task", EPISODES)
def test_sft_eval_and_train_show_the_model_the_same_text(env, task, tmp_path):
    demonstration = sft_episode(env, task, tmp_path / "sft")
    prompt = resolve_environment(env).require_harness().train_prompt
    evaluated = eval_episode(env, task, prompt, tmp_path / "eval")
    trained = train_episode(env, task, prompt, tmp_path / "train")
    assert len(demonstration["tool_calls"]) >= 2  # more than the opening: history is compared too
    assert demonstration["messages"] == evaluated["messages"] == trained["messages"]
    assert demonstration["token_ids"] == trained["token_ids"]
