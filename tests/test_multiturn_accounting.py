"""Multi-turn GRPO accounting, checked where TRL uses it: at loss time.

A real `GRPOTrainer` step with a tiny model on click-button-sequence (a task that needs two
clicks), three turns per episode, real page text between the turns (the compact observation
the training prompt uses). What TRL computes in its loss must agree with what the harness
sampled: on every model token of every turn, the log-probability TRL recomputes over the
whole multi-turn completion equals the sampling logprob; every page token is masked out of
the loss (env_mask 0), and no model token is. A misaligned turn boundary, a re-tokenized
history or an unmasked page would each break one of these.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from envharness.harness import HarnessRunLimits
from envharness.integrations.trl import build_browsergym_rollout_func, task_dataset
from envharness.integrations.trl.rewards import reward_success
from envharness.integrations.trl.training import TrainConfig, grpo_config, prompt_options
from _grpo_helpers import reply_length, runs

pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TURNS = 3


@pytest.fixture(scope="module")
def server_url():
    from envharness.core.launchers import LocalServer

    with LocalServer("browsergym", pruned_html=False, extra_properties=False) as server:
        yield server.base_url


def test_loss_time_logprobs_and_masks_over_three_turns(server_url, tmp_path):
    from trl import GRPOTrainer

    from envharness.envs.browsergym import AsyncBrowserGymEnv
    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    rollout_func = build_browsergym_rollout_func(
        functools.partial(AsyncBrowserGymEnv, base_url=server_url),
        default_task="click-button-sequence",
        limits=HarnessRunLimits(max_turns=TURNS),
        session_factory_kwargs=prompt_options("compact"),
    )
    handed = {}

    def spy(prompts, trainer):
        out = rollout_func(prompts, trainer)
        handed.update(out)
        return out

    config = TrainConfig(model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=2,
                         max_completion_length=6, temperature=1.0, learning_rate=1e-3)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_success, reply_length],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(["click-button-sequence"], 4, seed=0),
        rollout_func=spy,
    )
    scored, at_loss = {}, []
    generate_and_score = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: scored.update(generate_and_score(inputs)) or scored
    compute_loss, per_token_logps = trainer._compute_loss, trainer._get_per_token_logps_and_entropies

    def capture_inputs(model, inputs):  # the batch the loss sees (TRL shuffles rows before it)
        at_loss.append({k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    def capture_logps(*args, **kwargs):
        result = per_token_logps(*args, **kwargs)
        if torch.is_grad_enabled():  # the loss's own forward pass (the one that is differentiated)
            at_loss[-1]["logps"] = result[0].detach().clone()
        return result

    trainer._compute_loss, trainer._get_per_token_logps_and_entropies = capture_inputs, capture_logps
    trainer.train()

    assert len(at_loss) == 1 and at_loss[0]["logps"].shape == at_loss[0]["completion_ids"].shape
    loss = at_loss[0]
    loss_mask = loss["completion_mask"] * loss["tool_mask"]  # what TRL's loss sums over
    used = set()
    for i in range(4):
        ids, sampled, env_mask = handed["completion_ids"][i], handed["logprobs"][i], handed["env_mask"][i]
        prompt = handed["prompt_ids"][i]
        model_turns, page_parts = runs(env_mask, 1), runs(env_mask, 0)
        assert len(model_turns) == TURNS and len(page_parts) == TURNS - 1, env_mask  # model, page, model, page, model
        assert len(handed["step_rewards"][i]) == TURNS
        assert scored["completion_ids"][i, : len(ids)].tolist() == ids
        # This episode's row in the loss batch: same prompt, same completion.
        rows = [r for r in range(len(loss["completion_ids"])) if r not in used
                and loss["completion_ids"][r, : len(ids)].tolist() == ids and int(loss["completion_mask"][r].sum()) == len(ids)
                and loss["prompt_ids"][r][loss["prompt_mask"][r].bool()].tolist() == prompt]
        assert rows, f"episode {i} is not in the loss batch"
        r = rows[0]
        used.add(r)
        # Every model token of every turn is in the loss; no page token is.
        assert loss_mask[r, : len(ids)].tolist() == env_mask
        assert int(loss_mask[r, len(ids) :].sum()) == 0
        # TRL's loss-time logprobs over the whole sequence equal the sampling logprobs, turn by turn.
        recomputed = loss["logps"][r, : len(ids)].tolist()
        for start, end in model_turns:
            diffs = [abs(recomputed[t] - sampled[t]) for t in range(start, end)]
            assert max(diffs) < 1e-3, (i, start, diffs)
        # The masked tokens are the page the model read between its turns: the real buttons,
        # in the chat template's tool message, and nothing the model wrote.
        for start, end in page_parts:
            page = tokenizer.decode(ids[start:end])
            assert "<|im_start|>tool\nElements:" in page and "button 'ONE'" in page and "button 'TWO'" in page, page
            assert page.rstrip().endswith("<|im_start|>assistant"), page
        for start, end in model_turns:
            assert "<|im_start|>" not in tokenizer.decode(ids[start:end])
