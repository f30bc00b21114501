"""Images through the remote backends, against stub servers on loopback that check the payloads.

- OpenAI-compatible chat: image parts go as `image_url` data URLs (the stub decodes them and
  compares pixels); logprobs and vLLM's token ids come back.
- TRL 1.x / vLLM server mode: render (images alone) then `/inference/v1/generate` with our
  token ids, the placeholders re-pointed at our image-token runs; multi-turn prompts extend
  `prefix_ids` exactly with a screenshot per turn.
- Backends without vision refuse images in words.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from _models_fixtures import serve
from _vision_fixtures import placeholder_count, screenshot, tiny_qwen2vl_processor
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from PIL import Image

from envharness.models.base import GenerationRequest, SamplingParams
from envharness.models.http import BackendError, RetryPolicy
from envharness.models.images import ImagesNotSupportedError
from envharness.models.openai_backend import OpenAIBackend
from envharness.models.scripted import ScriptedBackend
from envharness.models.trl_vllm_backend import TRLVLLMBackend
from envharness.models.vllm_images import image_token_runs

FAST_RETRY = RetryPolicy(max_retries=1, backoff_s=0.01)
pytestmark = pytest.mark.timeout(300)


def image_field(gen, name: str):
    """A generation's image field (`Generation.images`, ... once the model core has them; `metadata` before)."""
    return getattr(gen, name) if hasattr(gen, name) else gen.metadata[name]


def decode_data_url(url: str) -> tuple[str, Image.Image]:
    header, _, data = url.partition(",")
    assert header in ("data:image/png;base64", "data:image/jpeg;base64"), header
    return header, Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


def vision_messages(image, text="Goal: Click the button."):
    return [
        {"role": "system", "content": "You control a web browser."},
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image", "image": image}]},
    ]


# -- OpenAI-compatible chat completions -------------------------------------------------------------
def chat_stub(seen: list[dict]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request):
        body = await request.json()
        seen.append(body)
        return {
            "prompt_token_ids": [1, 2, 3],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "token_ids": [7, 8],
                    "message": {"role": "assistant", "content": "click('13')"},
                    "logprobs": {
                        "content": [
                            {"token": "token_id:7", "logprob": -0.25},
                            {"token": "token_id:8", "logprob": -0.5},
                        ]
                    },
                }
            ],
        }

    return app


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
async def test_openai_backend_sends_images_as_data_urls(fmt):
    seen: list[dict] = []
    image = screenshot()
    with serve(chat_stub(seen)) as url:
        backend = OpenAIBackend("qwen-vl", f"{url}/v1", retry=FAST_RETRY, image_format=fmt)
        try:
            [gen] = await backend.generate(
                [GenerationRequest(vision_messages(image), sampling=SamplingParams(max_tokens=8))]
            )
        finally:
            await backend.aclose()
    assert (gen.text, gen.prompt_ids, gen.completion_ids, gen.logprobs) == (
        "click('13')",
        [1, 2, 3],
        [7, 8],
        [-0.25, -0.5],
    )
    [body] = seen
    assert body["logprobs"] is True and body["return_token_ids"] is True
    system, user = body["messages"]
    assert system == {"role": "system", "content": "You control a web browser."}  # text messages untouched
    text, picture = user["content"]
    assert text == {"type": "text", "text": "Goal: Click the button."}
    assert picture["type"] == "image_url"
    header, received = decode_data_url(picture["image_url"]["url"])
    assert header == f"data:image/{fmt.lower()};base64" and received.size == image.size
    difference = np.abs(np.asarray(received, dtype=int) - np.asarray(image, dtype=int))
    assert difference.max() == 0 if fmt == "PNG" else difference.mean() < 5  # lossless / lossy


