"""Tiny random vision-language models, built offline in about a second: for tests and smoke runs.

No VLM weights can be downloaded here, so tests build their own: a byte-level BPE tokenizer
trained from scratch on a few lines of web-agent text (Qwen's special tokens), a ChatML
template that writes one image placeholder per image part, a real image processor and
processor class, and a real model class (`Qwen2VLForConditionalGeneration`,
`Qwen2_5_VLForConditionalGeneration`, `Qwen3VLForConditionalGeneration`,
`Idefics3ForConditionalGeneration`) from a small config
with random weights. `save_tiny_vlm(arch, dir)` writes a directory that `load_backend(dir)`
and `envharness train --model dir` load like any real checkpoint. The outputs are random:
these models exercise the code paths (pixels, placeholders, logprobs), not vision quality.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARCHITECTURES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "idefics3")

QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
IDEFICS_SPECIALS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]

# ChatML; an image part is written where it stands in the message (the placeholder the
# processor expands into one token per visual patch).
_QWEN_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN_TEMPLATE = _QWEN_TEMPLATE  # public: test fixtures build processors on the same template
_IDEFICS_TEMPLATE = _QWEN_TEMPLATE.replace("<|vision_start|><|image_pad|><|vision_end|>", "<image>")

_CORPUS = [
    "You control a web browser. Reply with exactly one action, e.g. click('13').",
    "Goal: Click on the button. Elements: [13] button 'OK' [14] link 'next' textbox",
    "click('12') fill('7', 'hello') press('4', 'Enter') noop() scroll(0, 100) hover('3')",
    "The screenshot shows the page. Step 1 2 3 4 5 6 7 8 9 0 URL http://miniwob.local/",
] * 4


def build_tokenizer(
    specials: list[str] | None = None, corpus: list[str] | None = None, vocab_size: int = 400
) -> Any:
    """A fast byte-level BPE tokenizer (a few hundred tokens by default) with the given special
    tokens, trained on `corpus` (default: a few lines of web-agent text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(specials or QWEN_SPECIALS)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus or _CORPUS, trainer)
    eos = "<|im_end|>" if "<|im_end|>" in specials else "<end_of_utterance>"
    pad = "<|endoftext|>" if "<|endoftext|>" in specials else eos
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, pad_token=pad)


def image_only_processor_class(arch: str) -> type:
    """The processor class for `arch`, without a video slot (torchvision cannot load here)."""
    from envharness.models.vision_processors import image_only_processor_class as cls_for

    names = {
        "qwen2-vl": "Qwen2VLProcessor",
        "qwen2.5-vl": "Qwen2_5_VLProcessor",
        "qwen3-vl": "Qwen3VLProcessor",
        "idefics3": "Idefics3Processor",
    }
    return cls_for(names[arch])


def build_tiny_vlm(arch: str = "qwen2-vl", seed: int = 0) -> tuple[Any, Any]:
    """(model, processor) of a tiny random VLM of `arch` (one of `ARCHITECTURES`)."""
    import torch

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown tiny VLM architecture {arch!r}; choose from {ARCHITECTURES}")
    torch.manual_seed(seed)
    if arch == "idefics3":
        return _idefics3()
    return _qwen(arch)


def _qwen(arch: str) -> tuple[Any, Any]:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = build_tokenizer(QWEN_SPECIALS)
    tok.chat_template = _QWEN_TEMPLATE
    ids = {name: tok.convert_tokens_to_ids(name) for name in QWEN_SPECIALS}
    patch = 16 if arch == "qwen3-vl" else 14
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=(2 * patch) ** 2, max_pixels=(8 * patch) ** 2, patch_size=patch, merge_size=2
    )
    special = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    text = dict(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        max_position_embeddings=4096,
    )
    if arch == "qwen2-vl":
        text["rope_scaling"] = {"type": "mrope", "mrope_section": [1, 1, 2], "rope_type": "default"}
        config = Qwen2VLConfig(
            text_config=text,
            vision_config=dict(
                depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=patch
            ),
            **special,
        )
        model_cls = Qwen2VLForConditionalGeneration
    elif arch == "qwen2.5-vl":
        text["rope_scaling"] = {"type": "mrope", "mrope_section": [1, 1, 2], "rope_type": "default"}
        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=4,
            out_hidden_size=32,
            patch_size=patch,
            window_size=56,
            fullatt_block_indexes=[1],
        )
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special)
        model_cls = Qwen2_5_VLForConditionalGeneration
    else:
        text.update(
            head_dim=8,
            rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        )
        vision = dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=4,
            out_hidden_size=32,
            patch_size=patch,
            num_position_embeddings=64,
            deepstack_visual_indexes=[1],
            spatial_merge_size=2,
        )
        config = Qwen3VLConfig(text_config=text, vision_config=vision, **special)
        model_cls = Qwen3VLForConditionalGeneration
    model = model_cls(config).float().eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    processor = image_only_processor_class(arch)(
        image_processor=image_processor, tokenizer=tok, chat_template=_QWEN_TEMPLATE
    )
    return model, processor


def _idefics3() -> tuple[Any, Any]:
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = build_tokenizer(IDEFICS_SPECIALS + ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    tok.chat_template = _IDEFICS_TEMPLATE
    image_size, patch, scale = 32, 8, 2
    seq_len = (image_size // patch) ** 2 // scale**2
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": image_size},
        max_image_size={"longest_edge": image_size},
    )
    config = Idefics3Config(
        text_config=dict(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            max_position_embeddings=4096,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=image_size,
            patch_size=patch,
        ),
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=scale,
        pad_token_id=tok.pad_token_id,
    )
    model = Idefics3ForConditionalGeneration(config).float().eval()
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    processor = image_only_processor_class("idefics3")(
        image_processor=image_processor, tokenizer=tok, chat_template=_IDEFICS_TEMPLATE, image_seq_len=seq_len
    )
    return model, processor


def save_tiny_vlm(arch: str, directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny random VLM of `arch` to `directory` (a loadable checkpoint) and return it."""
    model, processor = build_tiny_vlm(arch, seed)
    directory = Path(directory)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory
