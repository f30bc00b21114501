"""Model steps: how a harness samples the next model turn.

A model step is OpenEnv's callable `model_step(messages, tools, sampling) -> ModelStepResult`,
sync (run in a worker thread) or async. `BatchingModelStep` builds them on a `ModelBackend`:
every episode gets its own step (`for_episode()`, which remembers that episode's exact
tokens so the backend only tokenizes new messages), and the steps of all waiting episodes
are served by ONE `backend.generate(batch)` call. A batch is sent as soon as every live
episode is waiting (or `max_wait_s` after its first request, so one slow environment does
not stall the rest); while it generates, new requests queue up for the next batch. A backend
that batches continuously (`backend.continuous`, e.g. `TransformersBackend`) gets a request at
once while it decodes others of this batcher: it joins the rows being decoded and returns at its
own last token. With nothing decoding, the first request waits as a batch does for the live
episodes, at most 20 ms, or, where no episode's environment waits on another's model turn
(`independent_episodes`: not a game's seats), as long as the backend asks (`backend.idle_wait_s`;
on a CPU up to half a second). The turns of a step's episodes then start as one prefill and
decode in step, instead of one episode ahead and the others prefilled and merged after it.
A backend error fails the episodes of its batch, or only the offending one when the
backend refused a request (ValueError/TypeError: the batch is retried request by
request); a cancelled episode simply drops out of its batch. No request is left hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Iterator
from typing import Any, Protocol

from envharness.core.concurrency import run_sync
from envharness.harness.session import create_session
from envharness.harness.tool_parsing import ToolCallParser, normalize_parsed, parse_json_tool_calls
from envharness.harness.tools import as_mcp_dict
from envharness.harness.types import LLMResponse, Message, ModelStepResult, Tool
from envharness.models.base import Generation, GenerationRequest, ModelBackend, SamplingParams

#: How long the first request to an idle continuous backend waits for the other live episodes
#: (for independent episodes, what the backend asks: `backend.idle_wait_s`).
IDLE_CONTINUOUS_WAIT_S = 0.02
#: How long a batch waits for the live episodes where `max_wait_s` is not given.
DEFAULT_WAIT_S = 0.02


class ModelStep(Protocol):
    """Samples one model turn. May be sync or `async def`."""

    def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult: ...


def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        type(fn).__call__ if callable(fn) else None
    )


async def call_model_step(
    step: Any, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
) -> ModelStepResult:
    """Await an async step; run a sync one in a worker thread (it may block on a trainer)."""
    if _is_async_callable(step):
        result = await step(messages, tools, sampling)
    else:
        result = await run_sync(step, messages, tools, sampling)
        if inspect.isawaitable(result):
            result = await result
    if not isinstance(result, ModelStepResult):
        raise TypeError(f"model step returned {type(result).__name__}, expected ModelStepResult")
    return result


class BatchingModelStep:
    """Groups the concurrent model steps of many episodes into batched `backend.generate` calls.

    `tool_call_parser(text)` turns the model's text into tool calls (default: JSON tool calls;
    an environment's own is its `EnvHarness.tool_call_parser`). `max_batch_size` caps one call;
    `max_wait_s` bounds how long a batch waits for live episodes still busy in their
    environment (0: send whoever is waiting now). `independent_episodes=True` says that no
    episode's environment call waits on another episode's model turn (single-agent episodes;
    not the seats of one game): an idle continuous backend's first request may then wait for
    them as long as the backend asks (`backend.idle_wait_s`), within `max_wait_s` when it is
    given. `send_tools=False` keeps tool specs out of
    the chat template (for text-action prompts).
    """

    def __init__(
        self,
        backend: ModelBackend,
        *,
        tool_call_parser: ToolCallParser = parse_json_tool_calls,
        max_batch_size: int | None = None,
        max_wait_s: float | None = None,
        send_tools: bool = True,
        independent_episodes: bool = False,
    ):
        self.backend = backend
        self.tool_call_parser = tool_call_parser
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.independent_episodes = independent_episodes
        self.send_tools = send_tools
        self.batch_sizes: list[int] = []  # one entry per backend call, for stats and tests
        self._pending: list[
            tuple[GenerationRequest, asyncio.Future, float]
        ] = []  # (request, future, queued at)
        self._worker: asyncio.Task | None = None
        self._changed: asyncio.Event | None = None
        self._in_flight: list[tuple[GenerationRequest, asyncio.Future]] = []  # the batch being generated
        self._live = 0  # episodes between for_episode() and their step's close(), or arriving()
        #: A backend that batches continuously takes each request as it comes while it decodes
        #: (no batch waits for the one before it); only an idle one waits for the live episodes.
        self._continuous = bool(getattr(backend, "continuous", False))
        self._serving: set[asyncio.Task] = set()

    async def generate(self, request: GenerationRequest) -> Generation:
        """Queue one request; resolves when the batch holding it has been generated."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._pending.append((request, future, loop.time()))
        if self._worker is None or self._worker.done():
            self._changed = asyncio.Event()  # bound to this loop (each rollout_func call has its own)
            self._worker = asyncio.create_task(self._drain())
        self._notify()
        return await future

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _waiting(self) -> int:
        return sum(1 for _, fut, _ in self._pending if not fut.done())

    def _wait_bound(self) -> float:
        """`max_wait_s` (20 ms when not given); for a continuous backend, which is idle when this
        is asked, at most 20 ms, or what it asks for independent episodes: a late episode joins
        the decoding rows anyway, at the cost of one more prefill."""
        if not self._continuous:
            return DEFAULT_WAIT_S if self.max_wait_s is None else self.max_wait_s
        asked = IDLE_CONTINUOUS_WAIT_S
        if self.independent_episodes:
            asked = getattr(self.backend, "idle_wait_s", IDLE_CONTINUOUS_WAIT_S)
        return asked if self.max_wait_s is None else min(self.max_wait_s, asked)

    async def _wait_for_live_episodes(self) -> None:
        """Until every live episode is waiting, or `_wait_bound()` after the oldest request."""
        loop = asyncio.get_running_loop()
        bound = self._wait_bound()
        await asyncio.sleep(0)  # whoever is ready in this tick joins at no cost
        while (
            self._pending
            and self._waiting() < self._live
            and (remaining := self._pending[0][2] + bound - loop.time()) > 0
        ):
            assert self._changed is not None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return

    async def _drain(self) -> None:
        try:
            await self._drain_batches()
        except BaseException as exc:  # cancelled or broken: nobody may wait forever on a dead worker
            stranded = [fut for _, fut in self._in_flight] + [fut for _, fut, _ in self._pending]
            self._pending, self._in_flight = [], []
            for fut in stranded:
                if not fut.done():
                    fut.set_exception(
                        RuntimeError(f"model step batcher stopped: {type(exc).__name__}: {exc}")
                    )
            raise

    async def _drain_batches(self) -> None:
        while self._pending:
            if self._continuous and self._serving:
                await asyncio.sleep(0)  # whoever is ready in this tick joins the rows decoding
            else:
                await self._wait_for_live_episodes()
            size = self.max_batch_size or len(self._pending)
            batch, self._pending = self._pending[:size], self._pending[size:]
            batch = [(req, fut) for req, fut, _ in batch if not fut.done()]  # drop cancelled episodes
            if not batch:
                continue
            if self._continuous:  # the backend merges it into the rows decoding now
                task = asyncio.create_task(self._serve(batch))
                self._serving.add(task)
                task.add_done_callback(self._serving.discard)
                continue
            self._in_flight = batch
            await self._serve(batch)
            self._in_flight = []

    async def _serve(self, batch: list[tuple[GenerationRequest, asyncio.Future]]) -> None:
        """One backend call for `batch`; every future gets its generation or the error.

        A ValueError/TypeError means a bad request (e.g. a conversation the tokenizer refuses),
        not a broken backend: the requests are then retried one by one, so that only the bad
        one fails. Any other error fails the whole batch (retrying a dead server n times would
        only multiply the wait)."""
        self.batch_sizes.append(len(batch))
        try:
            generations = await self.backend.generate([req for req, _ in batch])
            if len(generations) != len(batch):
                raise RuntimeError(
                    f"backend returned {len(generations)} generations for {len(batch)} requests"
                )
        except (ValueError, TypeError) as exc:
            if len(batch) == 1:
                return _settle(batch, exc)
            for item in batch:
                if not item[1].done():
                    await self._serve([item])
            return None
        except Exception as exc:  # every episode in the batch learns why; none hangs
            return _settle(batch, exc)
        for (_, fut), gen in zip(batch, generations):
            if not fut.done():
                fut.set_result(gen)
        return None

    def for_episode(self) -> EpisodeModelStep:
        """A fresh model step for one episode; `close()` it when the episode ends
        (`run_episodes` does) so batches stop waiting for it."""
        self._live += 1
        return EpisodeModelStep(self)

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Around an episode's session creation (its reset): batches wait for it as for a live
        episode, since its first request follows at once; released whether or not it starts."""
        self._live += 1
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self._live -= 1
        self._notify()


class ArrivingSessions:
    """A session factory whose episodes count for `batcher` from the start of their creation
    (`BatchingModelStep.arriving`): the first turn's requests of a batch of episodes, whose
    resets end a few milliseconds apart, then go to the model together."""

    def __init__(self, inner: Any, batcher: BatchingModelStep):
        self.inner = inner
        self.batcher = batcher

    async def create_async(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> Any:
        with self.batcher.arriving():
            return await create_session(self.inner, task, seed, episode_id)


def _settle(batch: list[tuple[GenerationRequest, asyncio.Future]], exc: BaseException) -> None:
    for _, fut in batch:
        if not fut.done():
            fut.set_exception(exc)


class EpisodeModelStep:
    """One episode's async model step on a `BatchingModelStep`.

    Passes the episode's exact tokens so far as `prefix_ids`, so a tokenizing backend
    extends them instead of re-tokenizing the history.
    """

    def __init__(self, batcher: BatchingModelStep):
        self._batcher = batcher
        self._prefix_ids: list[int] | None = None
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._batcher._release()

    async def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult:
        request = GenerationRequest(
            messages=list(messages),
            tools=[as_mcp_dict(t) for t in tools] if (tools and self._batcher.send_tools) else None,
            sampling=SamplingParams.from_dict(sampling),
            prefix_ids=self._prefix_ids,
        )
        gen = await self._batcher.generate(request)
        calls = normalize_parsed(self._batcher.tool_call_parser(gen.text))
        self._prefix_ids = list(gen.prompt_ids) + list(gen.completion_ids) if gen.prompt_ids else None
        return ModelStepResult(
            response=LLMResponse(content=gen.text, tool_calls=calls),
            prompt_ids=list(gen.prompt_ids),
            completion_ids=list(gen.completion_ids),
            logprobs=list(gen.logprobs),
            metadata={"finish_reason": gen.finish_reason, **gen.metadata},
            images=list(gen.images),
            image_token_counts=list(gen.image_token_counts),
            image_token_id=gen.image_token_id,
        )
