"""A resumed run keeps the best model it had: `--resume` neither replaces `best/` with a worse
model nor keeps held-out results or a `best/` from the steps it plays again."""

from __future__ import annotations

import json

import torch

from envharness.integrations.trl.held_out import HeldOutEvaluation
from envharness.integrations.trl.resume import trim_to_step


class _Model(torch.nn.Linear):
    def __init__(self) -> None:
        super().__init__(2, 2)
        self.saved = 0

    def save_pretrained(self, path: str) -> None:
        self.saved += 1


def _best(out, step: int, mean: float) -> None:
    (out / "best").mkdir(parents=True, exist_ok=True)
    (out / "best" / "best.json").write_text(json.dumps({"step": step, "eval/trained_mean": mean}))


def _evaluation(out, rate: float) -> HeldOutEvaluation:
    return HeldOutEvaluation(lambda model, task, seeds: rate, every=1, tasks=["t"], episodes=2, out=out)


def test_a_resumed_run_replaces_its_best_only_with_a_better_model(tmp_path):
    _best(tmp_path, 2, 0.5)
    model = _Model()
    _evaluation(tmp_path, 0.0).run(model, 3)
    assert model.saved == 0 and json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 2
    _evaluation(tmp_path, 1.0).run(model, 4)
    assert model.saved == 1 and json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 4


def test_resuming_from_a_checkpoint_forgets_the_evaluations_after_it(tmp_path):
    log = tmp_path / "eval_log.jsonl"
    log.write_text("".join(json.dumps({"step": s, "eval/trained_mean": s / 10}) + "\n" for s in (2, 4, 6)))
    _best(tmp_path, 6, 0.6)
    trim_to_step(tmp_path, 4)
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [2, 4]
    assert not (tmp_path / "best").exists()  # chosen at step 6, which is played again
    _best(tmp_path, 4, 0.4)
    trim_to_step(tmp_path, 4)
    assert (tmp_path / "best" / "best.json").exists()
