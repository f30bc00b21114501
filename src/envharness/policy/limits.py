"""What the policy endpoint refuses, and when it lets go: the surface's limits in one place.

- **Token.** With a token (`--token` or `$ENVHARNESS_TOKEN`, as the environment server), the
  driver's routes (`/rollouts...`) need `Authorization: Bearer TOKEN`, and an agent's calls need
  the token or its rollout's own key: `POST /rollouts` answers with an `api_key` that is a secret
  of that rollout alone, so an agent can neither read traces nor call into another rollout.
  Without a token the key is the rollout id, as before. `/health` stays open (readiness probes).
  Which routes need what is the app's route table (`app.py`), checked by `core/guards.py`.
- **Request size.** A body over `max_request_bytes` is refused before it is parsed, a chunked
  one as soon as it passes the limit (413).
- **Reply length.** `max_tokens` may ask for at most `max_tokens_limit` tokens, and prompt plus
  reply must fit the context; more is OpenAI's `context_length_exceeded` (400).
- **Prompt length.** A prompt of more than `max_prompt_tokens` tokens (default: the context
  less one) is refused (`context_length_exceeded`, 400); one whose characters alone prove it
  longer is refused before it is tokenized (`prompt_size.py`), the rest is tokenized in a
  worker thread, so `/health` and other calls go on meanwhile.
- **Calls per rollout.** An agent that loops forever stops at `max_calls_per_rollout` (400).
- **Idle rollouts.** A rollout that no call reached for `rollout_idle_s` is ended (its agent went
  away): its trace is kept for the driver, later calls get `rollout_ended` with the reason.
The context limit is the endpoint's own (`--context-length`, default the model's window).
Every refusal is an OpenAI-style error body (`errors.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envharness.core.declared import option
from envharness.core.guards import bearer as _bearer, same_secret
from envharness.policy import errors

#: Screenshots travel inside requests (base64 image_url parts): room for a few of them.
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
#: The most tokens one reply may ask for: agents' turns are short; a runaway one holds the model.
DEFAULT_MAX_TOKENS_LIMIT = 4096


@dataclass(frozen=True)
class PolicyLimits:
    """The limits, each field its `envharness policy` option (`core/declared.py`)."""

    group: ClassVar[str] = "limits"

    token: str | None = option(
        None,
        "require `Authorization: Bearer TOKEN` on the driver's routes, and the token or a rollout's own "
        "api_key on agents' calls (default: $ENVHARNESS_TOKEN; none: open, on loopback by default)",
    )
    max_request_bytes: int = option(
        DEFAULT_MAX_REQUEST_BYTES,
        "largest request body accepted (default %(default)s: room for screenshots)",
        metavar="N",
        minimum=1024,
    )
    #: Model calls one rollout may make (None: no limit).
    max_calls_per_rollout: int | None = option(
        1000,
        "model calls one rollout may make (default %(default)s; 0: no limit)",
        type=int,
        metavar="N",
        minimum=0,
        from_cli=lambda calls: calls or None,
    )
    #: Seconds without a call after which an open rollout is ended (None: never).
    rollout_idle_s: float | None = option(
        600.0,
        "end a rollout no call reached for S seconds (default %(default)s; 0: never)",
        flags=("--rollout-idle-timeout",),
        type=float,
        metavar="S",
        minimum=0,
        from_cli=lambda seconds: seconds or None,
    )
    #: The most tokens one reply may ask for (`max_tokens`), whatever the context leaves.
    max_tokens_limit: int = option(
        DEFAULT_MAX_TOKENS_LIMIT,
        "the most tokens one reply may ask for (max_tokens); more: context_length_exceeded (default %(default)s)",
        metavar="N",
        minimum=1,
    )
    #: The most tokens a prompt may have (None: the context window less one).
    max_prompt_tokens: int | None = option(
        None,
        "refuse prompts of more than N tokens, longer ones unread (default: the context less one)",
        type=int,
        metavar="N",
        minimum=1,
    )

    def check_calls(self, made: int, rollout_id: str) -> None:
        if self.max_calls_per_rollout is not None and made >= self.max_calls_per_rollout:
            raise errors.call_limit(rollout_id, self.max_calls_per_rollout)


def bearer(authorization: str | None) -> str:
    """The key an OpenAI client sent (`Authorization: Bearer KEY`), or ''."""
    return _bearer(authorization)


def is_token(key: str, token: str | None) -> bool:
    return token is not None and same_secret(key, token)
