"""An offline demo vision-language model: the embedded SmolLM2-135M-Instruct text weights
grafted into an Idefics3 model with a small RANDOM vision encoder. Its vision is untrained.

No VLM weights can be downloaded here. This model has real language (it answers text
questions as SmolLM2 does, and follows the action format as well as SmolLM2 does) and eyes
that see pixels but were never taught what they mean: the screenshot changes its outputs
(the path from pixels to tokens is real, and GRPO can train it), but out of the box it
cannot read a page from the screenshot. Use it to run `envharness eval` / `train` end to end
with images offline; use a real VLM (`--model <Qwen2-VL directory>`) for results.

    load_backend("embedded-vlm")          # TransformersVisionBackend
    envharness train --model embedded-vlm
"""

from __future__ import annotations

from typing import Any

SPEC = "embedded-vlm"
NAME = "SmolLM2-135M-Instruct + random Idefics3 vision encoder (UNTRAINED VISION)"
IMAGE_SIZE, PATCH, SCALE = 224, 16, 2
SPECIALS = ["<fake_token_around_image>", "<image>", "<global-img>", "<end_of_utterance>"]


def build_embedded_vlm(seed: int = 0) -> tuple[Any, Any]:
    """(model, processor): SmolLM2's weights in an `Idefics3ForConditionalGeneration`, vision random."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    from envharness.models import embedded
    from envharness.models.tiny_vlm import _IDEFICS_TEMPLATE, image_only_processor_class

    text_model, tokenizer = embedded.load_model()
    vocab = len(tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS})
    tokenizer.chat_template = _IDEFICS_TEMPLATE
    text_config = text_model.config.to_dict()
    text_config.update(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
    )
    config = Idefics3Config(
        text_config=text_config,
        vision_config=dict(
            hidden_size=96,
            intermediate_size=192,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=IMAGE_SIZE,
            patch_size=PATCH,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        scale_factor=SCALE,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config).float()
    with torch.no_grad():
        source = text_model.model.state_dict()
        embed = source.pop("embed_tokens.weight")
        missing, unexpected = model.model.text_model.load_state_dict(source, strict=False)
        if unexpected or set(missing) != {"embed_tokens.weight"}:
            raise RuntimeError(
                f"SmolLM2 does not fit the Idefics3 text model: missing {missing}, unexpected {unexpected}"
            )
        grown = model.model.text_model.embed_tokens.weight
        grown[:vocab] = embed
        grown[vocab:] = embed.mean(0, keepdim=True)  # the new specials start at the average token
        model.lm_head.weight = grown  # tied, as in SmolLM2
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": IMAGE_SIZE},
        max_image_size={"longest_edge": IMAGE_SIZE},
    )
    processor = image_only_processor_class("idefics3")(
        image_processor=image_processor,
        tokenizer=tokenizer,
        chat_template=_IDEFICS_TEMPLATE,
        image_seq_len=(IMAGE_SIZE // PATCH) ** 2 // SCALE**2,
    )
    return model.eval(), processor


def load_backend(placement: Any = None, **kwargs: Any) -> Any:
    """A `TransformersVisionBackend` on the demo model, on `placement` (default: `auto`)."""
    from envharness.models.device import place, resolve
    from envharness.models.transformers_vision import TransformersVisionBackend

    model, processor = build_embedded_vlm()
    return TransformersVisionBackend(place(model, placement or resolve()), processor, name=NAME, **kwargs)