# -- TRL 1.x / vLLM server mode ---------------------------------------------------------------------
class VLLMStub:
    """`vllm serve --enable-scale-out` as TRL 1.16 talks to it: render, then generate from token ids.
    It processes images with the same image processor as the client (as the served model would)
    and checks every payload."""

    def __init__(
        self, processor, completion_ids: list[int], lie_about_length: bool = False, no_render: bool = False
    ):
        self.processor = processor
        self.image_token_id = processor.image_token_id
        self.completion_ids = completion_ids
        self.lie = lie_about_length
        self.renders: list[list[Image.Image]] = []
        self.generates: list[dict] = []
        self.app = FastAPI()
        self.app.get("/v1/models")(lambda: {"data": [{"id": "qwen-vl"}]})
        if not no_render:
            self.app.post("/v1/chat/completions/render")(self.render)
        self.app.post("/inference/v1/generate")(self.generate)

    async def render(self, request: Request):
        body = await request.json()
        assert body["model"] == "qwen-vl" and body["max_tokens"] == 1
        [message] = body["messages"]
        assert message["role"] == "user" and all(
            p["type"] == "image_url" for p in message["content"]
        )  # images alone
        images = [decode_data_url(p["image_url"]["url"])[1] for p in message["content"]]
        self.renders.append(images)
        lengths = [placeholder_count(self.processor, image) + (1 if self.lie else 0) for image in images]
        offsets = [5 + 10 * i for i in range(len(images))]  # where they sat in the server's throwaway chat
        return {
            "features": {
                "mm_hashes": {"image": [f"hash-{i}" for i in range(len(images))]},
                "mm_placeholders": {"image": [{"offset": o, "length": n} for o, n in zip(offsets, lengths)]},
                "kwargs_data": "opaque-processed-pixels",
            }
        }

    async def generate(self, request: Request):
        body = await request.json()
        self.generates.append(body)
        ids, features = body["token_ids"], body["features"]
        placed = [(p["offset"], p["length"]) for p in features["mm_placeholders"]["image"]]
        if placed != image_token_runs(ids, self.image_token_id):
            return JSONResponse({"error": "placeholders do not point at the image tokens"}, status_code=400)
        assert features["kwargs_data"] == "opaque-processed-pixels" and len(
            features["mm_hashes"]["image"]
        ) == len(placed)
        params = body["sampling_params"]
        assert params["n"] == 1 and params["logprobs"] == 0 and params["output_kind"] == 2
        entries = [
            {"token": f"token_id:{t}", "logprob": -0.1 * (k + 1), "top_logprobs": []}
            for k, t in enumerate(self.completion_ids)
        ]
        return {
            "choices": [
                {
                    "index": 0,
                    "token_ids": self.completion_ids,
                    "logprobs": {"content": entries},
                    "finish_reason": "stop",
                }
            ]
        }


@pytest.fixture(scope="module")
def processor():
    return tiny_qwen2vl_processor()


