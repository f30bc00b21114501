"""How much memory a GRPO loss pass needs, checked before it runs.

A loss pass (forward and backward over a micro-batch of episodes) keeps every layer's
activations and the float32 logits of every completion token until the backward pass. On a
CPU, a pass that does not fit is not an error: the kernel kills the process, without a word,
at the first step with long episodes. So each pass is estimated from its real shape before it
runs, and one that cannot fit stops the run with what to change (`TrainMemoryError`).

The estimate is linear in tokens, fitted on the embedded model (SmolLM2-135M, fp32, SDPA
attention) with peak RSS measured around one forward and backward: 2.8-3.1 MB per token at
1x700, 4x350, 4x700 and 2x1400 tokens; 1.3 MB with gradient checkpointing. Per token, that is
about 10 hidden-size and 5 MLP-size values per layer, and 6.5 float32 copies of the
vocabulary-size logits per completion token (logits, temperature scaling, log-softmax and
their gradients). Eager attention adds its score matrices.

On a CPU the memory a pass frees is not free for the system yet: glibc keeps it in its arenas
(one per thread that allocated), and tensors whose sizes change every step leave it there.
`release_freed_heap` hands that memory back (`malloc_trim`) before a pass and at the end of a
step, once the process has grown since the last trim, and always before a pass is refused.
(Live memory that grows is another matter: each step's sampling backend, with its prefix
cache, was kept by a reference cycle until Python's rare full collection, and 30-minute runs
grew to 8-11 GB; `models/continuous.py` now lets it go when the step drops it.)
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from typing import Any

from envharness.integrations.trl.errors import TrainSetupError

#: Saved values per token and layer, in units of the hidden and the MLP size (fitted, see above).
HIDDEN_VALUES_PER_LAYER = 10.0
MLP_VALUES_PER_LAYER = 5.0
#: float32 copies of the logits kept per completion token.
LOGIT_COPIES = 6.5
#: Part of the free memory a pass may take (the optimizer step and allocator slack need the rest).
USABLE_SHARE = 0.85
#: Growth of the process since the last heap trim that makes the next one worth its cost (a
#: trim giving back 200 MB took 30 ms; one in a tiny model's step about 3 ms, for nothing).
TRIM_AFTER_GROWTH = 256 * 2**20
_trimmed_at = [0]  # the process's resident bytes after the last trim


class TrainMemoryError(TrainSetupError):
    """A loss pass that would not fit in the memory left on its device."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate reads off a model's config."""

    layers: int
    hidden: int
    mlp: int
    vocab: int
    heads: int
    eager_attention: bool

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        config = getattr(model, "config", None)
        text = getattr(config, "text_config", None) or config  # a VLM keeps its LM's sizes there
        hidden = int(getattr(text, "hidden_size", 0) or 0)
        return cls(
            layers=int(getattr(text, "num_hidden_layers", 0) or 0),
            hidden=hidden,
            mlp=int(getattr(text, "intermediate_size", 0) or 4 * hidden),
            vocab=int(getattr(text, "vocab_size", 0) or 0),
            heads=int(getattr(text, "num_attention_heads", 0) or 0),
            eager_attention=getattr(config, "_attn_implementation", "sdpa") == "eager",
        )


def loss_pass_bytes(
    shape: ModelShape,
    rows: int,
    width: int,
    completion_width: int,
    *,
    activation_bytes: int = 4,
    checkpointing: bool = False,
) -> int:
    """Estimated peak bytes of one loss pass over `rows` sequences of `width` tokens, of which
    the last `completion_width` are scored."""
    per_layer = (HIDDEN_VALUES_PER_LAYER * shape.hidden + MLP_VALUES_PER_LAYER * shape.mlp) * activation_bytes
    # with checkpointing only each layer's input is kept, and one layer is recomputed at a time
    layers = (
        (shape.layers * shape.hidden * activation_bytes + per_layer)
        if checkpointing
        else shape.layers * per_layer
    )
    total = rows * width * layers + rows * completion_width * LOGIT_COPIES * shape.vocab * 4
    if shape.eager_attention:  # scores and probabilities per head, kept per layer
        total += (
            rows * shape.heads * width * width * activation_bytes * 2 * (1 if checkpointing else shape.layers)
        )
    return int(total)


