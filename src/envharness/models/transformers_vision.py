"""A local vision-language model (Qwen2/2.5/3-VL, Idefics3, ...) as a batched `ModelBackend`
with exact tokens and logprobs.

Prompts hold image parts (`models/images.py`). The processor renders the chat template and
expands each image's placeholder into the run of tokens the image processor says it takes;
`prefix_ids` work as for text models: only the messages after the previous assistant turn
are rendered, so turn N+1's `prompt_ids` extend turn N's sequence exactly, with one new
screenshot per turn. Each `Generation` says which images its prompt added and how many
placeholder tokens each became (`images`, `image_token_counts`), which is what a trainer
needs to give its loss pass the same pixels (`integrations/trl/vision.py`).

Decoding uses `model.generate` (the VLM's own multimodal position and cache logic) with one
logits processor of ours that samples every row with its own temperature, top-k/top-p and
seed and records the logprob from the very tensor it sampled from (`sampling.py`); the
model's `generation_config` defaults (top-k 20 and the like) are kept out while it runs.
`score` is the separate forward pass over the same tokens and pixels; the two agree
to ~1e-7 (tests/test_models_vision.py).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest, SamplingParams
from envharness.models.decoding import DecodingRow, decode_batch_step, eos_ids, row_text
from envharness.models.device import Placement, decoding_attention, model_placement, place, resolve
from envharness.models.images import messages_images
from envharness.models.sampling import processed_logprobs
from envharness.models.vision_processors import (
    image_inputs,
    image_token_id,
    load_processor,
    placeholder_counts,
)


@dataclass
class VisionPrompt:
    """One request's exact prompt: token ids, every image of the conversation, and the new ones."""

    ids: list[int]
    images: list[Any]
    new_images: list[Any]
    new_counts: list[int]


class _TemplateView:
    """The processor seen as the tokenizer `chat.py` expects (its template renders image parts)."""

    def __init__(self, processor: Any):
        self._processor = processor
        self.tokenizer = processor.tokenizer
        self.chat_template = getattr(processor, "chat_template", None) or getattr(
            self.tokenizer, "chat_template", None
        )
        self.name_or_path = getattr(self.tokenizer, "name_or_path", "")

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        return self._processor.apply_chat_template(messages, chat_template=self.chat_template, **kwargs)

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return self.tokenizer.decode(ids, **kwargs)

    def __call__(self, text: str, **kwargs: Any) -> Any:
        return self.tokenizer(text, **kwargs)


