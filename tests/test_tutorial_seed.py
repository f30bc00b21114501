"""The seed tutorial ("BrowserGym Harness Rollouts") run end to end against the real browser env.

The tutorial's code below is copied verbatim except for two things: its import lines point
at envharness, and `generate_rollout_completions` (TRL's helper, removed in TRL 1.9) is a
scripted generator: it answers each prompt with the scripted MiniWoB solution for the page
in it, and tokenizes with the real SmolLM2 tokenizer. The environment is the real one:
a browsergym server on loopback driving Debian's Chromium.
"""

# The tutorial's import lines are kept as it writes them.
# isort: skip_file
from __future__ import annotations

import pytest

from envharness.models.base import Message

pytestmark = pytest.mark.timeout(240)

# -- the tutorial, imports changed ------------------------------------------------------
from envharness.envs.browsergym import BrowserGymEnv  # noqa: E402
from envharness.envs.browsergym.harness import BrowserGymSessionFactory  # noqa: E402
from envharness.envs.browsergym.harness import build_browsergym_action_tool_call  # noqa: E402
from envharness.harness import ModelStepResult  # noqa: E402
from envharness.harness import LLMResponse  # noqa: E402
from envharness.harness import HarnessRunLimits, MCPHarnessAdapter, build_harness_rollout_func  # noqa: E402

# MiniWoB tasks the scripted policy solves from the AXTree (not click-link: its links have no bid there).
TASKS = ["click-test", "click-button", "enter-text", "focus-text", "click-dialog"]


def make_tutorial_rollout_func(space_url: str, tokenizer):
    def environment_factory():
        return BrowserGymEnv(base_url=space_url)

    session_factory = BrowserGymSessionFactory(
        client_factory=environment_factory,
        default_task="click-test",
    )

    def build_trl_browsergym_model_step(trainer, tokenizer):
        def model_step(messages, tools, sampling):
            del tools, sampling
            prompt_text = tokenizer.apply_chat_template(
                messages,
                add_generation_prompt=True,
                tokenize=False,
            )
            rollout_output = generate_rollout_completions(trainer, [prompt_text])[0]
            completion_text = rollout_output.get("text") or tokenizer.decode(
                rollout_output["completion_ids"],
                skip_special_tokens=True,
            )
            tool_call = build_browsergym_action_tool_call(completion_text)
            return ModelStepResult(
                response=LLMResponse(content=completion_text, tool_calls=[tool_call]),
                prompt_ids=list(rollout_output["prompt_ids"]),
                completion_ids=list(rollout_output["completion_ids"]),
                logprobs=list(rollout_output["logprobs"]),
            )

        return model_step

    rollout_func = build_harness_rollout_func(
        session_factory=session_factory,
        harness_adapter=MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: build_trl_browsergym_model_step(
            trainer,
            tokenizer,
        ),
        limits=HarnessRunLimits(max_turns=10),
    )
    return rollout_func


# -- the scripted stand-in for TRL's generation -------------------------------------------


class ScriptedTrainer:
    """What the tutorial's model step needs from a trainer: a tokenizer."""

    def __init__(self, tokenizer):
        self.processing_class = tokenizer


def generate_rollout_completions(trainer, prompts: list[str]) -> list[dict]:
    from envharness.envs.browsergym.scripted import find_goal_and_tree
    from envharness.envs.browsergym.solutions import solve

    tok = trainer.processing_class
    outputs = []
    for prompt_text in prompts:
        goal, tree = find_goal_and_tree([{"role": "user", "content": prompt_text.split("<|im_start|>")[-2]}])
        text = f"The page shows what I need.\nAction: {solve(goal, tree)}"
        completion_ids = tok(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
        outputs.append(
            {
                "text": text,
                "prompt_ids": tok(prompt_text, add_special_tokens=False)["input_ids"],
                "completion_ids": completion_ids,
                "logprobs": [-0.25] * len(completion_ids),
            }
        )
    return outputs


def scripted_reward(client: BrowserGymEnv, task: str, seed: int) -> float:
    """The reward the scripted actions earn when sent straight through the client."""
    from envharness.envs.browsergym.models import BrowserGymAction
    from envharness.envs.browsergym.solutions import solve

    result = client.reset(task=task, seed=seed)
    for _ in range(10):
        obs = result.observation
        action = solve(obs.goal, obs.axtree_txt)
        assert action, f"no scripted action for {task!r}: {obs.goal!r}"
        result = client.step(BrowserGymAction(action_str=action))
        if result.done:
            break
    return float(result.reward)


@pytest.fixture(scope="module")
def tokenizer():
    from envharness.models.embedded import load_tokenizer

    return load_tokenizer()


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


def test_tutorial_rollout_func_earns_the_scripted_rewards(server_url, tokenizer):
    with BrowserGymEnv(base_url=server_url) as client:
        expected = [scripted_reward(client, task, seed=0) for task in TASKS]
    assert expected == [1.0] * len(TASKS), "the scripted solutions themselves must succeed"

    rollout_func = make_tutorial_rollout_func(server_url, tokenizer)
    prompts = TASKS + ["Please solve the default task."]  # a free-text prompt -> default_task
    out = rollout_func(prompts, ScriptedTrainer(tokenizer))

    assert [m.get("error") for m in out["verify_metrics"]] == [None] * len(prompts)
    assert out["env_reward"] == expected + [1.0]
    assert [m["task_name"] for m in out["verify_metrics"]] == TASKS + ["click-test"]
    for prompt_ids, ids, lps, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"]
    ):
        assert prompt_ids and ids and len(ids) == len(lps) == len(mask)
        assert mask[0] == 1 and mask[-1] == 1  # starts and ends with the model's own tokens


def test_tool_errors_reach_the_model_through_the_real_env(server_url):
    """A bid that does not exist comes back as a tool error message; the episode goes on."""
    from envharness.harness import run_coroutine_sync, run_episodes

    replies = iter(["Action: click('does-not-exist')", "I give up", "Action: click('does-not-exist')"])

    def model_step(messages: list[Message], tools, sampling):
        text = next(replies)
        return ModelStepResult(
            response=LLMResponse(content=text, tool_calls=[build_browsergym_action_tool_call(text)])
        )

    factory = BrowserGymSessionFactory(
        client_factory=lambda: BrowserGymEnv(base_url=server_url), default_task="click-test"
    )
    [result] = run_coroutine_sync(
        run_episodes(factory, [None], model_step=model_step, limits=HarnessRunLimits(max_turns=3))
    )
    tool_messages = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert len(tool_messages) == 3 and result.error is None
    assert tool_messages[0].startswith("Error: ") and "does-not-exist" in tool_messages[0]
    assert result.tool_trace[1].tool_name == "noop"  # "I give up" parsed to nothing: noop()
    assert result.events[2].payload["tool_calls"][0]["metadata"]["parse_error"]
    assert result.env_reward == 0.0 and not result.done
