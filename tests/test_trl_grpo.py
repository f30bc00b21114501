"""GRPO with TRL 1.16 through the harness, on the real browser env (click-test) and a tiny model.

One real `GRPOTrainer` step: the rollout function plays two-turn episodes against a browsergym
server on loopback (Debian's Chromium), sampling with the trainer's own model. The data it
hands to TRL must be exact (lengths, env mask, logprobs equal to the model's own forward pass)
and the step must change the weights.
"""

from __future__ import annotations

import functools
import json
import os

import pytest
import torch
from _grpo_helpers import distinct_rewards

from envharness.harness import HarnessRunLimits, read_records
from envharness.integrations.trl import build_env_rollout_func, task_dataset
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.rewards import reward_success, reward_sum
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(240)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TEMPERATURE = 1.0


@pytest.fixture(scope="module")
def server_url(browser_server):
    return browser_server.base_url


@pytest.fixture()
def tiny():
    from envharness.models.embedded import tiny_test_model

    return tiny_test_model(seed=0)


def forward_logprobs(model, prompt_ids, completion_ids, temperature):
    """log p(token) of each completion token under the model, at the sampling temperature."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logps = torch.log_softmax(logits / temperature, dim=-1)
    return logps.gather(-1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def test_one_grpo_step_on_click_test_is_exact_and_changes_the_weights(server_url, tiny, tmp_path):
    from trl import GRPOTrainer

    from envharness.envs.browsergym import AsyncBrowserGymEnv

    model, tokenizer = tiny
    records = tmp_path / "episodes.jsonl"
    rollout_func = build_env_rollout_func(
        "browsergym",
        functools.partial(AsyncBrowserGymEnv, base_url=server_url),
        default_task="click-test",
        limits=HarnessRunLimits(max_turns=2),
        records=records,
        include_tokens_in_records=True,
    )
    handed = {}

    def spy(prompts, trainer):
        out = rollout_func(prompts, trainer)
        # the weights the episodes were sampled with (before the optimizer step)
        handed.update(prompts=list(prompts), out=out)
        handed["reference"] = [
            forward_logprobs(trainer.model, p, c, TEMPERATURE)
            for p, c in zip(out["prompt_ids"], out["completion_ids"])
        ]
        return out

    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        groups_per_step=2,
        max_completion_length=8,
        temperature=TEMPERATURE,
        learning_rate=1e-2,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_success, reward_sum, distinct_rewards],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(["click-test"], 4),
        rollout_func=spy,
    )
    scored = {}  # what TRL built from the rollout for the loss
    generate_and_score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: (
        scored.update(generate_and_score(inputs)) or scored
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    rollout_func.records.close()

    prompts, out = handed["prompts"], handed["out"]
    # TRL repeats each prompt num_generations times; every episode of a group gets the same page seed
    assert (
        len(prompts) == 4
        and prompts[0] == prompts[1]
        and prompts[2] == prompts[3]
        and prompts[0] != prompts[2]
    )
    for key in (
        "prompt_ids",
        "completion_ids",
        "logprobs",
        "env_mask",
        "env_reward",
        "step_rewards",
        "success",
        "verify_metrics",
    ):
        assert len(out[key]) == 4, key
    for i in range(4):
        ids, lps, mask = out["completion_ids"][i], out["logprobs"][i], out["env_mask"][i]
        assert out["prompt_ids"][i] and len(ids) == len(lps) == len(mask)
        assert set(mask) == {0, 1} and mask[0] == 1 and mask[-1] == 1  # model, env, model
        assert sum(mask) <= 2 * config.max_completion_length
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0)
        reference = handed["reference"][i]
        model_positions = [t for t, m in enumerate(mask) if m == 1]
        assert max(abs(lps[t] - reference[t]) for t in model_positions) < 1e-3
        assert "error" not in out["verify_metrics"][i]
        assert out["verify_metrics"][i]["task_name"] == "click-test"
        assert len(out["step_rewards"][i]) == 2  # two turns, one browser action each
        assert out["success"][i] == (out["env_reward"][i] > 0)
        # the env tokens are the tool message the model read: the page after its action
        env_text = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0])
        assert "Click Me!" in env_text and "Reward: 0.0  Done: False" in env_text
        # TRL took env_mask as its tool mask: env tokens carry no loss
        assert scored["completion_ids"][i, : len(ids)].tolist() == ids
        assert scored["tool_mask"][i, : len(mask)].tolist() == mask

    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert len(changed) == len(before), f"unchanged: {set(before) - set(changed)}"
    assert trainer.state.global_step == 1

    saved = read_records(records)
    assert len(saved) == 4 and all(r.metrics["train_step"] == 0 for r in saved)
    by_tokens = {json.dumps(r.token_ids["completion_ids"]): r for r in saved}
    for i in range(4):
        record = by_tokens[json.dumps(out["completion_ids"][i])]
        assert record.token_ids["env_mask"] == out["env_mask"][i]
        assert [r or 0.0 for r in record.rewards] == out["step_rewards"][i]


def test_trainer_vllm_without_an_engine_fails_clearly():
    from envharness.integrations.trl import TRLVLLMGenerationBackend, trainer_backend

    class CPUTrainer:  # what a GRPOTrainer with use_vllm=True looks like when vLLM could not start
        use_vllm = True

    with pytest.raises(RuntimeError, match="vLLM needs a CUDA GPU"):
        trainer_backend(CPUTrainer())
    assert TRLVLLMGenerationBackend.name == "trl-vllm"


def test_train_refuses_use_vllm_where_vllm_cannot_run(tmp_path):
    from envharness.integrations.trl.training import TrainSetupError, train

    with pytest.raises(TrainSetupError, match="use_vllm needs vLLM and a CUDA GPU"):
        train(TrainConfig(model="tiny", output_dir=str(tmp_path), use_vllm=True))
