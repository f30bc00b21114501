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
from _grpo_helpers import loss_row, one_grpo_step, runs

from envharness.harness import HarnessRunLimits
from envharness.integrations.trl import build_env_rollout_func
from envharness.integrations.trl.prompting import prompt_options

pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

TURNS = 3


def test_loss_time_logprobs_and_masks_over_three_turns(compact_browser_url, tmp_path):
    from envharness.envs.browsergym import AsyncBrowserGymEnv

    rollout_func = build_env_rollout_func(
        "browsergym",
        functools.partial(AsyncBrowserGymEnv, base_url=compact_browser_url),
        default_task="click-button-sequence",
        limits=HarnessRunLimits(max_turns=TURNS),
        session_factory_kwargs=prompt_options("compact"),
    )
    step = one_grpo_step(rollout_func, "click-button-sequence", tmp_path)
    handed, loss, tokenizer = step.handed, step.loss, step.tokenizer
    loss_mask = loss["completion_mask"] * loss["tool_mask"]  # what TRL's loss sums over
    used = set()
    for i in range(4):
        ids, sampled, env_mask = handed["completion_ids"][i], handed["logprobs"][i], handed["env_mask"][i]
        prompt = handed["prompt_ids"][i]
        model_turns, page_parts = runs(env_mask, 1), runs(env_mask, 0)
        assert len(model_turns) == TURNS and len(page_parts) == TURNS - 1, (
            env_mask
        )  # model, page, model, page, model
        assert len(handed["step_rewards"][i]) == TURNS
        assert step.scored["completion_ids"][i, : len(ids)].tolist() == ids
        r = loss_row(loss, ids, prompt, used)  # this episode's row in the loss batch
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
            assert (
                "<|im_start|>tool\nElements:" in page and "button 'ONE'" in page and "button 'TWO'" in page
            ), page
            assert page.rstrip().endswith("<|im_start|>assistant"), page
        for start, end in model_turns:
            assert "<|im_start|>" not in tokenizer.decode(ids[start:end])
