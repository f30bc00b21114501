"""The policy endpoint's one operation: a chat completion for a rollout, recorded exactly.

`PolicyEndpoint.complete(rollout_id, body)` validates the OpenAI request (`wire.py`), works
out which exact tokens it continues (`forks.py`), checks the context length, samples through
the backend's batcher (`BatchingModelStep`: concurrent rollouts share one `generate` call;
a lone call goes at once), records the `Turn` and answers in OpenAI's form. Tool calls are
read from the model's text with the harness's JSON tool-call parser and returned only for
functions the request offered. The HTTP routes (`app.py`) and in-process callers share it.

`sampling` (a trainer's settings) overrides what agents ask for: GRPO's loss recomputes
logprobs at the trainer's temperature, so the tokens must be sampled at it too.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from envharness.core.concurrency import run_sync
from envharness.harness.model_step import BatchingModelStep
from envharness.harness.tool_parsing import ToolCallParser, normalize_parsed, parse_json_tool_calls
from envharness.models import chat
from envharness.models.base import GenerationRequest, ModelBackend, SamplingParams
from envharness.models.images import message_text
from envharness.policy import errors
from envharness.policy.forks import continuation, fork_size
from envharness.policy.images import backend_messages
from envharness.policy.limits import PolicyLimits
from envharness.policy.prompt_size import fewest_tokens, max_chars_per_token
from envharness.policy.traces import RolloutTrace, TraceStore, Turn
from envharness.policy.wire import ChatRequest, completion_body, tool_call_json

#: Template tokens a message may add beyond one token per byte of its text (a safe bound
#: for byte-level tokenizers; prompts near the limit are tokenized to know exactly).
_TEMPLATE_SLACK_PER_MESSAGE = 32


def backend_context_length(backend: Any) -> int | None:
    """The model's context window, when the backend's model says (`max_position_embeddings`)."""
    config = getattr(getattr(backend, "model", None), "config", None)
    config = getattr(config, "text_config", None) or config
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


class PolicyEndpoint:
    """Chat completions from `backend`, recorded per rollout in `store`."""

    def __init__(
        self,
        backend: ModelBackend,
        *,
        store: TraceStore | None = None,
        model_name: str | None = None,
        context_length: int | None = None,
        sampling: dict[str, Any] | None = None,
        default_max_tokens: int = 256,
        tool_call_parser: ToolCallParser = parse_json_tool_calls,
        limits: PolicyLimits | None = None,
    ) -> None:
        self.store = store or TraceStore()
        self.limits = limits or PolicyLimits()
        self.model_name = model_name or getattr(backend, "name", "policy")
        self.context_length = context_length or backend_context_length(backend)
        self.sampling = dict(sampling or {})
        self.default_max_tokens = default_max_tokens
        self.tool_call_parser = tool_call_parser
        #: Set once the server stops: calls in flight end at their next token, new ones are refused.
        self.stopping = False
        self._in_flight: set[threading.Event] = set()
        self.set_backend(backend)

    @property
    def generating(self) -> int:
        """Calls whose reply is being generated now."""
        return len(self._in_flight)

    def stop_generating(self) -> None:
        """Stop every generation in flight (at its next token) and refuse new calls: a server
        that is asked to stop does not wait for a long reply nobody will read."""
        self.stopping = True
        for cancel in list(self._in_flight):
            cancel.set()

    def set_backend(self, backend: ModelBackend) -> None:
        """Serve another backend from now on (a trainer's model after its weights moved)."""
        self.backend = backend
        self.batcher = BatchingModelStep(backend, max_wait_s=0.0)

    def _max_tokens(self, request: ChatRequest) -> tuple[int, bool]:
        """The reply's token budget, and whether the request asked for it (a default is cut to
        fit the context; an asked-for length that does not fit is refused, as OpenAI does)."""
        asked = request.max_completion_tokens or request.max_tokens
        limit = self.limits.max_tokens_limit
        if asked is not None and asked > limit:
            raise errors.reply_too_long(asked, limit)
        max_tokens = min(asked or self.default_max_tokens, limit)
        if self.sampling.get("max_tokens"):
            max_tokens = min(max_tokens, int(self.sampling["max_tokens"]))
        return max_tokens, asked is not None

    def _sampling(self, request: ChatRequest, max_tokens: int, cancel: threading.Event) -> SamplingParams:
        forced = self.sampling
        return SamplingParams(
            temperature=float(
                forced.get("temperature", 1.0 if request.temperature is None else request.temperature)
            ),
            top_p=float(forced.get("top_p", 1.0 if request.top_p is None else request.top_p)),
            top_k=int(forced.get("top_k", 0) or 0),
            max_tokens=max_tokens,
            stop=request.stops(),
            seed=request.seed,
            cancelled=cancel,
        )

    @property
    def prompt_limit(self) -> int | None:
        """The most tokens a prompt may have: `limits.max_prompt_tokens`, and room for one
        token of reply in the context."""
        bounds = [self.limits.max_prompt_tokens, self.context_length and self.context_length - 1]
        return min((b for b in bounds if b), default=None)

    def _refuse_by_length(self, messages: list[dict[str, Any]], prefix: list[int] | None) -> None:
        """Refuse, untokenized, a prompt whose characters alone prove it over the limit."""
        limit, tokenizer = self.prompt_limit, getattr(self.backend, "tokenizer", None)
        per_token = max_chars_per_token(tokenizer) if limit is not None and tokenizer is not None else None
        if per_token is None:
            return
        fewest = fewest_tokens(messages, prefix, per_token)
        if fewest > limit:  # type: ignore[operator]
            why = f"no token of this model covers more than {per_token} characters"
            raise errors.prompt_too_long(fewest, limit, at_least=True, why=why)  # type: ignore[arg-type]

    def _check_context(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        prefix: list[int] | None,
        start: int,
        budget: tuple[int, bool],
    ) -> int:
        """Refuse a prompt over the prompt limit, or that with its reply does not fit the context;
        cheap unless the prompt is near them (then tokenized: call it in a worker thread).
        Returns the reply's budget (a default one cut to what is left)."""
        max_tokens, asked = budget
        limit, most = self.context_length, self.prompt_limit
        if most is None:
            return max_tokens
        new = messages[start:]
        bound = len(prefix or []) + sum(
            len(message_text(m).encode()) + _TEMPLATE_SLACK_PER_MESSAGE for m in new
        )
        if tools and not prefix:
            bound += len(str(tools).encode())
        if bound <= most and (limit is None or bound + max_tokens <= limit):
            return max_tokens
        tokenizer = getattr(self.backend, "tokenizer", None)
        if tokenizer is None or getattr(tokenizer, "accepts_images", False):
            return max_tokens  # checked on the tokens the backend returns
        try:
            count = len(chat.prompt_ids(tokenizer, messages, tools, prefix))
        except (ValueError, TypeError) as exc:
            raise errors.invalid(str(exc), "messages") from None
        self._check_prompt(count)
        if limit is None:
            return max_tokens
        if count + max_tokens > limit:
            if asked:
                raise errors.context_exceeded(count, limit, max_tokens)
            return limit - count
        return max_tokens

    def _check_prompt(self, count: int) -> None:
        """Refuse a prompt of `count` tokens over the context or `max_prompt_tokens`."""
        if self.context_length is not None and count >= self.context_length:
            raise errors.context_exceeded(count, self.context_length)
        most = self.limits.max_prompt_tokens
        if most is not None and count > most:
            raise errors.prompt_too_long(count, most)

    async def complete(self, rollout_id: str | None, body: Any) -> dict[str, Any]:
        """One chat completion for `rollout_id`; raises `PolicyError` with the OpenAI-style reason.
        Cancelling the call stops its generation at the next token and records nothing."""
        if not rollout_id:
            raise errors.missing_rollout()
        if self.stopping:
            raise errors.shutting_down()
        request = ChatRequest.parse(body)
        trace = self.store.live(rollout_id)
        trace.last_active = time.monotonic()
        self.limits.check_calls(len(trace.turns), rollout_id)
        tools = [t.model_dump(exclude_none=True) for t in request.tools] if request.tools else None
        cont = continuation(trace, request.messages)
        start = len(cont.parent.messages) + 1 if cont.parent is not None else 0
        messages = backend_messages(cont.messages, trace.image_cache)
        budget = self._max_tokens(request)
        self._refuse_by_length(messages[start:], cont.prefix_ids)
        max_tokens = await run_sync(self._check_context, messages, tools, cont.prefix_ids, start, budget)
        cancel = threading.Event()
        sampling = self._sampling(request, max_tokens, cancel)
        self._in_flight.add(cancel)
        try:
            gen = await self.batcher.generate(GenerationRequest(messages, tools, sampling, cont.prefix_ids))
        except (ValueError, TypeError) as exc:
            raise errors.invalid(f"the model cannot take this request: {exc}", "messages") from None
        except Exception as exc:
            raise errors.backend_failed(exc) from None
        finally:
            cancel.set()  # a cancelled call's rows stop at their next token; a finished one: no-op
            self._in_flight.discard(cancel)
        if gen.finish_reason == "cancelled":
            raise errors.shutting_down()
        self._check_prompt(len(gen.prompt_ids))
        turn = self._record(trace, request, tools, cont.parent, gen, sampling)
        trace.last_active = time.monotonic()
        return completion_body(
            request,
            completion_id=f"chatcmpl-{rollout_id}-{turn.index}",
            model=request.model or self.model_name,
            text=gen.text,
            tool_calls=turn.tool_calls,
            finish_reason=gen.finish_reason,
            prompt_ids=turn.prompt_ids,
            completion_ids=turn.completion_ids,
            logprobs=turn.logprobs,
            extra={
                "rollout_id": rollout_id,
                "turn": turn.index,
                "fork": turn.fork,
                "fork_tokens": turn.fork_tokens,
            },
        )

    def _record(
        self,
        trace: RolloutTrace,
        request: ChatRequest,
        tools: list[dict[str, Any]] | None,
        parent: Turn | None,
        gen: Any,
        sampling: SamplingParams,
    ) -> Turn:
        if trace.ended:  # ended while this call was sampling: the driver has taken the trace
            raise errors.ended_rollout(trace.rollout_id)
        index = len(trace.turns)
        offered = {t["function"]["name"] for t in tools or []}
        calls = (
            [c for c in normalize_parsed(self.tool_call_parser(gen.text)) if c.name in offered]
            if offered
            else []
        )
        dropped = fork_size(trace, gen.prompt_ids)
        turn = Turn(
            index=index,
            messages=request.messages,
            tools=tools,
            prompt_ids=list(gen.prompt_ids),
            completion_ids=list(gen.completion_ids),
            logprobs=[float(x) for x in gen.logprobs],
            text=gen.text,
            tool_calls=[
                tool_call_json(f"call_{trace.rollout_id[:12]}_{index}_{i}", c.name, c.args)
                for i, c in enumerate(calls)
            ],
            finish_reason=gen.finish_reason,
            parent=parent.index if parent is not None else None,
            fork=index > 0 and dropped > 0,
            fork_tokens=dropped,
            sampling={
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
                "max_tokens": sampling.max_tokens,
            },
            images=list(gen.images),
            image_token_counts=list(gen.image_token_counts),
            image_token_id=gen.image_token_id,
        )
        trace.turns.append(turn)
        return turn