async def test_trl_vllm_backend_generates_from_token_ids_with_image_features(processor):
    tokenizer = processor.tokenizer
    action_ids = tokenizer.encode("click('13')<|im_end|>")
    stub = VLLMStub(processor, action_ids)
    first, second = screenshot(), screenshot(498, 321, (200, 60, 60))
    sampling = SamplingParams(temperature=0.7, max_tokens=8, seed=3)
    with serve(stub.app) as url:
        backend = TRLVLLMBackend(url, processor=processor, retry=FAST_RETRY)
        try:
            [turn1] = await backend.generate([GenerationRequest(vision_messages(first), sampling=sampling)])
            conversation = vision_messages(first) + [
                {"role": "assistant", "content": turn1.text},
                {
                    "role": "user",
                    "content": [{"type": "image", "image": second}, {"type": "text", "text": "Step 2"}],
                },
            ]
            prefix = turn1.prompt_ids + turn1.completion_ids
            [turn2] = await backend.generate(
                [GenerationRequest(conversation, sampling=sampling, prefix_ids=prefix)]
            )
        finally:
            await backend.aclose()

    # turn 1: the exact ids the processor makes, one run of image tokens as long as the image needs
    expected = processor.apply_chat_template(
        vision_messages(first), add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    expected = list(expected[0] if isinstance(expected[0], list) else expected)
    assert turn1.prompt_ids == expected
    assert (turn1.completion_ids, turn1.text) == (action_ids, "click('13')")
    assert turn1.logprobs == pytest.approx([-0.1 * (k + 1) for k in range(len(action_ids))])
    assert image_field(turn1, "image_token_counts") == [placeholder_count(processor, first)]
    assert (
        image_field(turn1, "images") == [first]
        and image_field(turn1, "image_token_id") == processor.image_token_id
    )

    # turn 2: extends turn 1's tokens exactly; the server processed both screenshots, in order
    assert turn2.prompt_ids[: len(prefix)] == prefix
    runs = image_token_runs(turn2.prompt_ids, processor.image_token_id)
    assert [n for _, n in runs] == [placeholder_count(processor, first), placeholder_count(processor, second)]
    assert image_field(turn2, "images") == [second] and image_field(turn2, "image_token_counts") == [
        runs[1][1]
    ]
    assert [[im.size for im in r] for r in stub.renders] == [[first.size], [first.size, second.size]]
    assert [g["token_ids"] for g in stub.generates] == [turn1.prompt_ids, turn2.prompt_ids]
    params = stub.generates[0]["sampling_params"]
    assert (params["temperature"], params["max_tokens"], params["seed"]) == (0.7, 8, 3)


async def test_trl_vllm_backend_refuses_a_processor_that_disagrees_with_the_server(processor):
    stub = VLLMStub(processor, [5], lie_about_length=True)
    with serve(stub.app) as url:
        backend = TRLVLLMBackend(url, processor=processor, retry=FAST_RETRY)
        try:
            with pytest.raises(BackendError, match="the processor does not match the served model"):
                await backend.generate([GenerationRequest(vision_messages(screenshot()))])
        finally:
            await backend.aclose()
    assert stub.generates == []  # nothing generated from misaligned pixels


async def test_trl_vllm_backend_says_how_to_enable_render(processor):
    stub = VLLMStub(processor, [5], no_render=True)
    with serve(stub.app) as url:
        backend = TRLVLLMBackend(url, processor=processor, retry=FAST_RETRY)
        try:
            with pytest.raises(BackendError, match="--enable-scale-out"):
                await backend.generate([GenerationRequest(vision_messages(screenshot()))])
        finally:
            await backend.aclose()


async def test_trl_vllm_backend_refuses_images_on_the_old_generate_api(processor):
    backend = TRLVLLMBackend("http://127.0.0.1:9/generate/", processor=processor)
    try:
        with pytest.raises(ImagesNotSupportedError, match="need a TRL 1.x server"):
            await backend.generate([GenerationRequest(vision_messages(screenshot()))])
    finally:
        await backend.aclose()


async def test_trl_vllm_backend_needs_a_processor_for_images():
    from envharness.models.embedded import tiny_test_model

    _, tokenizer = tiny_test_model()  # a text tokenizer where the processor should be
    backend = TRLVLLMBackend(
        "http://127.0.0.1:9", tokenizer, api="completions", model="m", processor=tokenizer
    )
    try:
        with pytest.raises(
            ImagesNotSupportedError, match="has no image processor; pass the model's processor"
        ):
            await backend.generate([GenerationRequest(vision_messages(screenshot()))])
    finally:
        await backend.aclose()


# -- backends without vision ------------------------------------------------------------------------
async def test_text_backends_refuse_images_in_words():
    from envharness.models.embedded import tiny_test_model
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = tiny_test_model()
    for backend in (ScriptedBackend(), TransformersBackend(model, tokenizer, name="tiny-text")):
        with pytest.raises(
            ImagesNotSupportedError, match=f"'{backend.name}' has no vision but the prompt holds images"
        ):
            await backend.generate([GenerationRequest(vision_messages(screenshot()))])


async def test_trl_vllm_backend_says_when_the_processor_cannot_load(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub here: fail on the spot
    backend = TRLVLLMBackend(
        "http://127.0.0.1:9", api="completions", model="m", processor=str(tmp_path / "no-such-model")
    )
    try:
        with pytest.raises(
            ImagesNotSupportedError, match="could not load the processor of .*no-such-model.*pass processor="
        ):
            await backend.generate([GenerationRequest(vision_messages(screenshot()))])
    finally:
        await backend.aclose()
