"""TRL's generation server as a `ModelBackend`: exact prompt ids, completion ids, logprobs.

The chat template is rendered and tokenized here, with the model's own tokenizer, so
multi-turn prompts extend `prefix_ids` exactly. Two server generations are spoken:

- TRL >= 1.x: `trl vllm-serve` runs vLLM's own server (with `--logprobs-mode
  processed_logprobs`); TRL's `VLLMClient.generate` posts token-id prompts to
  `/v1/completions` with `return_token_ids` and `return_tokens_as_token_ids`, and
  checks `GET /health`. This is `api="completions"`.
- TRL 0.2x: `trl vllm-serve` was TRL's own FastAPI app: `GET /health/`,
  `POST /generate/` with `{"prompts": [text], "n", "temperature", "top_p", "top_k",
  "min_p", "repetition_penalty", "max_tokens", "generation_kwargs"}` answering
  `{"prompt_ids", "completion_ids", "logprobs"}` (what the BrowserGym GRPO script calls).
  This is `api="generate"`; prompts travel as text, so the server re-tokenizes them.

`api="auto"` (the default) picks `generate` for a URL ending in `/generate/`, otherwise
asks `GET /v1/models` and falls back to `generate` when the server has no such route.

Requests with image parts (`models/images.py`) need a TRL 1.x server and the model's
`processor`: they go token-in/token-out with the images' server-side features
(`models/vllm_images.py`: render, then `/inference/v1/generate`), one request each.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import httpx

from envharness.models import chat
from envharness.models.base import Generation, GenerationRequest, SamplingParams
from envharness.models.http import BackendError, RetryPolicy, request_json
from envharness.models.images import ImagesNotSupportedError, has_images


class TRLVLLMBackend:
    """`await backend.generate([GenerationRequest])` against a TRL/vLLM generation server."""

    def __init__(
        self,
        url: str,
        tokenizer: Any = None,
        *,
        api: str = "auto",
        model: str | None = None,
        timeout_s: float = 300.0,
        retry: RetryPolicy | None = None,
        processor: Any = None,
    ):
        """`processor`: the model's processor (object, or path / hub id), needed for images."""
        if api not in ("auto", "completions", "generate"):
            raise ValueError(f"api must be 'auto', 'completions' or 'generate', not {api!r}")
        path = urlsplit(url).path.rstrip("/")
        if path.endswith("/generate"):
            url, api = url.rstrip("/")[: -len("/generate")], "generate"
        self.base_url = url.rstrip("/")
        self.api = api
        self.model = model
        self.name = f"trl-vllm:{self.base_url}"
        self.retry = retry or RetryPolicy()
        self._tokenizer = tokenizer
        self._processor = processor
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self._ready = asyncio.Lock()

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        """Requests with equal sampling settings go to the server as one batch."""
        await self._connect()
        seeing = [i for i, r in enumerate(requests) if has_images(r.messages)]
        if seeing and self.api != "completions":
            raise ImagesNotSupportedError(
                "prompts with images need a TRL 1.x server (`trl vllm-serve` / `vllm serve --enable-scale-out`); "
                f"the server at {self.base_url} speaks the old /generate/ API, which re-tokenizes text prompts"
            )
        out: list[Generation | None] = [None] * len(requests)
        text_only = [i for i in range(len(requests)) if i not in seeing]
        tokenizer = self.tokenizer if text_only else None
        prompts = {
            i: chat.prompt_ids(tokenizer, requests[i].messages, requests[i].tools, requests[i].prefix_ids)
            for i in text_only
        }
        groups: dict[tuple, list[int]] = {}
        for i in prompts:
            groups.setdefault(_sampling_key(requests[i].sampling), []).append(i)
        send = self._completions if self.api == "completions" else self._generate_legacy
        results = await asyncio.gather(
            *(send([prompts[i] for i in idx], requests[idx[0]].sampling) for idx in groups.values()),
            *(self._generate_with_images(requests[i]) for i in seeing),
        )
        for idx, gens in zip(groups.values(), results):
            for i, gen in zip(idx, gens):
                out[i] = gen
        for i, gen in zip(seeing, results[len(groups) :]):
            out[i] = gen
        return out  # type: ignore[return-value]

    @property
    def processor(self) -> Any:
        """The model's processor (loaded from `processor`, the tokenizer's source or the model name)."""
        if self._processor is None or isinstance(self._processor, str):
            from transformers import AutoProcessor

            source = (
                self._processor
                or (self._tokenizer if isinstance(self._tokenizer, str) else None)
                or self.model
            )
            if not source:
                raise ImagesNotSupportedError(
                    "TRLVLLMBackend needs the model's processor (processor=...) for prompts with images"
                )
            try:
                self._processor = AutoProcessor.from_pretrained(source)
            except (OSError, ImportError, ValueError, TypeError) as exc:
                raise ImagesNotSupportedError(
                    f"could not load the processor of {source!r}, which prompts with images need ({type(exc).__name__}: "
                    f"{str(exc)[:200]}); pass processor=... (an object or a directory)"
                ) from exc
        if not hasattr(self._processor, "image_processor"):
            raise ImagesNotSupportedError(
                f"{type(self._processor).__name__} has no image processor; pass the model's processor for images"
            )
        return self._processor

    async def _generate_with_images(self, request: GenerationRequest) -> Generation:
        from envharness.models import vllm_images

        processor = self.processor
        prompt = vllm_images.image_prompt(processor, request)
        return await vllm_images.generate_with_images(
            self._client,
            self.base_url,
            self.model,
            prompt,
            _vllm_sampling(request.sampling),
            getattr(processor, "tokenizer", processor),
            self.retry,
        )

    @property
    def tokenizer(self) -> Any:
        """The tokenizer that renders prompts (loaded from the served model's name if not given)."""
        if self._tokenizer is None and self._processor is not None and not isinstance(self._processor, str):
            self._tokenizer = getattr(self._processor, "tokenizer", self._processor)
        if self._tokenizer is None or isinstance(self._tokenizer, str):
            from transformers import AutoTokenizer

            source = self._tokenizer or self.model
            if not source:
                raise ValueError(
                    "TRLVLLMBackend needs a tokenizer (object, path or hub id) for a /generate/ server"
                )
            self._tokenizer = AutoTokenizer.from_pretrained(source)
        return self._tokenizer

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _connect(self) -> None:
        """Find out which API the server speaks (once), and check that it is up."""
        async with self._ready:
            if self.api != "auto" and (self.api == "generate" or self.model):
                return
            try:
                models = await request_json(
                    self._client, "GET", f"{self.base_url}/v1/models", retry=self.retry
                )
            except BackendError as exc:
                if exc.status != 404 or self.api == "completions":
                    raise
                await request_json(self._client, "GET", f"{self.base_url}/health/", retry=self.retry)
                self.api = "generate"
                return
            self.api = "completions"
            self.model = self.model or models["data"][0]["id"]

    async def _completions(self, prompts: list[list[int]], s: SamplingParams) -> list[Generation]:
        payload: dict[str, Any] = {
            "model": self.model,
            "prompt": prompts,
            "n": 1,
            **_vllm_sampling(s),
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        data = await request_json(
            self._client, "POST", f"{self.base_url}/v1/completions", json=payload, retry=self.retry
        )
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise BackendError(f"server returned {len(choices)} completions for {len(prompts)} prompts")
        return [
            Generation(
                text=c.get("text") or "",
                prompt_ids=list(c.get("prompt_token_ids") or p),
                completion_ids=list(c["token_ids"]),
                logprobs=[float(lp) for lp in (c.get("logprobs") or {}).get("token_logprobs") or []],
                finish_reason="length" if c.get("finish_reason") == "length" else "stop",
                metadata={"stop": c["stop_reason"]} if isinstance(c.get("stop_reason"), str) else {},
            )
            for c, p in zip(choices, prompts)
        ]

    async def _generate_legacy(self, prompts: list[list[int]], s: SamplingParams) -> list[Generation]:
        tokenizer = self.tokenizer
        sampling = _vllm_sampling(s)
        payload = {
            "prompts": [tokenizer.decode(p, skip_special_tokens=False) for p in prompts],
            "n": 1,
            **{
                k: sampling.pop(k)
                for k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_tokens")
            },
            "generation_kwargs": sampling,  # stop, include_stop_str_in_output, seed: vLLM SamplingParams fields
        }
        if payload["top_k"] == 0:
            payload["top_k"] = -1  # the 0.2x servers spell "off" as -1
        data = await request_json(
            self._client, "POST", f"{self.base_url}/generate/", json=payload, retry=self.retry
        )
        out = []
        for prompt, ids, lps in zip(data["prompt_ids"], data["completion_ids"], data["logprobs"]):
            text = tokenizer.decode(ids, skip_special_tokens=True)
            ended = bool(ids) and ids[-1] == tokenizer.eos_token_id or any(x in text for x in s.stop)
            out.append(
                Generation(
                    text=text,
                    prompt_ids=list(prompt),
                    completion_ids=list(ids),
                    logprobs=[float(lp) for lp in lps],
                    finish_reason="stop" if ended or len(ids) < s.max_tokens else "length",
                )
            )
        return out


def _sampling_key(s: SamplingParams) -> tuple:
    return (s.temperature, s.top_p, s.top_k, s.max_tokens, tuple(s.stop), s.seed)


def _vllm_sampling(s: SamplingParams) -> dict[str, Any]:
    """Our sampling settings as vLLM `SamplingParams` fields (what TRL's client sends)."""
    params: dict[str, Any] = {
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "max_tokens": s.max_tokens,
    }
    if s.stop:
        params.update(stop=list(s.stop), include_stop_str_in_output=True)
    if s.seed is not None:
        params["seed"] = s.seed
    return params
