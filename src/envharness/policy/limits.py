"""What the policy endpoint refuses, and when it lets go: the surface's limits in one place.

- **Token.** With a token (`--token` or `$ENVHARNESS_TOKEN`, as the environment server), the
  driver's routes (`/rollouts...`) need `Authorization: Bearer TOKEN`, and an agent's calls need
  the token or its rollout's own key: `POST /rollouts` answers with an `api_key` that is a secret
  of that rollout alone, so an agent can neither read traces nor call into another rollout.
  Without a token the key is the rollout id, as before. `/health` stays open (readiness probes).
- **Request size.** A body over `max_request_bytes` is refused before it is parsed (413).
- **Calls per rollout.** An agent that loops forever stops at `max_calls_per_rollout` (400).
- **Idle rollouts.** A rollout that no call reached for `rollout_idle_s` is ended (its agent went
  away): its trace is kept for the driver, later calls get `rollout_ended` with the reason.
The context limit is the endpoint's own (`--context-length`, default the model's window).
Every refusal is an OpenAI-style error body (`errors.py`).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from envharness.policy import errors

#: Screenshots travel inside requests (base64 image_url parts): room for a few of them.
DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class PolicyLimits:
    token: str | None = None
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    #: Model calls one rollout may make (None: no limit).
    max_calls_per_rollout: int | None = 1000
    #: Seconds without a call after which an open rollout is ended (None: never).
    rollout_idle_s: float | None = 600.0

    def check_driver(self, authorization: str | None) -> None:
        """The driver's routes: the token, when there is one."""
        if self.token is not None and not _equal(_bearer(authorization), self.token):
            raise errors.unauthorized()

    def check_size(self, content_length: str | None, size: int | None = None) -> None:
        declared = int(content_length) if content_length and content_length.isdigit() else None
        for value in (declared, size):
            if value is not None and value > self.max_request_bytes:
                raise errors.too_large(value, self.max_request_bytes)

    def check_calls(self, made: int, rollout_id: str) -> None:
        if self.max_calls_per_rollout is not None and made >= self.max_calls_per_rollout:
            raise errors.call_limit(rollout_id, self.max_calls_per_rollout)


def _bearer(authorization: str | None) -> str:
    header = authorization or ""
    return header[7:].strip() if header.lower().startswith("bearer ") else ""


def _equal(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def bearer(authorization: str | None) -> str:
    """The key an OpenAI client sent (`Authorization: Bearer KEY`), or ''."""
    return _bearer(authorization)


def is_token(key: str, token: str | None) -> bool:
    return token is not None and _equal(key, token)
