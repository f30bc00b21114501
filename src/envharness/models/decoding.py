"""One sequence being decoded, and one sampling step of it: shared by the text and vision
transformers backends, so both sample, stop and record logprobs the same way.

A step draws the token from `processed_logprobs` (the distribution the caller asked for,
see `sampling.py`) and records its logprob from that same tensor, which is what keeps
sampling and scoring logprobs equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from envharness.models.base import SamplingParams
from envharness.models.sampling import processed_logprobs, sample_token


@dataclass
class DecodingRow:
    """One sequence being decoded."""

    params: SamplingParams
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    stop: str | None = None

    @classmethod
    def start(cls, params: SamplingParams) -> "DecodingRow":
        return cls(params, row_generator(params.seed))


def decode_step(row: DecodingRow, logits: torch.Tensor, tokenizer: Any, eos: set[int], pad_id: int) -> int:
    """Sample one token for a row still decoding; returns the id to feed next (`pad_id` once done)."""
    if row.finish_reason:
        return pad_id
    p = row.params
    logprobs = processed_logprobs(logits.float().cpu(), p.temperature, p.top_k, p.top_p)
    token = sample_token(logprobs, p.temperature, row.generator)
    row.tokens.append(token)
    row.logprobs.append(float(logprobs[token]))
    if token in eos:
        row.finish_reason = "stop"
    elif p.stop:
        hit = first_stop(tokenizer.decode(row.tokens, skip_special_tokens=False), p.stop)
        if hit is not None:
            row.finish_reason, row.stop = "stop", hit
    if not row.finish_reason and len(row.tokens) >= p.max_tokens:
        row.finish_reason = "length"
    return token


def row_text(row: DecodingRow, tokenizer: Any) -> str:
    """The row's text, ending at its stop string when one ended it."""
    text = tokenizer.decode(row.tokens, skip_special_tokens=True)
    if row.stop is not None and row.stop in text:
        text = text[: text.index(row.stop) + len(row.stop)]
    return text


def first_stop(text: str, stops: list[str]) -> str | None:
    """The stop string that ends earliest in `text`, if any occurs."""
    found = [(text.index(s) + len(s), s) for s in stops if s and s in text]
    return min(found)[1] if found else None


def row_generator(seed: int | None) -> torch.Generator | None:
    """A per-request RNG, so a seeded request samples the same tokens in any batch."""
    if seed is None:
        return None
    gen = torch.Generator()
    gen.manual_seed(int(seed))
    return gen


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every id that ends a turn: the model's generation config's and the tokenizer's."""
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids


def model_device(model: Any) -> torch.device:
    return next(model.parameters()).device
