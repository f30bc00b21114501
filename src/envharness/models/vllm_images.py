"""Token-in/token-out generation with images on a TRL 1.x / vLLM server (`TRLVLLMBackend`).

vLLM takes a prompt either as token ids or as a chat with images, never both; training needs
token ids (multi-turn sequences must extend `prefix_ids` exactly). TRL 1.16's server mode
(`trl/generation/vllm_client.py`, `vllm_generation.py`) therefore makes two calls, and so
does this module:

1. ``POST /v1/chat/completions/render`` with the images alone -> ``features``: the processed
   pixels, their hashes and ``mm_placeholders`` (where the images sit in that throwaway chat);
2. ``POST /inference/v1/generate`` with *our* token ids and those features, the placeholders
   re-pointed at the runs of image tokens in our ids.

The ids are made here with the model's processor (`ImagePromptTokenizer`), which expands each
image placeholder into as many image tokens as the image processor says; the server's
placeholder lengths are checked against those runs, so a processor that disagrees with the
served model fails loudly instead of generating from misaligned pixels. Needs
``vllm serve --enable-scale-out`` (vLLM >= 0.30, per TRL).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest
from envharness.models.http import BackendError, RetryPolicy, request_json
from envharness.models.images import messages_images, openai_messages


class ImagePromptTokenizer:
    """The processor seen as a tokenizer by `chat.prompt_ids`: encoding a piece of templated
    text expands its image placeholders with the images they stand for (the conversation's
    last ones: earlier images are already inside `prefix_ids`)."""

    #: `chat.prompt_ids` lets image parts through: this tokenizer expands them into placeholders.
    accepts_images = True

    def __init__(self, processor: Any, images: list[Any]):
        self._processor = processor
        self._images = images
        self.image_token: str = processor.image_token
        self.image_token_id: int = image_token_id(processor)
        self.encoded_images: list[Any] = []

    def __getattr__(self, name: str) -> Any:  # chat_template, decode, apply_chat_template, ...
        return getattr(self._processor, name)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, Any]:
        count = text.count(self.image_token)
        if count > len(self._images):
            raise ValueError(
                f"the prompt text holds {count} image placeholders but the messages only {len(self._images)} images"
            )
        images = self._images[len(self._images) - count :] if count else None
        encoded = self._processor(text=[text], images=images, add_special_tokens=add_special_tokens)
        self.encoded_images = list(images or [])
        return {"input_ids": list(encoded["input_ids"][0])}


def image_token_id(processor: Any) -> int:
    """The id of the image placeholder token of `processor` (Qwen: ``<|image_pad|>``)."""
    value = getattr(processor, "image_token_id", None)
    if value is None:
        value = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    return int(value)


def image_token_runs(ids: list[int], token_id: int) -> list[tuple[int, int]]:
    """(offset, length) of every run of `token_id` in `ids`."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == token_id:
            start = i
            while i < len(ids) and ids[i] == token_id:
                i += 1
            runs.append((start, i - start))
        else:
            i += 1
    return runs


def place_features(features: dict[str, Any], ids: list[int], token_id: int) -> dict[str, Any]:
    """`features` with their image placeholders pointing at the image-token runs of `ids`,
    after checking that each image has as many tokens there as the server processed."""
    served = (features.get("mm_placeholders") or {}).get("image") or []
    runs = image_token_runs(ids, token_id)
    if len(runs) != len(served):
        raise BackendError(
            f"the prompt has {len(runs)} runs of image tokens but the server processed {len(served)} images"
        )
    for n, ((_, length), placeholder) in enumerate(zip(runs, served)):
        if int(placeholder.get("length", -1)) != length:
            raise BackendError(
                f"image {n}: the local processor made {length} image tokens, the server {placeholder.get('length')}; "
                "the processor does not match the served model (same checkpoint, same min/max pixels?)"
            )
    placed = [{"offset": offset, "length": length} for offset, length in runs]
    return {**features, "mm_placeholders": {**features["mm_placeholders"], "image": placed}}


