"""Asynchronous rollouts (`train --async`): the next step's batch is sampled on the policy's own
decoder while this step trains; every row records its policy version; a batch staler than the
bound is dropped and counted, never trained on; the truncated importance ratio corrects a stale
batch. Real TRL GRPOTrainer, tiny model, CPU; the episodes' tokens are fixed and their logprobs
are the sampling model's own (what the harness's sampler reports), so each case is exact."""

from __future__ import annotations

import logging
import os
import threading

import pytest
import torch
from transformers import TrainerCallback

from envharness.cli import main as cli_main
from envharness.integrations.trl import task_dataset
from envharness.integrations.trl.async_rollout import AsyncRollout, SamplingTrainer
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.logprob_agreement import measure_and_correct
from envharness.integrations.trl.rewards import reward_success
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TASKS = ["click-test", "click-button"]
PROMPT = [1, 9690, 198, 2683]


def weights_sum(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


class DecoderEpisodes(Rollout):
    """Plays each call's prompts with fixed tokens (row i's completion names call k), their
    logprobs computed by the model the trainer hands it: what a sampler of that model reports.
    Rows alternate success, so every group carries signal. `fail_on` makes that call raise."""

    def __init__(self, fail_on: int | None = None):
        self.calls, self.fail_on = [], fail_on

    def __call__(self, prompts, trainer):
        k, n = len(self.calls), len(prompts)
        self.calls.append(
            {
                "prompts": list(prompts),
                "version": trainer.policy_version,
                "step": trainer.state.global_step,
                "thread": threading.current_thread().name,
                "weights": weights_sum(trainer.model),
            }
        )
        if k == self.fail_on:
            raise ConnectionError("the environment server went away")
        completions = [[28 + k, 40 + i % 2, 2] for i in range(n)]
        return {
            "prompt_ids": [PROMPT] * n,
            "completion_ids": completions,
            "logprobs": [exact_logprobs(trainer.model, c) for c in completions],
            "success": [i % 2 == 0 for i in range(n)],
        }


def exact_logprobs(model, completion):
    with torch.no_grad():
        ids = torch.tensor([PROMPT + completion])
        logps = torch.log_softmax(model(input_ids=ids).logits[0, len(PROMPT) - 1 : -1].float(), -1)
        return logps.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


class StepWeights(TrainerCallback):
    """The policy's weights at the start of each step (what a decoder of that version must
    hold), and each step's log as the layers' callbacks left it (what train_log.jsonl holds)."""

    def __init__(self, model):
        self.model, self.at, self.logs = model, {}, []

    def on_step_begin(self, args, state, control, **kwargs):
        self.at[state.global_step] = weights_sum(self.model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "loss" in logs:
            self.logs.append(dict(logs))


def trainer_for(tmp_path, rollout, steps=3, lr=1e-2):
    from trl import GRPOTrainer

    from envharness.models.embedded import tiny_test_model

    model, tokenizer = tiny_test_model(seed=0)
    config = TrainConfig(
        model="tiny",
        output_dir=str(tmp_path),
        max_steps=steps,
        num_generations=2,
        groups_per_step=2,
        micro_batch=4,
        max_completion_length=4,
        learning_rate=lr,
    )
    weights = StepWeights(model)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[reward_success],
        args=grpo_config(config, save_strategy="no"),
        train_dataset=task_dataset(TASKS, 4 * steps),
        rollout_func=rollout,
        callbacks=[*rollout.callbacks(), weights],
    )
    return trainer, weights


def loss_passes(trainer, on_loss):
    """`on_loss(step, inputs)` sees each loss pass's batch (after the correction is installed)."""
    compute_loss = trainer.compute_loss

    def spy(model, inputs, *args, **kwargs):
        on_loss(trainer.state.global_step, inputs)
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = spy


def test_each_step_trains_the_batch_sampled_during_the_one_before_and_none_staler(tmp_path):
    episodes = DecoderEpisodes()
    layer = AsyncRollout(episodes, max_staleness=1, seed=0)
    trainer, weights = trainer_for(tmp_path, layer, steps=3)
    measure_and_correct(trainer)
    trained = []  # (step, the call whose tokens reached the loss pass)
    loss_passes(
        trainer, lambda step, inputs: trained.append((step, int(inputs["completion_ids"][0, 0]) - 28))
    )
    trainer.train()
    layer.close()
    calls = episodes.calls
    # step 0 played its batch at once; each step then started the next one in the background
    assert [c["thread"] == "MainThread" for c in calls] == [True, False, False, False]
    assert [c["version"] for c in calls] == [0, 0, 1, 2]  # the policy version that sampled each
    assert [c["step"] for c in calls] == [0, 1, 2, 3]  # the step each was sampled for
    for call in calls:  # the decoder held the policy of its version
        assert call["weights"] == pytest.approx(weights.at[call["version"]], rel=1e-6)
    assert weights.at[0] != pytest.approx(weights.at[1], rel=1e-6)  # the policy did move
    # no batch more than one version old reached a loss pass; steps 1 and 2 trained what was sampled ahead
    assert sorted(set(trained)) == [(0, 0), (1, 1), (2, 2)]
    assert all(step - calls[call]["version"] <= 1 for step, call in trained)
    history = weights.logs
    assert [h["async/policy_version"] for h in history] == [0, 0, 1]
    assert [h["async/staleness"] for h in history] == [0, 1, 1]
    assert all(h["async/dropped_episodes"] == 0 for h in history)
    # the next batch plays the same tasks on fresh seeds
    for before, after in zip(calls[0]["prompts"], calls[1]["prompts"]):
        assert before != after and before.split('"seed"')[0] == after.split('"seed"')[0]


def test_every_row_records_its_policy_version_and_a_stale_batch_is_dropped_and_counted(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="envharness.integrations.trl.async_rollout")
    episodes = DecoderEpisodes()
    layer = AsyncRollout(episodes, max_staleness=1, seed=0)
    trainer, _ = trainer_for(tmp_path, layer, steps=1)
    prompts = [p for p in task_dataset(TASKS, 2)["prompt"] for _ in range(2)]
    first = layer(prompts, trainer)  # step 0: played at once, the next batch started
    assert first["policy_version"] == [0] * 4
    trainer.state.global_step = 2  # two updates since (a generation that spans steps, a resumed run)
    out = layer(prompts, trainer)
    layer.close()
    assert episodes.calls[1]["version"] == 0  # the batch sampled ahead: two versions old at step 2
    assert out["policy_version"] == [2] * 4 and episodes.calls[2]["thread"] == "MainThread"
    assert [ids[0] - 28 for ids in out["completion_ids"]] == [2] * 4  # the fresh batch, not the stale one
    assert layer.counts["dropped_episodes"] == 4 and layer.counts["dropped_groups"] == 2
    assert "2 versions old at step 2, past --max-staleness 1" in caplog.text


def test_the_correction_changes_the_gradient_of_a_stale_batch_only(tmp_path):
    """Step 0 trains a batch its own policy sampled (ratio 1): the corrected gradient is the
    uncorrected one. Step 1 trains a batch the step-0 policy sampled: the ratios differ from 1
    and so does the gradient."""
    layer = AsyncRollout(DecoderEpisodes(), max_staleness=1, seed=0)
    trainer, _ = trainer_for(tmp_path, layer, steps=2, lr=5e-2)
    measure_and_correct(trainer)
    seen = {}

    def gradients(step, inputs):
        if step in seen:
            return
        ratio = inputs["importance_sampling_ratio"]
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        grads = []
        for weights in (ratio, torch.ones_like(ratio)):
            trainer.use_vllm, trainer.vllm_importance_sampling_correction = (
                True,
                True,
            )  # as the correction does
            try:
                loss = trainer.__class__.compute_loss(
                    trainer, trainer.model, {**inputs, "importance_sampling_ratio": weights}
                )
            finally:
                trainer.use_vllm, trainer.vllm_importance_sampling_correction = False, False
            grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)]))
        seen[step] = (ratio[inputs["completion_mask"].bool()], *grads)

    loss_passes(trainer, gradients)
    trainer.train()
    layer.close()
    fresh_ratio, fresh_corrected, fresh_plain = seen[0]
    stale_ratio, stale_corrected, stale_plain = seen[1]
    assert torch.allclose(fresh_ratio, torch.ones_like(fresh_ratio), atol=1e-4)
    assert torch.allclose(fresh_corrected, fresh_plain, rtol=1e-4, atol=1e-7)
    assert (stale_ratio - 1).abs().max() > 1e-3
    assert not torch.allclose(stale_corrected, stale_plain, rtol=1e-3, atol=1e-6)


