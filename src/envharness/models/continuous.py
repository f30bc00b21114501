"""Continuous batching: requests join the running batch at the next token and leave at their last.

The episodes of a rollout reach the model at different moments (one page loads slower, one
reply is shorter): a batch that decodes until its longest row is done, while the next batch
waits for it, leaves the model idle between batches and the environment idle during them.
`ContinuousDecoder` keeps one batch in a worker thread: at every token it admits the requests
that arrived (prefilled together, as the backend prefills a batch: shared starts and earlier
turns from its prefix cache) and hands back every row that finished, so an episode goes on to
its environment step while the others still decode.

Rows of different lengths share one key/value cache, each right-aligned with its own attention
mask and positions: a row's keys, values, logits and sampled tokens are what the row would get
in a batch of its own (up to the float rounding of batched kernels, as in any batch).
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

import torch

from envharness.models.base import SamplingParams
from envharness.models.decoding import DecodingRow, decode_batch_step
from envharness.models.prefix_cache import cache_layers, forward_with_cache

Layers = list[tuple[torch.Tensor, torch.Tensor]]

#: Seconds an idle decoder thread waits for new requests before it ends.
_IDLE_S = 1.0


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    future: Future


@dataclass
class DecoderStats:
    """Where the decoding thread's time goes, summed since it was made: what separates a
    rollout's generation time from its model's forward passes (`train` logs each step's share
    as `decoder/...`). Seconds are wall time in the thread; on a GPU a forward pass's seconds are
    its launches, and the wait for the GPU lands in `sample_s` (ids come to the host there)."""

    admissions: int = 0  # prefills of newly arrived requests, each its own forward pass
    forwards: int = 0  # decode passes of the running batch
    admit_s: float = 0.0  # prefill, prefix-cache reuse and the merge into the running batch
    forward_s: float = 0.0  # decode passes
    sample_s: float = 0.0  # drawing each row's token and logprob, stop checks
    finish_s: float = 0.0  # keeping finished rows for later turns, dropping them from the batch

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class Prefilled:
    """New rows after their prefill: last-token logits, their cache and attention mask."""

    logits: torch.Tensor
    past: Any
    mask: torch.Tensor


class ContinuousDecoder:
    """Decodes the requests of `backend` (a `TransformersBackend`) in one running batch.

    `submit(prompts, sampling)` returns one `Future` per prompt, resolved with
    `(prompt, DecodingRow)` when that row is done. At most `capacity()` rows decode together;
    the others wait for a free row. The worker thread runs while there is work.

    While any row decodes, the model stays in its sampling mode (eval, inference mode):
    switching a model's modules at every token cost more than a small model's decode pass. Its
    owner's mode is back before the last row's future resolves.
    """

    def __init__(self, backend: Any):
        # Held weakly: the backend holds its decoder, and a cycle would keep a dropped backend's
        # prefix cache (hundreds of MB of keys/values) until Python's rare full collection. A
        # rollout makes a backend per step, so a long run grew by gigabytes. The worker thread
        # holds it strongly while it runs.
        self._backend = weakref.ref(backend)
        self._queue: list[_Request] = []
        self._guard = threading.Lock()
        self._arrived = threading.Condition(self._guard)
        self._thread: threading.Thread | None = None
        self.decode_steps = 0  # forward passes of the running batch, for stats and tests
        self.most_rows = 0  # the most rows one of them decoded together
        self.stats = DecoderStats()

    def submit(self, prompts: list[list[int]], sampling: list[SamplingParams]) -> list[Future]:
        requests = [_Request(list(p), s, Future()) for p, s in zip(prompts, sampling)]
        with self._guard:
            self._queue.extend(requests)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="envharness-decoder", daemon=True)
                self._thread.start()
            else:
                self._arrived.notify()
        return [r.future for r in requests]

    def _take(self, room: int) -> list[_Request]:
        """Up to `room` queued requests; with nothing queued and nothing decoding, the thread ends."""
        with self._guard:
            taken, self._queue = self._queue[:room], self._queue[room:]
            return taken

    def _finish_thread(self) -> bool:
        """With nothing left to decode, wait a moment for more before the thread ends: the
        next turn's requests come back from the environment within milliseconds, and starting
        a thread waits for the interpreter lock (several milliseconds while others run)."""
        with self._guard:
            if not self._queue:
                self._arrived.wait(timeout=_IDLE_S)  # `submit` wakes it at once
            if self._queue:
                return False
            self._thread = None
            return True

    @property
    def backend(self) -> Any:
        return self._backend()

    def _run(self) -> None:
        batch: _Batch | None = None
        mode = contextlib.ExitStack()  # the model's sampling mode, held while rows decode
        while True:
            backend = self._backend()
            if backend is None:  # dropped while its requests waited: they learn why
                self._fail_queued(RuntimeError("the model backend was closed"))
                return
            batch = batch or _Batch(backend, self.stats)
            new = [r for r in self._take(max(0, backend.capacity() - len(batch.requests))) if _wanted(r)]
            finished: list[tuple[_Request, DecodingRow]] = []
            try:
                if new and not batch.requests:
                    mode.enter_context(backend.sampling_mode())
                if new:
                    batch.admit(new)
                if batch.requests:
                    self.decode_steps += 1
                    self.most_rows = max(self.most_rows, len(batch.requests))
                    finished = batch.step()
            except Exception as exc:  # every row in flight learns why; the queue goes on
                for request in batch.requests + new:
                    if not request.future.done():
                        request.future.set_exception(exc)
                batch = _Batch(backend, self.stats)
            if not batch.requests:  # the owner has its model's mode back before the last row returns
                mode.close()
            idle = not batch.requests and not new
            if idle:
                # no reference from here on: once the last result is out, the owner may drop the
                # backend and the interpreter exit, and the backend must be freed in the owner's
                # thread, never in this daemon thread as the interpreter exits (that aborts it)
                batch = backend = None
            for request, row in finished:
                if not request.future.done():
                    request.future.set_result((request.prompt, row))
            if idle and self._finish_thread():
                return

    def _fail_queued(self, exc: Exception) -> None:
        with self._guard:
            dropped, self._queue, self._thread = self._queue, [], None
        for request in dropped:
            if _wanted(request):
                request.future.set_exception(exc)


def _wanted(request: _Request) -> bool:
    """False for a request whose caller stopped waiting before it started."""
    return request.future.set_running_or_notify_cancel()


class _Batch:
    """The rows decoding now: their requests, rows, cache, mask and the logits to sample next."""

    def __init__(self, backend: Any, stats: DecoderStats):
        self.backend = backend
        self.stats = stats
        self.requests: list[_Request] = []
        self.rows: list[DecodingRow] = []
        self.past: Any = None
        self.mask: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None
        self.prepared_mask = prepared_mask_fits(backend.model)

    def admit(self, new: list[_Request]) -> None:
        """Prefill `new` and append them to the batch (their first token is sampled next)."""
        started = time.perf_counter()
        device = self.backend.device
        prefilled = self.backend.prefill([r.prompt for r in new])
        rows = [DecodingRow.start(r.params, device) for r in new]
        if not self.requests:
            self.past, self.mask, self.logits = prefilled.past, prefilled.mask, prefilled.logits
        else:
            self.past, self.mask = _merge(
                self.backend.model, self.past, self.mask, prefilled.past, prefilled.mask
            )
            self.logits = torch.cat([self.logits, prefilled.logits])
        self.requests += new
        self.rows += rows
        self.stats.admissions += 1
        self.stats.admit_s += time.perf_counter() - started

    def step(self) -> list[tuple[_Request, DecodingRow]]:
        """Sample a token for every row, run the unfinished ones one token on; returns the finished."""
        backend, stats = self.backend, self.stats
        started = time.perf_counter()
        for request, row in zip(self.requests, self.rows):
            if request.future.cancelled() and not row.finish_reason:
                row.finish_reason = "cancelled"
        ids = decode_batch_step(
            self.rows, self.logits, backend.tokenizer, backend.eos_ids, backend.pad_id, consume_logits=True
        )  # the next pass brings new logits
        sampled = time.perf_counter()
        stats.sample_s += sampled - started
        done = [i for i, row in enumerate(self.rows) if row.finish_reason]
        finished = [(self.requests[i], self.rows[i]) for i in done]
        if done:
            for i in done:
                backend.remember(self.requests[i].prompt, self.rows[i], self.past, self.mask[i], i)
            keep = [i for i in range(len(self.rows)) if i not in set(done)]
            self.requests = [self.requests[i] for i in keep]
            self.rows = [self.rows[i] for i in keep]
            if not keep:
                self.past = self.mask = self.logits = None
                stats.finish_s += time.perf_counter() - sampled
                return finished
            index = torch.tensor(keep, dtype=torch.long, device=ids.device)
            self.past.reorder_cache(index)
            self.mask, ids = self.mask[index], ids[index]
            self._trim()
        forward_started = time.perf_counter()
        stats.finish_s += forward_started - sampled
        positions = self.mask.sum(-1, keepdim=True)  # the new token follows every real one
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=-1)
        result, self.past = forward_with_cache(
            backend.model,
            self.past,
            input_ids=ids[:, None],
            attention_mask=self.mask[:, None, None, :].bool() if self.prepared_mask else self.mask,
            position_ids=positions,
            logits_to_keep=1,
        )
        self.logits = result.logits[:, -1, :]
        stats.forwards += 1
        stats.forward_s += time.perf_counter() - forward_started
        return finished

    def _trim(self) -> None:
        """Drop the leading columns no remaining row uses (they were a finished row's)."""
        used = self.mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else 0
        if start > 0:
            layers = [(k[:, :, start:], v[:, :, start:]) for k, v in cache_layers(self.past)]
            self.past = _cache(self.backend.model, layers)
            self.mask = self.mask[:, start:]


#: Models whose decoder layers all attend causally over the whole cache (no sliding windows,
#: chunks or bidirectional spans), checked further by `prepared_mask_fits`.
_FULL_CAUSAL_MODELS = {"llama", "qwen2", "qwen3"}


def prepared_mask_fits(model: Any) -> bool:
    """Whether a decode pass may take its attention mask already in the 4-D form SDPA reads.

    For one new token per row, that form is the rows' 2-D mask as booleans (a causal mask lets
    the last position see every earlier one; padding hides the rest): what transformers would
    build from the 2-D mask at every pass, with a dozen small operations and their Python. Only
    for full causal attention under SDPA; any other model gets the 2-D mask, as before."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if text is None or getattr(text, "model_type", None) not in _FULL_CAUSAL_MODELS:
        return False
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return all(kind == "full_attention" for kind in layer_types)
    return not getattr(text, "use_sliding_window", False) and not getattr(text, "sliding_window", None)


def _merge(model: Any, past: Any, mask: torch.Tensor, new_past: Any, new_mask: torch.Tensor) -> tuple:
    """One cache and mask for the rows of both, right-aligned to the wider one."""
    width = max(mask.shape[1], new_mask.shape[1])
    layers = [
        (torch.cat([_pad(k, width), _pad(nk, width)]), torch.cat([_pad(v, width), _pad(nv, width)]))
        for (k, v), (nk, nv) in zip(cache_layers(past), cache_layers(new_past))
    ]
    merged_mask = torch.cat([_pad_mask(mask, width), _pad_mask(new_mask, width)])
    return _cache(model, layers), merged_mask


def _pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """(batch, heads, tokens, dim) left-padded with zeros to `width` tokens."""
    missing = width - tensor.shape[2]
    if missing == 0:
        return tensor
    return torch.cat([tensor.new_zeros((*tensor.shape[:2], missing, tensor.shape[3])), tensor], dim=2)


def _pad_mask(mask: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - mask.shape[1]
    return mask if missing == 0 else torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)


def _cache(model: Any, layers: Layers) -> Any:
    from transformers import DynamicCache

    past = DynamicCache(config=getattr(model, "config", None))
    for index, (keys, values) in enumerate(layers):
        past.update(keys, values, index)
    return past