def free_bytes(device: Any) -> int | None:
    """Memory a pass can still take on `device` (None: not known here)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


@functools.cache
def _malloc_trim() -> Any:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
    except (OSError, TypeError):  # no C library to open by name (Windows)
        return None


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def release_freed_heap() -> bool:
    """Give the C heap's freed pages back to the system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(ctypes.c_size_t(0))
    _trimmed_at[0] = _resident_bytes() or 0
    return True


def release_freed_heap_if_grown() -> bool:
    """`release_freed_heap` once the process grew `TRIM_AFTER_GROWTH` since the last trim: a
    small model's steps leave little to give back, and a trim walks every arena even then."""
    resident = _resident_bytes()
    if resident is not None and resident - _trimmed_at[0] < TRIM_AFTER_GROWTH:
        return False
    return release_freed_heap()


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_fits(
    needed: int, free: int | None, *, rows: int, width: int, micro_batch_hint: bool = True
) -> None:
    """Raise `TrainMemoryError` when `needed` bytes are more than a pass may take of `free`."""
    if free is None or needed <= USABLE_SHARE * free:
        return
    remedies = []
    if micro_batch_hint and rows > 1:
        remedies.append(f"fewer episodes per loss pass (--micro-batch {max(1, rows // 2)}, in sft too)")
    remedies += [
        "--gradient-checkpointing",
        "shorter episodes (--max-turns, --max-new-tokens, a shorter prompt style)",
    ]
    raise TrainMemoryError(
        f"a loss pass over {rows} episode(s) of up to {width} tokens needs about {_gib(needed)}, "
        f"and {_gib(free)} is free (a pass may take {USABLE_SHARE:.0%} of it): the process would be "
        f"killed for memory. Use {', or '.join(remedies)}. Checkpoints saved so far are kept."
    )


def activation_bytes(args: Any) -> int:
    """Bytes per activation value under a trainer's precision flags (bf16/fp16 autocast: 2)."""
    return 2 if getattr(args, "bf16", False) or getattr(args, "fp16", False) else 4


def check_pass(
    shape: ModelShape,
    rows: int,
    width: int,
    completion_width: int,
    device: Any,
    *,
    activation_bytes: int = 4,
    checkpointing: bool = False,
) -> None:
    """Raise `TrainMemoryError` when this pass's estimate does not fit in `device`'s free memory."""
    needed = loss_pass_bytes(
        shape, rows, width, completion_width, activation_bytes=activation_bytes, checkpointing=checkpointing
    )
    release_freed_heap_if_grown()  # on a CPU, what the rollout and the last pass freed
    free = free_bytes(device)
    if free is not None and needed > USABLE_SHARE * free and release_freed_heap():
        free = free_bytes(device)  # before a refusal, every freed page counts
    check_fits(needed, free, rows=rows, width=width)


def guard_loss_memory(trainer: Any) -> ModelShape:
    """Wrap `trainer.compute_loss` (GRPO's or SFT's) so each pass is checked against free memory
    before it runs."""
    shape = ModelShape.of(trainer.model)
    compute_loss = trainer.compute_loss
    options = dict(
        activation_bytes=activation_bytes(trainer.args),
        checkpointing=bool(getattr(trainer.args, "gradient_checkpointing", False)),
    )

    def checked_compute_loss(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        prompt, completion = inputs.get("prompt_ids"), inputs.get("completion_ids")
        if prompt is None and completion is None:  # SFT: logits at every position
            completion = inputs.get("input_ids")
            prompt = completion[:, :0] if completion is not None else None
        if prompt is not None and completion is not None and shape.layers:
            rows, completion_width = completion.shape[0], completion.shape[1]
            check_pass(
                shape,
                rows,
                prompt.shape[1] + completion_width,
                completion_width,
                completion.device,
                **options,
            )
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = checked_compute_loss
    trainer.add_callback(release_heap_callback())
    return shape


def release_heap_callback() -> Any:
    """A `TrainerCallback` that trims the C heap after each optimizer step, when the step's
    passes have been freed."""
    from transformers import TrainerCallback

    class ReleaseFreedHeap(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            release_freed_heap_if_grown()

    return ReleaseFreedHeap()
