"""What the policy endpoint records: per rollout id, every model call with its exact tokens.

A `Turn` is one `/v1/chat/completions` call: the messages as the agent sent them, the prompt
tokens the backend really conditioned on, the completion tokens it sampled and their
logprobs (never re-tokenised from text), and whether the prompt extended the rollout's
sequence so far (`forks.py` decides). `TraceStore` opens, ends and hands out rollouts; it
is shared by the HTTP routes (on the server's loop) and the trainer (another thread), hence
the lock. Ended rollouts are kept until taken, at most `keep_ended` of them.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from envharness.policy.errors import ended_rollout, unknown_rollout

ROLLOUT_ID = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


@dataclass
class Turn:
    """One model call of a rollout."""

    index: int
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    #: The tool calls returned to the agent, OpenAI form (`id`, `function.name`, `function.arguments`).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    #: The turn whose prompt + completion this prompt starts with (None: the first, or a fork).
    parent: int | None = None
    #: The prompt did not extend the rollout's latest sequence (the agent rewrote its history).
    fork: bool = False
    #: Tokens of that latest sequence the prompt did not keep (0 when it extended it).
    fork_tokens: int = 0
    sampling: dict[str, Any] = field(default_factory=dict)
    #: Vision backends: the images this prompt added, their placeholder counts and token.
    images: list[Any] = field(default_factory=list, repr=False)
    image_token_counts: list[int] = field(default_factory=list)
    image_token_id: int | None = None

    @property
    def tool_call_ids(self) -> list[str]:
        return [c["id"] for c in self.tool_calls]

    @property
    def sequence(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


@dataclass
class RolloutTrace:
    """One rollout: its turns in arrival order, and what the driver attached (task, seed)."""

    rollout_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    ended: bool = False
    #: The key an agent of this rollout sends (`api_key`): its id, or a secret when the endpoint has a token.
    api_key: str = ""
    #: When a call last arrived (or the rollout opened), for reaping idle rollouts.
    last_active: float = field(default_factory=time.monotonic)
    #: Why it ended, when the endpoint ended it (idle timeout).
    end_reason: str = ""
    #: Decoded `image_url`s of this rollout, by URL (`images.py`).
    image_cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def forks(self) -> int:
        return sum(1 for t in self.turns if t.fork)

    @property
    def fork_tokens(self) -> int:
        return sum(t.fork_tokens for t in self.turns)

    def head(self) -> Turn | None:
        """The latest turn: the sequence the next prompt should extend."""
        return self.turns[-1] if self.turns else None

    def summary(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "ended": self.ended,
            "turns": len(self.turns),
            "forks": self.forks,
            "fork_tokens": self.fork_tokens,
            "metadata": self.metadata,
        }

    def to_dict(self) -> dict[str, Any]:
        """The whole trace as JSON (`GET /rollouts/{id}`), tokens included."""
        from dataclasses import asdict

        turns = [{k: v for k, v in asdict(t).items() if k != "images"} for t in self.turns]
        return {**self.summary(), "turns": turns}


class TraceStore:
    """Rollout id -> `RolloutTrace`; thread-safe."""

    def __init__(self, keep_ended: int = 4096) -> None:
        self.keep_ended = keep_ended
        self._lock = threading.Lock()
        self._live: dict[str, RolloutTrace] = {}
        self._ended: OrderedDict[str, RolloutTrace] = OrderedDict()
        self._by_key: dict[str, str] = {}  # secret api key -> live rollout id

    def open(
        self, rollout_id: str | None = None, /, *, secret_key: bool = False, **metadata: Any
    ) -> RolloutTrace:
        """Start recording a rollout (a fresh id unless one is given; an id is never reused).
        `secret_key`: its agent's `api_key` is a secret of its own (an endpoint with a token),
        not its id."""
        rollout_id = rollout_id or uuid.uuid4().hex
        if not ROLLOUT_ID.fullmatch(rollout_id):
            raise ValueError(f"rollout id {rollout_id!r}: use 1-128 of A-Z a-z 0-9 _ . - (it goes in URLs)")
        with self._lock:
            if rollout_id in self._live or rollout_id in self._ended:
                raise ValueError(f"rollout id {rollout_id!r} is already in use")
            trace = self._live[rollout_id] = RolloutTrace(rollout_id, dict(metadata))
            trace.api_key = secrets.token_urlsafe(24) if secret_key else rollout_id
            if secret_key:
                self._by_key[trace.api_key] = rollout_id
        return trace

    def rollout_of_key(self, api_key: str) -> str | None:
        """The rollout (live, or ended and still kept) a secret `api_key` belongs to."""
        return self._by_key.get(api_key)

    def reap_idle(self, idle_s: float) -> list[str]:
        """End the rollouts no call reached for `idle_s` seconds (an agent that went away)."""
        now = time.monotonic()
        idle = [r for r, t in list(self._live.items()) if now - t.last_active > idle_s]
        for rollout_id in idle:
            self.end(rollout_id, reason=f"no call for {idle_s:.0f} s: ended as idle")
        return idle

    @property
    def open_count(self) -> int:
        """Rollouts still recording."""
        return len(self._live)

    def live(self, rollout_id: str) -> RolloutTrace:
        """The open rollout, or the OpenAI-style error an agent should get."""
        trace = self._live.get(rollout_id)
        if trace is not None:
            return trace
        if rollout_id in self._ended:
            raise ended_rollout(rollout_id, self._ended[rollout_id].end_reason)
        raise unknown_rollout(rollout_id)

    def get(self, rollout_id: str) -> RolloutTrace:
        trace = self._live.get(rollout_id) or self._ended.get(rollout_id)
        if trace is None:
            raise unknown_rollout(rollout_id)
        return trace

    def end(self, rollout_id: str, reason: str = "") -> RolloutTrace:
        """Stop recording: later calls for this id are refused (`rollout_ended`)."""
        with self._lock:
            trace = self._live.pop(rollout_id, None)
            if trace is None:
                return self.get(rollout_id)
            trace.ended, trace.end_reason = True, reason
            self._ended[rollout_id] = trace
            while len(self._ended) > self.keep_ended:
                _, old = self._ended.popitem(last=False)
                self._by_key.pop(old.api_key, None)
        return trace

    def discard(self, rollout_id: str) -> None:
        """Forget an ended rollout once its trace is taken (a live one is ended first)."""
        self.end(rollout_id)
        with self._lock:
            trace = self._ended.pop(rollout_id, None)
            if trace is not None:
                self._by_key.pop(trace.api_key, None)
