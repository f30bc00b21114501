"""Which model answers an Eval Protocol rollout, as one envharness `ModelBackend`.

`OpenEnvRolloutProcessor(model=...)` takes a backend or a spec (`load_backend`'s:
`embedded`, `scripted`, a model directory, `openai:MODEL@URL`, `trl-vllm:URL`). Without
one it reads `completion_params["model"]` as Eval Protocol does: `embedded`, `scripted` or
`envharness:<spec>` select an envharness backend, anything else goes through LiteLLM
(Eval Protocol's `LiteLLMPolicy`, or your `policy_factory`), with LiteLLM's response cache
only at temperature 0 -- a cached answer would give every member of a GRPO group the
same completion.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from envharness.core.registry import DEFAULT_ENV
from envharness.models import load_backend
from envharness.models.base import Generation, GenerationRequest, ModelBackend, SamplingParams

ENVHARNESS_PREFIX = "envharness:"
_ENVHARNESS_NAMES = frozenset({"embedded", "scripted"})
#: completion_params keys the processor itself consumes (never forwarded to LiteLLM).
_PROCESSOR_KEYS = ("model", "temperature", "max_tokens", "base_url", "system_prompt")


def sampling_from_completion_params(params: dict[str, Any]) -> SamplingParams:
    """Eval Protocol's completion params as envharness sampling (defaults as the original
    processor's: temperature 0, 100 tokens)."""
    data = {k: params.get(k) for k in ("top_p", "top_k", "seed")}
    data["temperature"] = float(params.get("temperature") or 0.0)
    data["max_tokens"] = params.get("max_tokens") or 100
    stop = params.get("stop")
    if stop:
        data["stop"] = [stop] if isinstance(stop, str) else list(stop)
    return SamplingParams.from_dict(data)


def envharness_spec(model_name: str | None) -> str | None:
    """The envharness backend spec a completion_params model names, or None for LiteLLM."""
    if not model_name:
        return None
    if model_name.startswith(ENVHARNESS_PREFIX):
        return model_name.removeprefix(ENVHARNESS_PREFIX)
    return model_name if model_name in _ENVHARNESS_NAMES else None


class PolicyBackend:
    """A LiteLLM-style policy (`await policy._make_llm_call(messages, tools)` -> OpenAI dict)
    as a `ModelBackend`. Token ids are kept when the response carries them."""

    def __init__(self, policy: Any, name: str):
        self.policy = policy
        self.name = name

    async def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Generation:
        response = await self.policy._make_llm_call(messages=request.messages, tools=[])
        choice = response["choices"][0]
        gen = Generation(
            text=choice["message"].get("content") or "", finish_reason=choice.get("finish_reason") or "stop"
        )
        gen.metadata["usage"] = dict(response.get("usage") or {})
        if response.get("prompt_ids") and response.get("completion_ids"):
            gen.prompt_ids = list(response["prompt_ids"])
            gen.completion_ids = list(response["completion_ids"])
            gen.logprobs = list(response.get("logprobs") or [])
        return gen

    async def aclose(self) -> None:
        """LiteLLM keeps no per-policy resources."""


def litellm_policy_backend(
    params: dict[str, Any], policy_factory: Callable[..., Any] | None
) -> PolicyBackend:
    """The original processor's model path: LiteLLM (or `policy_factory`) on `params["model"]`."""
    from eval_protocol.pytest.utils import normalize_fireworks_model_for_litellm

    params = normalize_fireworks_model_for_litellm(params) or {}
    model = params.get("model") or "gpt-4o-mini"
    temperature = float(params.get("temperature") or 0.0)
    extra = {k: v for k, v in params.items() if k not in _PROCESSOR_KEYS}
    common = dict(
        model=model,
        temperature=temperature,
        max_tokens=params.get("max_tokens", 100),
        base_url=params.get("base_url"),
    )
    if policy_factory is not None:
        return PolicyBackend(policy_factory(**common, **extra), name=str(model))
    from eval_protocol.mcp.execution.policy import LiteLLMPolicy

    caching = temperature == 0.0
    extra["caching"] = caching  # per request; LiteLLMPolicy otherwise always asks for the cache
    common["model_id"] = common.pop("model")
    return PolicyBackend(LiteLLMPolicy(**common, use_caching=caching, **extra), name=str(model))


class ModelResolver:
    """Builds each distinct model once per processor (the embedded model takes seconds to
    load: in a worker thread, so the event loop keeps running) and closes them at the end."""

    def __init__(
        self,
        model: ModelBackend | str | None,
        policy_factory: Callable[..., Any] | None = None,
        env: str | None = None,
    ):
        if model is not None and not isinstance(model, (str, ModelBackend)):
            raise TypeError(
                f"model must be an envharness ModelBackend or a spec string, not {type(model).__name__}"
            )
        self.model = model
        self.policy_factory = policy_factory
        #: The environment whose scripted policy `scripted` plays (the client's `env_name`).
        self.env = env or DEFAULT_ENV
        self._backends: dict[Any, ModelBackend] = {}
        self._lock: asyncio.Lock | None = None

    def key(self, params: dict[str, Any]) -> Any:
        """Rows with equal keys share a backend (and its batching)."""
        if isinstance(self.model, ModelBackend):
            return ("backend", id(self.model))
        spec = self.model if isinstance(self.model, str) else envharness_spec(params.get("model"))
        if spec is not None:
            return ("spec", spec)
        return ("litellm", repr(sorted((k, repr(v)) for k, v in params.items())))

    async def backend(self, params: dict[str, Any]) -> ModelBackend:
        if isinstance(self.model, ModelBackend):
            return self.model
        key = self.key(params)
        if key in self._backends:
            return self._backends[key]
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if key not in self._backends:
                if key[0] == "spec":
                    options = {"env": self.env} if key[1] == "scripted" else {}
                    self._backends[key] = await asyncio.to_thread(
                        functools.partial(load_backend, key[1], **options)
                    )
                else:
                    self._backends[key] = litellm_policy_backend(params, self.policy_factory)
            return self._backends[key]

    async def aclose(self) -> None:
        backends, self._backends, self._lock = list(self._backends.values()), {}, None
        for backend in backends:
            await backend.aclose()