def test_a_dead_background_rollout_stops_the_run_naming_it(tmp_path):
    layer = AsyncRollout(DecoderEpisodes(fail_on=1), max_staleness=1, seed=0)
    trainer, _ = trainer_for(tmp_path, layer, steps=2)
    with pytest.raises(RuntimeError, match=r"background rollout \(envharness-rollout-v0.*ConnectionError"):
        trainer.train()
    layer.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("envharness-rollout")]


def test_max_staleness_zero_samples_nothing_ahead(tmp_path):
    episodes = DecoderEpisodes()
    layer = AsyncRollout(episodes, max_staleness=0, seed=0)
    trainer, _ = trainer_for(tmp_path, layer, steps=2)
    trainer.train()
    layer.close()
    assert [(c["thread"], c["version"]) for c in episodes.calls] == [("MainThread", 0), ("MainThread", 1)]


def test_a_bad_bound_and_options_async_cannot_serve_are_refused_in_words(tmp_path, capsys):
    assert cli_main(["train", "--model", "tiny", "--async", "--max-staleness", "-1"]) == 2
    assert "--max-staleness must be at least 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        AsyncRollout(DecoderEpisodes(), max_staleness=-1)
    base = dict(env="textarena", tasks=["Wordle-v0"], model="tiny", output_dir=str(tmp_path / "run"))
    with pytest.raises(TrainSetupError, match="--async cannot run with --agent"):
        check_config(TrainConfig(**base, async_rollout=True, agent="agent.py:play"))
    check_config(TrainConfig(**base, async_rollout=True, max_staleness=3))  # what it can serve passes
    check_config(TrainConfig(**base, async_rollout=True, processes=2))  # each rank samples its share


