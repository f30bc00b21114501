"""One sequence being decoded, and one sampling step of it: shared by the text and vision
transformers backends, so both sample, stop and record logprobs the same way.

A step draws the token from the distribution the caller asked for (`processed_logprobs`,
see `sampling.py`) and records its logprob from that same distribution
(`sample_with_logprobs`), which is what keeps sampling and scoring logprobs equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from envharness.models.base import SamplingParams
from envharness.models.sampling import sample_with_logprobs


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
    def start(cls, params: SamplingParams, device: torch.device | str = "cpu") -> DecodingRow:
        return cls(params, row_generator(params.seed, device))


def decode_batch_step(
    rows: list[DecodingRow],
    logits: torch.Tensor,
    tokenizer: Any,
    eos: set[int],
    pad_id: int,
    consume_logits: bool = False,
) -> torch.Tensor:
    """Sample one token for every row still decoding, from `logits` (rows x vocab) where they
    are; returns the ids to feed next (`pad_id` for finished rows), on the same device.
    `consume_logits=True`: the caller is done with `logits`, which sampling may overwrite.

    Rows that ask for the same distribution are processed together, and the ids and logprobs
    come to the host in one transfer per step (the stop checks need them there): no per-row
    copies of the vocabulary and no per-row synchronisation with the GPU."""
    device = logits.device
    next_ids = torch.full((len(rows),), pad_id, dtype=torch.long, device=device)
    chosen = torch.zeros(len(rows), dtype=torch.float32, device=device)
    groups: dict[tuple[float, int, float], list[int]] = {}
    for i, row in enumerate(rows):
        if not row.finish_reason and row.params.cancelled is not None and row.params.cancelled.is_set():
            row.finish_reason = "cancelled"
        if not row.finish_reason:
            p = row.params
            groups.setdefault((p.temperature, p.top_k, p.top_p), []).append(i)
    if not groups:
        return next_ids
    for (temperature, top_k, top_p), members in groups.items():
        whole = len(members) == len(rows)
        index = None if whole else torch.tensor(members, dtype=torch.long, device=device)
        ids, picked = sample_with_logprobs(
            logits if whole else logits[index],
            temperature,
            top_k,
            top_p,
            [rows[i].generator for i in members],
            overwrite=consume_logits or not whole,  # a subset of the rows is a copy already
        )
        if whole:
            next_ids, chosen = ids, picked
        else:
            next_ids[index], chosen[index] = ids, picked
    # float64 holds every token id and every float32 logprob exactly: one transfer for both
    host_ids, host_logprobs = torch.stack([next_ids.to(torch.float64), chosen.to(torch.float64)]).tolist()
    for members in groups.values():
        for i in members:
            _record(rows[i], int(host_ids[i]), host_logprobs[i], tokenizer, eos)
    return next_ids


def _record(row: DecodingRow, token: int, logprob: float, tokenizer: Any, eos: set[int]) -> None:
    """Append a sampled token and decide whether the row is finished."""
    p = row.params
    row.tokens.append(token)
    row.logprobs.append(logprob)
    if token in eos:
        row.finish_reason = "stop"
    elif p.stop:
        hit = first_stop(tokenizer.decode(row.tokens, skip_special_tokens=False), p.stop)
        if hit is not None:
            row.finish_reason, row.stop = "stop", hit
    if not row.finish_reason and len(row.tokens) >= p.max_tokens:
        row.finish_reason = "length"


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


def row_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator | None:
    """A per-request RNG on the device that samples, so a seeded request samples the same
    tokens in any batch (on a given device: CPU and GPU draw different streams)."""
    if seed is None:
        return None
    gen = torch.Generator(device=device)
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
