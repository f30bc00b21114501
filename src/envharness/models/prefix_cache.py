"""Key/value caches of earlier sequences, so a prompt that extends one is not prefilled again.

A multi-turn episode's turn N+1 prompt is exactly turn N's prompt + completion + the new
messages (`chat.prompt_ids` with `prefix_ids`), and the prompts of one prompt style share a
long start (system message, worked example). `PrefixCache` keeps, for each sequence a
backend decoded, the keys/values of its tokens; `lookup(prompt)` returns the longest start
`prompt` shares with a stored sequence, so only the rest goes through the model.

The stored tensors are only valid for the weights that computed them: every lookup checks
the in-place version counters of a few parameters (an optimizer step bumps them) and drops
everything when they moved. Entries are evicted least-recently-used beyond `max_tokens`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class CachedPrefix:
    """One sequence's keys/values: per layer a (key, value) pair of shape (heads, tokens, dim)."""

    tokens: tuple[int, ...]
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class PrefixCache:
    """An LRU store of per-sequence key/value tensors, keyed by exact token ids."""

    def __init__(self, model: Any, max_tokens: int = 8192):
        self.max_tokens = max_tokens
        self._model = model
        self._entries: OrderedDict[tuple[int, ...], CachedPrefix] = OrderedDict()
        self._tokens = 0
        self._version: tuple[int, ...] | None = None
        self._probe: list[str] = []  # names of the parameters probed (found at the first check)
        self.hits = 0  # prompt tokens served from the cache, for stats

    def _weights_version(self) -> tuple[int, ...]:
        """The probed parameters' in-place versions and identities. The probe's names are
        found once (walking every module at each lookup cost more than the lookup); a name
        that no longer resolves (a wrapped or replaced layer) finds them again."""
        try:
            probe = [self._model.get_parameter(name) for name in self._probe]
        except AttributeError:
            probe = []
        if not probe:  # the trained ones where some are frozen (an adapter's): those are what change
            named = list(self._model.named_parameters())
            names = [name for name, p in named if p.requires_grad] or [name for name, _ in named]
            self._probe = names[:1] + names[len(names) // 2 : len(names) // 2 + 1] + names[-1:]
            probe = [self._model.get_parameter(name) for name in self._probe]
        return tuple(p._version for p in probe) + tuple(id(p) for p in probe)

    def check_weights(self) -> None:
        """Drop everything if the weights moved since the last check (each lookup and store
        checks, unless its caller has just done so for a batch of them: `checked=True`)."""
        version = self._weights_version()
        if version != self._version:
            self.clear()
            self._version = version

    def clear(self) -> None:
        self._entries.clear()
        self._tokens = 0

    def lookup(self, prompt: list[int], *, checked: bool = False) -> CachedPrefix | None:
        """The longest run of tokens `prompt` shares with a stored sequence, as a prefix whose
        keys/values can be reused (at least one token of `prompt` is left to run), or None.
        A shared start is enough: causal attention makes the keys/values of the first n tokens
        depend on those n tokens only."""
        if not checked:
            self.check_weights()
        best, best_n = None, 0
        wanted = tuple(prompt)
        for key in reversed(self._entries):  # the most recent first: the longest match, most often
            n = _common_length(key, wanted, min(len(key), len(wanted) - 1), longer_than=best_n)
            if n > best_n:
                best, best_n = self._entries[key], n
        if best is None:
            return None
        self._entries.move_to_end(best.tokens)
        self.hits += best_n
        if best_n == len(best.tokens):
            return best
        return CachedPrefix(best.tokens[:best_n], [(k[:, :best_n], v[:, :best_n]) for k, v in best.layers])

    def covered(self, tokens: list[int]) -> int:
        """How many leading tokens of `tokens` a stored sequence already holds."""
        wanted, most = tuple(tokens), 0
        for key in self._entries:
            most = max(most, _common_length(key, wanted, min(len(key), len(wanted)), longer_than=most))
        return most

    def store(
        self, tokens: list[int], layers: list[tuple[torch.Tensor, torch.Tensor]], *, checked: bool = False
    ) -> None:
        """Keep `layers` (already sliced to `tokens`, cloned off the batch) for later lookups."""
        if not tokens or len(tokens) > self.max_tokens:
            return
        if not checked:
            self.check_weights()
        key = tuple(tokens)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        self._entries[key] = CachedPrefix(key, layers)
        self._tokens += len(key)
        while self._tokens > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            self._tokens -= len(old.tokens)


def _common_length(a: tuple[int, ...], b: tuple[int, ...], limit: int, longer_than: int = 0) -> int:
    """Length of the common start of `a` and `b`, at most `limit`; 0 when it is not longer than
    `longer_than` (a lookup's best so far: one comparison rules most sequences out)."""
    if limit <= longer_than or a[: longer_than + 1] != b[: longer_than + 1]:
        return 0
    if a[:limit] == b[:limit]:  # the whole of it: a later turn of a stored sequence
        return limit
    lo, hi = longer_than + 1, limit - 1  # bisect on slice equality: C-speed comparisons
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_prefix(prompts: list[list[int]]) -> list[int]:
    """The tokens every prompt starts with."""
    first = tuple(prompts[0])
    n = min(len(p) for p in prompts)
    for p in prompts[1:]:
        n = _common_length(first, tuple(p), n)
    return list(first[:n])


@functools.cache
def cache_keyword() -> str:
    """The name a forward pass takes and returns its key/value cache under: `cache` in the
    transformers that renamed it (5.2x; the old name warns there and goes in 5.40),
    `past_key_values` before."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return (
        "cache"
        if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
        else "past_key_values"
    )


def forward_with_cache(model: Any, past: Any, **inputs: Any) -> tuple[Any, Any]:
    """(output, its cache): one forward pass that reads and extends `past`, on either name."""
    name = cache_keyword()
    result = model(**inputs, **{name: past}, use_cache=True)
    return result, getattr(result, name)


def cache_layers(past: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers cache, each (batch, heads, tokens, dim)."""
    layers = getattr(past, "layers", None)
    if layers is None:
        raise TypeError(f"unsupported cache type {type(past).__name__}")
    out = []
    for layer in layers:
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is None or values is None:
            raise TypeError(f"unsupported cache layer {type(layer).__name__}")
        out.append((keys, values))
    return out


def build_past(model: Any, prefixes: list[CachedPrefix | None], width: int) -> Any:
    """A `DynamicCache` holding each row's cached prefix right-aligned in `width` columns
    (zeros before it, to be masked out), or None when no row has one."""
    from transformers import DynamicCache

    if width == 0:
        return None
    template = next(p for p in prefixes if p is not None)
    past = DynamicCache(config=getattr(model, "config", None))
    for index, (k0, v0) in enumerate(template.layers):
        keys = k0.new_zeros((len(prefixes), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(prefixes), v0.shape[0], width, v0.shape[2]))
        for row, prefix in enumerate(prefixes):
            if prefix is not None:
                k, v = prefix.layers[index]
                keys[row, :, width - k.shape[1] :] = k
                values[row, :, width - v.shape[1] :] = v
        past.update(keys, values, index)
    return past
