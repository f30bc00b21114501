"""Loading a vision-language model's processor, and reading what it says about placeholders.

Two facts of this machine shape the loader. torchvision cannot load here (the index's wheel
is a CUDA build), so transformers falls back to the PIL image processors, but processors
with a video slot (Qwen2/2.5/3-VL) then fail on construction: `load_processor` falls back
to an image-only subclass of the same processor (`image_only_processor_class`), which is
also the class a directory written by `tiny_vlm` names.

`placeholder_counts` is the one place that says how many placeholder tokens each image
becomes, computed from the image processor's outputs (not from the token ids), so the
backend, the token assembler and the trainer can all check the ids against it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

_PREFIX = "ImageOnly"


#: The spec of the random vision-language model built for smoke runs (`tiny-vlm[:ARCH]`).
TINY_PREFIX = "tiny-vlm"


def is_vision_spec(spec: str) -> bool:
    """True for `tiny-vlm[:ARCH]`, `embedded-vlm` and a model directory with a vision tower."""
    return (
        spec == "embedded-vlm"
        or spec == TINY_PREFIX
        or spec.startswith(TINY_PREFIX + ":")
        or is_vision_model_dir(Path(spec).expanduser())
    )


def is_vision_model_dir(path: str | Path) -> bool:
    """True when `path` is a model directory whose config has a vision tower."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("vision_config"), dict)


@cache
def image_only_processor_class(base_name: str) -> type:
    """`ImageOnly<base_name>`: the transformers processor class without its video slot."""
    import transformers

    base = getattr(transformers, base_name)

    def __init__(
        self: Any,
        image_processor: Any = None,
        tokenizer: Any = None,
        chat_template: Any = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("video_processor", None)
        base.__init__(
            self, image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template, **kwargs
        )

    return type(f"{_PREFIX}{base_name}", (base,), {"__init__": __init__, "__module__": __name__})


def load_processor(path: str, **kwargs: Any) -> Any:
    """The processor of the VLM at `path`: `AutoProcessor` (which resolves the class from the
    folder's `processor_class`, else from config.json's `model_type`), else the image-only
    subclass of that class (what works without torchvision)."""
    from transformers import AutoProcessor

    named = _processor_class_name(path)
    failure: BaseException | None = None
    if not (named or "").startswith(_PREFIX):
        try:
            processor = AutoProcessor.from_pretrained(path, **kwargs)
            if hasattr(processor, "image_processor"):
                return processor
        except (ImportError, ValueError, TypeError, OSError, AttributeError) as exc:
            failure = exc
    base_name = (named or _processor_class_for_model_type(path) or "").removeprefix(_PREFIX)
    if not base_name:
        reason = f": AutoProcessor failed ({type(failure).__name__}: {failure})" if failure else ""
        raise ValueError(
            f"{path}: no processor class found (processor_config.json / preprocessor_config.json, "
            f"or config.json's model_type){reason}"
        )
    return image_only_processor_class(base_name).from_pretrained(path, **kwargs)


def _processor_class_for_model_type(path: str) -> str | None:
    """The processor class transformers maps config.json's `model_type` to (as `AutoProcessor`
    does for a folder that names none), or None."""
    try:
        model_type = json.loads((Path(path) / "config.json").read_text()).get("model_type")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    return name if isinstance(name, str) else None


def _processor_class_name(path: str) -> str | None:
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        file = Path(path) / name
        if file.is_file():
            try:
                value = json.loads(file.read_text()).get("processor_class")
            except (OSError, json.JSONDecodeError):
                continue
            if value:
                return str(value)
    return None


def image_token_id(processor: Any) -> int:
    """The id of the token each visual patch (or tile embedding) takes in the sequence."""
    value = getattr(processor, "image_token_id", None)
    if value is None:
        token = getattr(processor, "image_token", None)
        token = getattr(token, "content", token)
        value = processor.tokenizer.convert_tokens_to_ids(token) if token else None
    if value is None:
        raise ValueError(f"{type(processor).__name__} names no image token: not a vision-language processor")
    return int(value)


def placeholder_counts(processor: Any, images: list[Any]) -> list[int]:
    """Placeholder tokens per image, computed by the image processor from the images themselves.

    Qwen-VL: `image_grid_thw` (t*h*w patches, merge_size² of them merged into one token).
    Idefics3 / SmolVLM: one run of `image_seq_len` tokens per tile the image is cut into.
    """
    import torch

    if not images:
        return []
    image_processor = processor.image_processor
    seq_len = getattr(processor, "image_seq_len", None)
    if seq_len is not None:
        counts = []
        for image in images:
            pixels = image_processor(images=[[image]], return_tensors="pt")["pixel_values"]
            counts.append(int(pixels.shape[1]) * int(seq_len))
        return counts
    grid = image_processor(images=list(images), return_tensors="pt").get("image_grid_thw")
    if grid is None:
        raise ValueError(
            f"cannot tell placeholder counts for {type(processor).__name__}: unsupported vision processor"
        )
    merge = int(getattr(image_processor, "merge_size", 1) or 1)
    return [int(torch.as_tensor(g).prod()) // merge**2 for g in grid]


def image_inputs(processor: Any, images_per_row: list[list[Any]], input_ids: Any = None) -> dict[str, Any]:
    """The model's pixel inputs for a batch whose row i shows `images_per_row[i]` (in placeholder
    order): what the processor would return beside `input_ids`. Shared by the backend (sampling),
    its scoring pass and the trainer's loss pass, so all three see identical tensors.

    With `input_ids`, processors that return `mm_token_type_ids` (Qwen-VL) get it rebuilt as
    `input_ids == image_token_id`, which is what they compute themselves."""
    flat = [image for row in images_per_row for image in row]
    out: dict[str, Any] = {}
    if flat:
        if getattr(processor, "image_seq_len", None) is not None:  # tiles per row (Idefics3, SmolVLM)
            out = dict(
                processor.image_processor(images=[list(row) for row in images_per_row], return_tensors="pt")
            )
        else:  # patches of all images, concatenated (Qwen-VL)
            out = dict(processor.image_processor(images=flat, return_tensors="pt"))
    if input_ids is not None and getattr(processor, "return_mm_token_type_ids", False):
        out["mm_token_type_ids"] = (input_ids == image_token_id(processor)).long()
    return out