def test_train_async_end_to_end_records_each_episodes_policy_version(tmp_path):
    """`envharness train --async` on a real TextArena server: each step after the first trains the
    batch sampled during the one before; every episode record names its policy version."""
    import json

    out = tmp_path / "run"
    args = ["train", "--env", "textarena", "--tasks", "Wordle-v0", "--model", "tiny", "--async"]
    args += ["--steps", "3", "--save-steps", "5", "--num-generations", "2", "--groups-per-step", "2"]
    args += ["--max-completion-length", "8", "--curriculum", "signal", "--output-dir", str(out)]
    assert cli_main(args) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    played = [(r["metrics"]["train_step"], r["metrics"]["policy_version"]) for r in records]
    # step 0 played at once; steps 1-3 sampled ahead by the policy before (step 3's never trained)
    assert sorted(played) == [(s, max(s - 1, 0)) for s in range(4) for _ in range(4)]
    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in logs if "loss" in log]
    assert [(log["async/policy_version"], log["async/staleness"]) for log in steps] == [
        (0, 0),
        (0, 1),
        (1, 1),
    ]
    assert json.loads((out / "train_config.json").read_text())["async_rollout"] is True
    # a step's time: its wait for the batch, then its loss pass (`time/train_s`), never the
    # background sampling that overlapped it
    for log in steps:
        assert 0 <= log["time/train_s"] <= log["time/step_s"] - log["async/wait_s"] + 1e-3, log


def test_train_async_resumes_redoing_the_batch_in_flight_and_training_nothing_twice(tmp_path):
    """A checkpoint does not hold the batch sampled ahead: `--resume` cuts its episodes from the
    records (their train_step is past the checkpoint) and plays that step again, at once."""
    import json

    out = tmp_path / "run"
    args = ["train", "--env", "textarena", "--tasks", "Wordle-v0", "--model", "tiny", "--async"]
    args += ["--save-steps", "1", "--num-generations", "2", "--groups-per-step", "2"]
    args += ["--max-completion-length", "8", "--output-dir", str(out)]
    assert cli_main([*args, "--steps", "2"]) == 0
    assert cli_main([*args, "--steps", "3", "--resume"]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    played = [(r["metrics"]["train_step"], r["metrics"]["policy_version"]) for r in records]
    # steps 0-1 from the first run; the batch it sampled for step 2 is gone, played again by policy 2
    assert played == [(0, 0)] * 4 + [(1, 0)] * 4 + [(2, 2)] * 4 + [(3, 2)] * 4
    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    trained = [
        (log["step"], log["async/policy_version"], log["async/staleness"]) for log in logs if "loss" in log
    ]
    assert trained == [(1, 0, 0), (2, 0, 1), (3, 2, 0)]  # each step once; the version counter resumed


def test_the_sampling_thread_samples_with_the_decoder_while_the_loss_pass_flips_use_vllm():
    """The loss pass sets `trainer.use_vllm` for each loss computation (so TRL applies the
    importance ratio); a backend the sampling thread builds meanwhile (dynamic sampling's redraw)
    is still the decoder's, not vLLM's (a 20-minute mix run died on this at step 7)."""
    from envharness.integrations.trl.logprob_agreement import _loss_applies_ratio
    from envharness.integrations.trl.rollout import trainer_backend
    from envharness.models.embedded import tiny_test_model
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = tiny_test_model()

    class Trainer:  # the attributes the loss pass and the backend read
        use_vllm, vllm_importance_sampling_correction = False, False
        args = type("Args", (), {"use_vllm": False, "temperature": 1.0, "top_p": 1.0, "top_k": 0})()
        processing_class = tokenizer

    trainer = Trainer()
    sampler = SamplingTrainer(trainer, model, version=3, step=4)
    with _loss_applies_ratio(trainer):
        assert trainer.use_vllm is True  # the window the sampling thread may fall into
        backend = trainer_backend(sampler)
    assert isinstance(backend, TransformersBackend) and backend.model is model