@dataclass
class ImagePrompt:
    """One request's exact prompt ids and the images its new tokens hold."""

    ids: list[int]
    images: list[Any]  # every image of the conversation, in placeholder order (what the server processes)
    new_images: list[Any]  # those added after `prefix_ids`
    token_id: int


def image_prompt(processor: Any, request: GenerationRequest) -> ImagePrompt:
    images = messages_images(request.messages)
    tokenizer = ImagePromptTokenizer(processor, images)
    ids = chat.prompt_ids(tokenizer, request.messages, request.tools, request.prefix_ids)
    return ImagePrompt(ids, images, tokenizer.encoded_images, tokenizer.image_token_id)


async def render_features(
    client: httpx.AsyncClient, base_url: str, model: str | None, images: list[Any], retry: RetryPolicy
) -> dict[str, Any]:
    """The server's processed `images` (TRL's `VLLMClient.image_features`, one prompt)."""
    messages = openai_messages(
        [{"role": "user", "content": [{"type": "image", "image": image} for image in images]}]
    )
    try:
        data = await request_json(
            client,
            "POST",
            f"{base_url}/v1/chat/completions/render",
            json={"model": model, "messages": messages, "max_tokens": 1},
            retry=retry,
        )
    except BackendError as exc:
        if exc.status == 404:
            raise BackendError(
                f"the vLLM server at {base_url} does not serve /v1/chat/completions/render, which "
                "prompts with images need: restart it with `--enable-scale-out` (vLLM >= 0.30)",
                404,
            ) from exc
        raise
    if not isinstance(data, dict) or not isinstance(data.get("features"), dict):
        raise BackendError(f"malformed render answer from {base_url}: no 'features'")
    return data["features"]


async def generate_with_images(
    client: httpx.AsyncClient,
    base_url: str,
    model: str | None,
    prompt: ImagePrompt,
    sampling_params: dict[str, Any],
    tokenizer: Any,
    retry: RetryPolicy,
) -> Generation:
    """Render the images, then generate from `prompt.ids` with them (one request)."""
    features = place_features(
        await render_features(client, base_url, model, prompt.images, retry), prompt.ids, prompt.token_id
    )
    payload = {
        "request_id": f"envharness-{uuid.uuid4().hex}",
        "model": model,
        "token_ids": prompt.ids,
        "features": features,
        # FINAL_ONLY: the server's default output kind drops sequences (TRL, vLLM PR #52399)
        "sampling_params": {**sampling_params, "n": 1, "logprobs": 0, "output_kind": 2},
    }
    data = await request_json(client, "POST", f"{base_url}/inference/v1/generate", json=payload, retry=retry)
    try:
        choice = data["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        entries = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(e["logprob"]) for e in entries]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise BackendError(f"malformed generate answer from {base_url}: {str(data)[:300]}") from exc
    if len(logprobs) != len(ids):
        raise BackendError(f"the server returned {len(ids)} tokens but {len(logprobs)} logprobs")
    runs = image_token_runs(prompt.ids, prompt.token_id)
    new_counts = (
        [length for _, length in runs[len(runs) - len(prompt.new_images) :]] if prompt.new_images else []
    )
    generation = Generation(
        text=tokenizer.decode(ids, skip_special_tokens=True),
        prompt_ids=list(prompt.ids),
        completion_ids=ids,
        logprobs=logprobs,
        finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
    )
    return with_image_fields(
        generation,
        images=list(prompt.new_images),
        image_token_counts=new_counts,
        image_token_id=prompt.token_id,
    )


def with_image_fields(generation: Generation, **fields: Any) -> Generation:
    """Attach what a trainer needs to rebuild this turn's pixels: `Generation`'s image fields
    where it has them, else the same names in `metadata`."""
    for name, value in fields.items():
        if name in getattr(Generation, "__dataclass_fields__", {}):
            setattr(generation, name, value)
        else:
            generation.metadata[name] = value
    return generation
