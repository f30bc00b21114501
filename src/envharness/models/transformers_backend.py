"""A local Hugging Face causal LM as a batched `ModelBackend` with exact tokens and logprobs.

Requests are decoded together (left-padded, one forward pass per new token, KV cache;
identical prompts, such as the episodes of a GRPO group, are prefilled once, and a prompt that
extends an earlier sequence, such as the next turn of an episode, prefills only its new tokens:
see `prefix_cache.py`), each with its own temperature, top-k/top-p, token budget, stop strings
and seed. Batching is continuous (`continuous.py`): a request joins the rows decoding now at
their next token and returns at its own last one, whoever else is still decoding.
The decoding loop is ours rather than `model.generate` so that the distribution a token is
sampled from and the logprob reported for it are the same tensor (see `sampling.py`); a
separate forward pass over `prompt_ids + completion_ids` reproduces the logprobs.

Generation runs in one worker thread (the event loop stays free for environments), so one
model never serves two batches at once. Built from a path/hub id, or from an
existing `(model, tokenizer)` pair, e.g. the model a TRL trainer is training.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest, SamplingParams
from envharness.models.continuous import ContinuousDecoder, Prefilled
from envharness.models.decoding import DecodingRow, eos_ids, model_device, row_text
from envharness.models.device import Placement, decoding_attention, model_placement, place, resolve
from envharness.models.images import refuse_images
from envharness.models.prefix_cache import (
    PrefixCache,
    build_past,
    cache_layers,
    common_prefix,
    forward_with_cache,
)

#: A shared start shorter than this is not worth its own forward pass.
_MIN_SHARED_START = 16
#: How long a first request to the idle decoder may wait for more rows, on a CPU and on a GPU
#: (`TransformersBackend.idle_wait_s`).
IDLE_WAIT_CPU_S = 0.5
IDLE_WAIT_GPU_S = 0.02


class TransformersBackend:
    """`await backend.generate([GenerationRequest])` on a local transformers causal LM."""

    #: Requests may be sent as they come: they join the rows decoding now (`BatchingModelStep`).
    continuous = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str | None = None,
        max_batch_size: int | None = None,
        prefix_cache_tokens: int = 8192,
        idle_wait_s: float | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.name = name or getattr(getattr(model, "config", None), "_name_or_path", None) or "transformers"
        #: Rows decoded together (`capacity()`).
        self.max_batch_size = max_batch_size
        self.eos_ids = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._pad_id = self.pad_id = int(pad if pad is not None else 0)
        self._decoder = ContinuousDecoder(self)
        self.prefill_tokens = 0  # prompt tokens run through the model (after sharing), for stats
        #: Keys/values of earlier turns, so turn N+1 prefills only its new tokens (0 turns it off).
        self.prefix_cache = PrefixCache(model, prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self._idle_wait_s = idle_wait_s

    @property
    def placement(self) -> Placement:
        """Where the model runs now (a trainer may have moved it): reported by eval and train."""
        return model_placement(self.model)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: str = "auto",
        device: str = "auto",
        gguf_file: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> TransformersBackend:
        """Load a model directory or hub id (hub ids need network unless already cached) onto
        `device` in `dtype` (`models/device.py`: auto = the GPU in bf16 when there is one)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        placement = resolve(device, dtype)
        tokenizer = AutoTokenizer.from_pretrained(
            name_or_path, gguf_file=gguf_file, local_files_only=local_files_only
        )
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, gguf_file=gguf_file, dtype=placement.dtype, local_files_only=local_files_only
        )
        return cls(place(model, placement).eval(), tokenizer, name=name_or_path, **kwargs)

    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    def decoder_stats(self) -> dict[str, float]:
        """The decoding thread's counts and seconds so far (`continuous.DecoderStats`)."""
        return self._decoder.stats.as_dict()

    def capacity(self) -> int:
        """Rows decoded together: `max_batch_size`, else 32 on a CPU (where a bigger batch only
        adds latency) and 256 on a GPU (where a decode step costs about the same for 32 or 256)."""
        return self.max_batch_size or (256 if self.placement.on_gpu else 32)

    @property
    def idle_wait_s(self) -> float:
        """How long a first request to the idle decoder may wait for the other episodes of its
        `BatchingModelStep` (where they are independent); set it, or pass `idle_wait_s`, to
        choose. On a CPU, half a second: the decoder's passes share the cores with the
        environment, so passes for the first episodes back slow the environment calls still
        running, and cost about what passes for all of them would; a step ends with its last
        episode anyway. On a GPU, 20 ms: a pass takes no core from the environment, and the late
        episodes join the rows decoding."""
        if self._idle_wait_s is not None:
            return self._idle_wait_s
        return IDLE_WAIT_GPU_S if self.placement.on_gpu else IDLE_WAIT_CPU_S

    @idle_wait_s.setter
    def idle_wait_s(self, seconds: float | None) -> None:
        self._idle_wait_s = seconds

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Render, tokenize and sample every request; one `Generation` per request, in order.
        The requests join the rows decoding now and each returns as soon as it is done."""
        futures = await asyncio.get_running_loop().run_in_executor(
            _render_pool(), self._render_and_submit, requests
        )
        done = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        return [self._generation(prompt, row) for prompt, row in done]

    def generate_blocking(self, requests: list[GenerationRequest]) -> list[Generation]:
        """The same as `generate`, in the calling thread."""
        return self.generate_from_ids(self._prompts(requests), [r.sampling for r in requests])

    def generate_from_ids(self, prompts: list[list[int]], sampling: list[SamplingParams]) -> list[Generation]:
        """Sample continuations of already-tokenized prompts (used by servers built on this backend)."""
        return [self._generation(*f.result()) for f in self._submit(prompts, sampling)]

    def _render_and_submit(self, requests: list[GenerationRequest]) -> list[Any]:
        """In a render thread: the decoder gets the prompts from there, not after a hop back
        to the event loop."""
        return self._submit(self._prompts(requests), [r.sampling for r in requests])

    def _prompts(self, requests: list[GenerationRequest]) -> list[list[int]]:
        """Each request's prompt tokens; the requests of one conversation (a GRPO group's first
        turn) are rendered once."""
        rendered: dict[tuple, list[tuple[GenerationRequest, list[int]]]] = {}  # compared within a shape
        prompts = []
        for r in requests:
            refuse_images(self.name, r.messages)  # a text model: never drop images silently
            alike = rendered.setdefault(_shape(r), [])
            same = next((ids for seen, ids in alike if _same_conversation(seen, r)), None)
            if same is None:
                same = chat.prompt_ids(self.tokenizer, r.messages, r.tools, r.prefix_ids)
                alike.append((r, same))
            prompts.append(list(same))
        return prompts

    def _submit(self, prompts: list[list[int]], sampling: list[SamplingParams]) -> list[Any]:
        if len(prompts) != len(sampling):
            raise ValueError(f"{len(prompts)} prompts but {len(sampling)} sampling params")
        if any(not p for p in prompts):
            raise ValueError("empty prompt: nothing to condition on")
        return self._decoder.submit(prompts, sampling)

    async def aclose(self) -> None:
        """Nothing to release: the model belongs to whoever passed it in."""

    @contextlib.contextmanager
    def sampling_mode(self) -> Iterator[None]:
        """No gradients and no dropout while sampling, attention kernels fit for decoding; a
        trainer's model goes back to training after."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), decoding_attention(self.device):
                yield
        finally:
            self.model.train(was_training)

    def prefill(self, prompts: list[list[int]]) -> Prefilled:
        """One forward pass over what has not been run of `prompts`: each distinct prompt once
        (the episodes of a GRPO group start from the same page; its cache is copied to every
        row sharing it), and only the tokens after the longest cached earlier sequence (turn N+1
        extends turn N). Rows are right-aligned (left padding)."""
        device = self.device
        distinct: dict[tuple[int, ...], int] = {}
        owner = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        unique = [list(p) for p in distinct]
        if self.prefix_cache is not None:
            self.prefix_cache.check_weights()  # once for the batch's lookups and stores
            if len(unique) > 1:
                self._prefill_shared_start(unique)
        cached = [
            self.prefix_cache.lookup(p, checked=True) if self.prefix_cache is not None else None
            for p in unique
        ]
        hits = [len(c.tokens) if c is not None else 0 for c in cached]
        input_ids, mask = _left_padded([p[n:] for p, n in zip(unique, hits)], self._pad_id)
        self.prefill_tokens += int(mask.sum())
        past = None
        if max(hits):
            past = build_past(self.model, cached, max(hits))
            before = torch.zeros((len(unique), max(hits)), dtype=torch.long)
            for i, n in enumerate(hits):
                before[i, max(hits) - n :] = 1
            mask = torch.cat([before, mask], dim=-1)
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -input_ids.shape[1] :]
        result, past = forward_with_cache(
            self.model,
            past,
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            logits_to_keep=1,
        )
        logits = result.logits[:, -1, :]
        for i, prompt in enumerate(unique):  # a group's or a turn's later arrival prefills only the rest
            self._store_row(prompt, past, mask[i], i, checked=True)
        if len(unique) < len(prompts):  # one row per request from now on
            expand = torch.tensor(owner, dtype=torch.long, device=device)
            past.reorder_cache(expand)
            logits, mask = logits[expand], mask[expand]
        return Prefilled(logits, past, mask)

    def _prefill_shared_start(self, prompts: list[list[int]]) -> None:
        """Run the start every prompt of the batch shares (system message, worked example,
        ...) once, as its own sequence, so each row then prefills only what is its own."""
        shared = common_prefix(prompts)[: min(len(p) for p in prompts) - 1]
        if len(shared) < _MIN_SHARED_START or self.prefix_cache.covered(shared) >= len(shared):
            return
        ids = torch.tensor([shared], dtype=torch.long, device=self.device)
        _, past = forward_with_cache(self.model, None, input_ids=ids, logits_to_keep=1)
        self.prefill_tokens += len(shared)
        try:
            self.prefix_cache.store(shared, [(k[0], v[0]) for k, v in cache_layers(past)], checked=True)
        except TypeError:
            self.prefix_cache = None  # a cache layout we do not know: decode without reuse

    def remember(
        self, prompt: list[int], row: DecodingRow, past: Any, mask: torch.Tensor, index: int
    ) -> None:
        """Keep a finished row's keys/values (prompt + every completion token fed back) for
        later turns; `mask` is its attention mask in `past`, row `index`."""
        fed = max(len(row.tokens) - 1, 0)
        self._store_row(prompt + row.tokens[:fed], past, mask, index)

    def _store_row(
        self, tokens: list[int], past: Any, mask: torch.Tensor, index: int, checked: bool = False
    ) -> None:
        """Store row `index` of `past` (its columns where `mask` is 1) as the keys/values of
        `tokens`: kept as soon as a prompt is prefilled, so an episode of the same group or
        turn that arrives while this one still decodes prefills only what is its own."""
        if self.prefix_cache is None:
            return
        try:
            layers = cache_layers(past)
        except TypeError:
            self.prefix_cache = None  # a cache layout we do not know: decode without reuse
            return
        cols = mask.nonzero().flatten()
        if len(cols) != len(tokens):
            return
        self.prefix_cache.store(
            tokens, [(k[index][:, cols], v[index][:, cols]) for k, v in layers], checked=checked
        )

    def _generation(self, prompt: list[int], row: DecodingRow) -> Generation:
        text = row_text(row, self.tokenizer)
        metadata = {"stop": row.stop} if row.stop is not None else {}
        return Generation(
            text=text,
            prompt_ids=list(prompt),
            completion_ids=row.tokens,
            logprobs=row.logprobs,
            finish_reason=row.finish_reason or "length",
            metadata=metadata,
        )


def _shape(request: GenerationRequest) -> tuple:
    """What two requests of one conversation share, cheap to read: the lengths of its parts (a
    batch of many distinct conversations is not compared pair by pair)."""
    return (len(request.prefix_ids or ()), *(len(str(m.get("content"))) for m in request.messages))


def _same_conversation(a: GenerationRequest, b: GenerationRequest) -> bool:
    return a.prefix_ids == b.prefix_ids and a.messages == b.messages and a.tools == b.tools


@functools.cache
def _render_pool() -> ThreadPoolExecutor:
    """Threads for rendering and tokenizing prompts, kept for the process: a rollout per training
    step runs on a new event loop, whose own pool would start its threads again every step."""
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="envharness-render")


def _left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) with every prompt right-aligned (left padding)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return input_ids, mask
