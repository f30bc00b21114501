"""The distribution a token is drawn from, and its log-probabilities.

Convention (the one TRL's GRPO importance sampling expects, and what `trl vllm-serve` runs
vLLM with: `--logprobs-mode processed_logprobs`): a logprob is taken from the *processed*
distribution the token was actually sampled from — raw logits divided by the temperature,
then top-k and top-p filtering, renormalised. Without top-k/top-p this is exactly
`log_softmax(logits / T)` at the sampled id. Greedy decoding (temperature 0) reports
`log_softmax(logits)`.

Why not transformers' `output_scores`: they are the processed scores of *its* processors
(which include the model's `generation_config` defaults, e.g. a top-k of 50 or 20), so they
can silently differ from what the caller asked for by up to ~1 nat.
"""

from __future__ import annotations

import torch


def processed_logprobs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Log-probabilities over the vocabulary (last dim) of the distribution we sample from."""
    logits = logits.float()
    if temperature <= 0:
        return torch.log_softmax(logits, dim=-1)
    x = logits / temperature if temperature != 1.0 else logits  # the same values, one pass less
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1)  # ascending, as transformers' TopPLogitsWarper
        cumulative = torch.softmax(sorted_x, dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1.0 - top_p)
        remove_sorted[..., -1] = False  # always keep the most likely token
        remove = remove_sorted.scatter(-1, order, remove_sorted)
        x = x.masked_fill(remove, float("-inf"))
    return torch.log_softmax(x, dim=-1)


def sample_tokens(
    logprobs: torch.Tensor, temperature: float, generators: list[torch.Generator | None]
) -> torch.Tensor:
    """One token id per row of processed logprobs (rows x vocab), on their device: argmax when
    greedy; otherwise each seeded row draws with its own generator (the same seed gives the
    same token in any batch) and the unseeded rows draw together.

    A seeded row's draw is `torch.multinomial(p, 1, generator)` computed as torch computes it
    (argmax of p / q with q ~ Exp(1) from the generator, ATen's `multinomial` for one sample),
    so the noise of every row is drawn in one kernel per row and the division and argmax run
    once for the batch: 2 + rows launches a step instead of ~5 per row. Unseeded rows draw one
    uniform number each (`inverse_cdf`): the same distribution without a random number per
    vocabulary entry, which made `torch.multinomial` the costliest call of a small model's step."""
    if temperature <= 0:
        return torch.argmax(logprobs, dim=-1)
    probs = logprobs.exp()
    if all(g is None for g in generators):
        return inverse_cdf(probs)
    noise = torch.empty_like(probs)
    for i, generator in enumerate(generators):
        noise[i].exponential_(1.0, generator=generator)  # unseeded rows: the global generator's stream
    return torch.argmax(probs / noise, dim=-1)


def sample_with_logprobs(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generators: list[torch.Generator | None],
    overwrite: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids, their processed logprobs) for rows of raw `logits`: the draw of `sample_tokens`
    from `processed_logprobs`, and the logprob read at the drawn id. `overwrite=True`: `logits`
    is the caller's scratch, which the short road below may overwrite.

    Unseeded rows without top-k/top-p (what training samples) take a shorter road to the same
    numbers: the logprob of the drawn token only, as `x - max - log(sum(exp(x - max)))`, which is
    what `log_softmax` computes for every entry; the draw inverts the cumulative sum of the same
    `exp(x - max)` (proportional to the probabilities): a few elementwise passes over the
    vocabulary, instead of `log_softmax`, `exp` and the sums each passing over it. The
    exponential is taken as `exp2((x - max) * log2(e))`: on the CPU torch's `exp2` runs about 5x
    faster than its `exp` (0.05 against 0.25 ms for 8 x 49,152), and the logprobs are as exact
    (within 1e-6 of float64's `log_softmax`, as before)."""
    if temperature > 0 and top_k <= 0 and top_p >= 1.0 and all(g is None for g in generators):
        x = logits.float()  # `logits` itself when already float32
        if x is logits and not overwrite:
            x = x.clone()  # the caller's logits stay as they were
        top = torch.amax(x, dim=-1, keepdim=True)
        # in place: no further tensor of the vocabulary's size (a fresh one costs its page faults)
        weights = x.sub_(top).mul_(_LOG2E / temperature).exp2_()  # exp((x - max) / T), see below
        ids, total = _inverse_cdf(weights)
        # log(exp((x - max) / T)) read back: within float32's rounding of (x - max) / T for any
        # token that can be drawn (one whose weight is below float32's normal range has a
        # probability under 1e-38)
        picked = weights.gather(-1, ids[:, None]).log() - total.log().to(x.dtype)
        return ids, picked[:, 0]
    logprobs = processed_logprobs(logits, temperature, top_k, top_p)
    ids = sample_tokens(logprobs, temperature, generators)
    return ids, logprobs.gather(-1, ids[:, None])[:, 0]


_LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))


def inverse_cdf(probs: torch.Tensor, block: int = 256) -> torch.Tensor:
    """One draw per row of `probs` (rows x vocab, non-negative, not necessarily normalised) by
    inverting its cumulative sum at one uniform number: token i with probability
    probs[i] / sum(probs), exactly as `torch.multinomial(probs, 1)`."""
    return _inverse_cdf(probs, block)[0]


def _inverse_cdf(probs: torch.Tensor, block: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """(draws, each row's total mass as a (rows, 1) float64). Two levels: the block holding the
    draw from per-block sums (256 entries summed in float32, the blocks' running sum in float64),
    then the token inside that block in float64, so the vocabulary is read once and nothing of
    its size is written. A block without mass sums to exactly 0 and is never chosen. Few and
    small operations: each one hands the interpreter to other threads for a moment."""
    rows, vocab = probs.shape
    blocks = -(-vocab // block)
    if blocks * block != vocab:  # zeros past the vocabulary: no mass
        probs = torch.nn.functional.pad(probs, (0, blocks * block - vocab))
    grid = probs.view(rows, blocks, block)
    cdf = grid.sum(-1).double().cumsum_(-1)
    total = cdf[:, -1:]
    u = _below(torch.rand((rows, 1), dtype=torch.float64, device=probs.device).mul_(total), total)
    # u < total, so the first block whose cdf passes u has mass, as does the token found in it
    chosen = torch.searchsorted(cdf, u, right=True)
    before = torch.nn.functional.pad(cdf, (1, 0)).gather(1, chosen)
    local = grid.gather(1, chosen[:, :, None].expand(rows, 1, block))[:, 0].double().cumsum_(-1)
    rest = _below(u - before, local[:, -1:])
    return (chosen * block + torch.searchsorted(local, rest, right=True))[:, 0], total


def _below(value: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """`value`, at most the largest float64 under `bound` (a draw never lands past the last mass)."""
    return torch.minimum(value, torch.nextafter(bound, torch.zeros_like(bound)))
