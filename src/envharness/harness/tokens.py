"""Exact multi-turn token sequences, assembled from what the model saw and produced.

An episode becomes ONE training sequence: the first turn's prompt, then for each turn the
model's completion (env_mask 1, its logprobs) and the tokens the environment added before
the next turn (env_mask 0, logprob 0.0). The environment's tokens are read off the next
turn's own `prompt_ids`, which must extend the sequence so far; nothing is re-tokenized.

When a turn breaks that property (its prompt does not start with the sequence so far, or
it carries no token ids, or its logprobs do not match its completion) the sequence cannot
stay exact. The assembler then STOPS: the sequence keeps every exact turn before the
break, later turns are left out of it (they still happen in the episode and its
messages), and `metrics` says where and why (`token_break_turn`, `token_break_reason`).
Training on a re-tokenized guess instead silently misaligns logprobs, which is worse.

Images (vision models): a turn's new images are environment tokens too. Their placeholder
tokens sit in the prompt part (env_mask 0, logprob 0.0) and their number must equal what
the image processor said each image becomes (`image_token_counts`); a turn where they
disagree breaks the sequence like any other inexact turn. `images` collects the images of
the assembled sequence in placeholder order, for the trainer's loss pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envharness.harness.types import ModelStepResult


@dataclass
class TokenAssembler:
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    turns_assembled: int = 0
    break_turn: int | None = None
    break_reason: str | None = None
    images: list[Any] = field(default_factory=list)
    image_token_counts: list[int] = field(default_factory=list)

    @property
    def sequence(self) -> list[int]:
        """Every token so far: what the next turn's prompt must start with."""
        return self.prompt_ids + self.completion_ids

    def add_turn(self, step: ModelStepResult) -> bool:
        """Append one model turn. Returns False (and records why) when it cannot be exact."""
        if self.break_turn is not None:
            return False
        turn = self.turns_assembled
        reason = self._problem(step)
        if reason is not None:
            self.break_turn, self.break_reason = turn, reason
            return False
        if turn == 0:
            self.prompt_ids = list(step.prompt_ids)
        else:
            env_tokens = step.prompt_ids[len(self.sequence) :]
            self.completion_ids.extend(env_tokens)
            self.logprobs.extend([0.0] * len(env_tokens))
            self.env_mask.extend([0] * len(env_tokens))
        self.completion_ids.extend(step.completion_ids)
        self.logprobs.extend(float(lp) for lp in step.logprobs)
        self.env_mask.extend([1] * len(step.completion_ids))
        self.images.extend(step.images)
        self.image_token_counts.extend(int(n) for n in step.image_token_counts)
        self.turns_assembled += 1
        return True

    def _image_problem(self, step: ModelStepResult) -> str | None:
        """The new placeholders (prompt tokens past the sequence so far) against the image processor's counts."""
        if len(step.image_token_counts) != len(step.images):
            return f"{len(step.image_token_counts)} placeholder counts for {len(step.images)} images"
        if step.image_token_id is None:
            return "images without an image_token_id" if step.images else None
        new_tokens = step.prompt_ids[len(self.sequence) if self.turns_assembled else 0 :]
        found = sum(1 for t in new_tokens if t == step.image_token_id)
        if found != sum(step.image_token_counts):
            return f"{found} image placeholder tokens for {len(step.images)} new images that take {sum(step.image_token_counts)}"
        if any(t == step.image_token_id for t in step.completion_ids):
            return "the completion holds image placeholder tokens (no image behind them)"
        return None

    def _problem(self, step: ModelStepResult) -> str | None:
        if not step.prompt_ids:
            return "model step returned no prompt_ids"
        if len(step.logprobs) != len(step.completion_ids):
            return f"{len(step.logprobs)} logprobs for {len(step.completion_ids)} completion tokens"
        if self.turns_assembled == 0:
            return self._image_problem(step)
        seq = self.sequence
        if len(step.prompt_ids) < len(seq) or step.prompt_ids[: len(seq)] != seq:
            at = next(
                (i for i, (a, b) in enumerate(zip(seq, step.prompt_ids)) if a != b),
                min(len(seq), len(step.prompt_ids)),
            )
            return (
                f"prompt_ids do not extend the sequence so far (first difference at token {at} of {len(seq)})"
            )
        return self._image_problem(step)

    def metrics(self) -> dict[str, Any]:
        """Token counts, and where the sequence stopped being exact if it did."""
        model_tokens = sum(self.env_mask)
        out: dict[str, Any] = {
            "prompt_tokens": len(self.prompt_ids),
            "completion_tokens": len(self.completion_ids),
            "model_tokens": model_tokens,
            "env_tokens": len(self.env_mask) - model_tokens,
            "turns_assembled": self.turns_assembled,
        }
        if self.images:
            out["images"] = len(self.images)
            out["image_tokens"] = sum(self.image_token_counts)
        if self.break_turn is not None:
            out["token_break_turn"] = self.break_turn
            out["token_break_reason"] = self.break_reason
        return out
