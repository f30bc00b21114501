"""A tiny Qwen2-VL processor built offline (no weights: the remote-backend tests need only the
processor that turns screenshots into placeholder tokens), and test screenshots.

The processor is real (`Qwen2VLProcessor` without its video slot, which needs torchvision,
and the PIL image processor); the tokenizer is a byte-level BPE trained on a few lines with
Qwen's special tokens and a ChatML template that writes one placeholder per image part.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from envharness.models.tiny_vlm import (
    QWEN_SPECIALS,
    QWEN_TEMPLATE,
)  # the tokenizer conventions of the tiny VLMs

_CORPUS = [
    "You control a web browser. Reply with exactly one action, e.g. click('13').",
    "Goal: Click the button. Elements: [13] button 'Click Me!' textbox step url http://miniwob.local/",
] * 4


@cache
def tiny_qwen2vl_processor() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):  # no video processor: torchvision cannot load here
        def __init__(
            self, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None, **kwargs: Any
        ):
            kwargs.pop("video_processor", None)
            super().__init__(
                image_processor=image_processor, tokenizer=tokenizer, chat_template=chat_template, **kwargs
            )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _CORPUS,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=QWEN_SPECIALS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = QWEN_TEMPLATE
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=28 * 28, max_pixels=112 * 112, patch_size=14, merge_size=2
    )
    return ImageOnlyQwen2VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=QWEN_TEMPLATE
    )


def placeholder_count(processor: Any, image: Any) -> int:
    """Image tokens the processor makes for `image` (what a vLLM server reports as its length)."""
    grid = processor.image_processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    return int(grid.prod()) // processor.image_processor.merge_size**2


def screenshot(width: int = 160, height: int = 100, color: tuple[int, int, int] = (30, 120, 200)) -> Any:
    """A small synthetic screenshot: a colored page with a white 'button'."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), color)
    ImageDraw.Draw(image).rectangle([10, 60, 70, 90], fill=(255, 255, 255))
    return image
