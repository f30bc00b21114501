"""Where a model runs and in which precision: one choice, made once, for every command.

`--device auto|cpu|cuda|cuda:N` and `--dtype auto|float32|bfloat16|float16` mean the same in
`eval`, `sft`, `train` and `policy`, and `load_backend(spec, device=..., dtype=...)` takes the
same words. `auto` picks the GPU when torch sees one, and there bf16 when the GPU supports it
(fp32 otherwise); on a CPU, fp32. A choice the machine cannot honour is refused in words before
anything loads, never silently replaced.

Why fp32 stays the CPU default: sampled and recomputed logprobs agree closely in fp32 and
visibly less in bf16 (docs/gpu.md has the numbers); training corrects that difference
(`integrations/trl/logprob_agreement.py`), evaluation has nothing to correct.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
_DTYPE_ALIASES = {
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float": "float32",
}


class DeviceError(ValueError):
    """A device or dtype this machine cannot give (the message says what it has)."""


@dataclass(frozen=True)
class Placement:
    """A resolved device and dtype (torch objects), and what to report about them."""

    device: Any  # torch.device
    dtype: Any  # torch.dtype

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def describe(self) -> dict[str, str]:
        """What a run report and `train_log.jsonl` say about where the model ran."""
        info = {"device": str(self.device), "dtype": self.dtype_name}
        if self.on_gpu:
            import torch

            info["device_name"] = torch.cuda.get_device_name(self.device)
        return info


def resolve_device(spec: str | None = "auto") -> Any:
    """`auto` -> cuda:0 when torch sees a GPU, else cpu; `cuda` -> the current GPU; `cuda:N` checked."""
    import torch

    text = (spec or "auto").strip().lower()
    if text == "auto":
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    if text == "cpu":
        return torch.device("cpu")
    kind, _, index = text.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise DeviceError(f"unknown device {spec!r}: use {DEVICE_CHOICES}")
    if not torch.cuda.is_available():
        why = (
            "torch was built without CUDA"
            if torch.version.cuda is None
            else "torch sees no GPU (check the driver and CUDA_VISIBLE_DEVICES)"
        )
        raise DeviceError(
            f"device {spec!r} asked for, but {why} (torch {torch.__version__}): use --device cpu or auto"
        )
    count = torch.cuda.device_count()
    if index and int(index) >= count:
        raise DeviceError(f"device {spec!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", int(index) if index else torch.cuda.current_device())


def resolve_dtype(spec: str | None, device: Any) -> Any:
    """`auto` -> bf16 on a GPU that supports it, else fp32; explicit names are checked against the device."""
    import torch

    text = (spec or "auto").strip().lower()
    text = _DTYPE_ALIASES.get(text, text).removeprefix("torch.")
    if text not in DTYPE_CHOICES:
        raise DeviceError(f"unknown dtype {spec!r}: use {', '.join(DTYPE_CHOICES)}")
    if text == "auto":
        return torch.bfloat16 if device.type == "cuda" and _bf16_supported(device) else torch.float32
    if text == "bfloat16" and device.type == "cuda" and not _bf16_supported(device):
        name = torch.cuda.get_device_name(device)
        raise DeviceError(
            f"dtype bfloat16: {name} ({device}) does not support it (compute capability < 8.0): use float16 or float32"
        )
    return getattr(torch, text)


def resolve(device: str | None = "auto", dtype: str | None = "auto") -> Placement:
    """Both choices at once (the device first: the dtype's `auto` depends on it)."""
    placed = resolve_device(device)
    return Placement(placed, resolve_dtype(dtype, placed))


def place(model: Any, placement: Placement) -> Any:
    """`model` moved to the placement's device and dtype (floating-point weights only)."""
    return model.to(device=placement.device, dtype=placement.dtype)


def model_placement(model: Any) -> Placement:
    """Where an already-loaded model's weights are (the first floating-point parameter)."""
    import torch

    for p in model.parameters():
        if p.is_floating_point():
            return Placement(p.device, p.dtype)
    return Placement(torch.device("cpu"), torch.float32)


@contextlib.contextmanager
def decoding_attention(device: Any) -> Iterator[None]:
    """Attention kernels for token-by-token decoding: on a GPU, any but cuDNN's.

    Each decode pass grows the key/value cache by one token, and cuDNN's attention builds a
    new execution plan for every new length: 3 ms of CPU per layer and pass on an H100, against
    microseconds of GPU work, which made a decode pass 3.5x the model's own time in `train`.
    The flash and memory-efficient kernels have no per-shape plan. The switch is torch's
    (process-wide, as `sdpa_kernel` is); it is restored on exit. Elsewhere nothing changes.
    """
    if getattr(device, "type", device) != "cuda":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        yield


def _bf16_supported(device: Any) -> bool:
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    return major >= 8