class TransformersVisionBackend:
    """`await backend.generate([GenerationRequest])` on a local transformers VLM and its processor."""

    def __init__(self, model: Any, processor: Any, *, name: str | None = None, max_batch_size: int = 8):
        if not hasattr(processor, "image_processor"):
            raise ValueError(
                f"{type(processor).__name__} is not a vision processor (it has no image_processor)"
            )
        self.model = model
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.name = (
            name or getattr(getattr(model, "config", None), "_name_or_path", None) or "transformers-vision"
        )
        self.max_batch_size = max_batch_size
        self.image_token_id = image_token_id(processor)
        self._view = _TemplateView(processor)
        self._lock = threading.Lock()
        self._eos_ids = eos_ids(model, self.tokenizer)
        pad = (
            self.tokenizer.pad_token_id
            if self.tokenizer.pad_token_id is not None
            else self.tokenizer.eos_token_id
        )
        self._pad_id = int(pad if pad is not None else 0)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        *,
        dtype: str = "auto",
        device: str = "auto",
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> TransformersVisionBackend:
        """Load a VLM directory or hub id with its processor (image-only when torchvision is missing)
        onto `device` in `dtype` (`models/device.py`)."""
        from transformers import AutoModelForImageTextToText

        placement = resolve(device, dtype)
        processor = load_processor(name_or_path, local_files_only=local_files_only)
        model = AutoModelForImageTextToText.from_pretrained(
            name_or_path, dtype=placement.dtype, local_files_only=local_files_only
        )
        return cls(place(model, placement).eval(), processor, name=name_or_path, **kwargs)

    # -- prompts -----------------------------------------------------------------------
    def prepare(self, request: GenerationRequest) -> VisionPrompt:
        """The request's exact prompt tokens (extending `prefix_ids`), with placeholders checked
        against the image processor: a count that disagrees raises ValueError."""
        images = messages_images(request.messages)
        prefix_ids, new_images = request.prefix_ids, images
        if prefix_ids:
            last = max(
                (i for i, m in enumerate(request.messages) if m.get("role") == "assistant"), default=-1
            )
            old_images = messages_images(request.messages[: last + 1])
            if sum(1 for t in prefix_ids if t == self.image_token_id) != sum(
                placeholder_counts(self.processor, old_images)
            ):
                # the model sampled a placeholder token: that sequence can never be shown to it again
                # with matching pixels, so render the whole conversation (the token assembler then
                # stops the training sequence at this turn and says why)
                prefix_ids = None
            else:
                new_images = images[len(old_images) :]
        text = chat.new_prompt_text(self._view, request.messages, request.tools, prefix_ids)
        encoded = self.processor(
            text=[text], images=[list(new_images)] if new_images else None, add_special_tokens=False
        )
        new_ids = [int(t) for t in encoded["input_ids"][0]]
        counts = placeholder_counts(self.processor, new_images)
        found = sum(1 for t in new_ids if t == self.image_token_id)
        if found != sum(counts):
            raise ValueError(
                f"the prompt has {found} image placeholder tokens but its {len(new_images)} new image(s) take {sum(counts)}: "
                "every image part must be rendered by the chat template exactly once"
            )
        return VisionPrompt(list(prefix_ids or []) + new_ids, images, list(new_images), counts)

    def model_inputs(self, sequences: list[list[int]], images: list[list[Any]]) -> dict[str, Any]:
        """Left-padded `input_ids`/`attention_mask` plus the pixel inputs of each row's images."""
        width = max(len(s) for s in sequences)
        input_ids = torch.full((len(sequences), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for i, seq in enumerate(sequences):
            input_ids[i, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            mask[i, width - len(seq) :] = 1
        inputs = {
            "input_ids": input_ids,
            "attention_mask": mask,
            **image_inputs(self.processor, images, input_ids),
        }
        return on_model(inputs, self.placement)

    # -- generation --------------------------------------------------------------------
    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Render, tokenize and sample every request; one `Generation` per request, in order."""
        return await asyncio.to_thread(self.generate_blocking, requests)

    def generate_blocking(self, requests: list[GenerationRequest]) -> list[Generation]:
        """The same as `generate`, in the calling thread."""
        prompts = [self.prepare(r) for r in requests]
        out: list[Generation] = []
        with self._lock:
            for start in range(0, len(prompts), self.max_batch_size):
                stop = start + self.max_batch_size
                out.extend(self._decode(prompts[start:stop], [r.sampling for r in requests[start:stop]]))
        return out

    async def aclose(self) -> None:
        """Nothing to release: the model belongs to whoever passed it in."""

    @torch.inference_mode()
    def _decode(self, prompts: list[VisionPrompt], sampling: list[SamplingParams]) -> list[Generation]:
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        rows = [DecodingRow.start(p, self.placement.device) for p in sampling]
        inputs = self.model_inputs([p.ids for p in prompts], [p.images for p in prompts])
        sampler = _Sampler(self, rows)
        config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=max(p.max_tokens for p in sampling),
            eos_token_id=sorted(self._eos_ids) or None,
            pad_token_id=self._pad_id,
        )
        owner = (
            self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        )  # peft wraps it
        saved_config, was_training = owner.generation_config, self.model.training
        owner.generation_config = GenerationConfig(
            eos_token_id=config.eos_token_id, pad_token_id=self._pad_id
        )
        self.model.eval()
        try:
            with decoding_attention(self.placement.device):
                self.model.generate(
                    **inputs,
                    generation_config=config,
                    logits_processor=LogitsProcessorList([sampler]),
                    stopping_criteria=StoppingCriteriaList([_RowsDone(rows)]),
                )
        finally:
            owner.generation_config = saved_config
            self.model.train(was_training)
        return [self._generation(p, row) for p, row in zip(prompts, rows)]

    def sample_step(self, rows: list[DecodingRow], logits: torch.Tensor) -> torch.Tensor:
        """Sample one token for each row still decoding (its logprob from the same tensor)."""
        return decode_batch_step(rows, logits, self.tokenizer, self._eos_ids, self._pad_id)

    @property
    def placement(self) -> Placement:
        """Where the model runs now: reported by eval and train."""
        return model_placement(self.model)

    def _generation(self, prompt: VisionPrompt, row: DecodingRow) -> Generation:
        text = row_text(row, self.tokenizer)
        return Generation(
            text=text,
            prompt_ids=list(prompt.ids),
            completion_ids=list(row.tokens),
            logprobs=list(row.logprobs),
            finish_reason=row.finish_reason or "length",
            metadata={"stop": row.stop} if row.stop is not None else {},
            images=list(prompt.new_images),
            image_token_counts=list(prompt.new_counts),
            image_token_id=self.image_token_id,
        )

    # -- scoring -----------------------------------------------------------------------
    @torch.inference_mode()
    def score(
        self, prompt_ids: list[int], completion_ids: list[int], images: list[Any], temperature: float = 1.0
    ) -> list[float]:
        """Logprobs of `completion_ids` after `prompt_ids` seen with `images`, in one plain
        forward pass (no cache): what a trainer's loss pass computes."""
        inputs = self.model_inputs([list(prompt_ids) + list(completion_ids)], [list(images)])
        was_training = self.model.training
        self.model.eval()
        try:
            logits = self.model(**inputs).logits[0]
        finally:
            self.model.train(was_training)
        start = len(prompt_ids) - 1
        logprobs = processed_logprobs(logits[start : start + len(completion_ids)], temperature)
        return [
            float(x)
            for x in logprobs.gather(-1, torch.tensor(completion_ids, device=logprobs.device)[:, None])[:, 0]
        ]


class _Sampler(LogitsProcessor):
    """The logits processor: samples each row itself and leaves `generate` one choice (greedy)."""

    def __init__(self, backend: TransformersVisionBackend, rows: list[DecodingRow]):
        self.backend, self.rows = backend, rows

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, self.backend.sample_step(self.rows, scores)[:, None], 0.0)


class _RowsDone(StoppingCriteria):
    """Stopping criterion: a row is done when our sampler says so (eos, stop string, budget)."""

    def __init__(self, rows: list[DecodingRow]):
        self.rows = rows

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        return torch.tensor(
            [row.finish_reason is not None for row in self.rows], dtype=torch.bool, device=input_ids.device
        )


def on_model(inputs: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """Model inputs on the model's device, pixels in its dtype (a bf16 vision tower refuses fp32
    pixels); ids and masks keep their integer types."""
    return {
        k: (
            v.to(placement.device, dtype=placement.dtype) if v.is_floating_point() else v.to(placement.device)
        )
        if isinstance(v, torch.Tensor)
        else v
        for k, v in inputs.items()
    }
