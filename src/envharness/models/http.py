"""HTTP for remote backends: one JSON POST with retries, backoff and clear errors.

Retried: 429 and 5xx answers (honouring `Retry-After`), refused or dropped connections,
timeouts. Not retried: other 4xx answers, which mean the request itself is wrong.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import httpx

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class BackendError(RuntimeError):
    """A remote model server refused or failed a request. `status` is None for network errors."""

    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status = status
        self.body = body


@dataclass
class RetryPolicy:
    """How hard to try: `max_retries` extra attempts, exponential backoff from `backoff_s`."""

    max_retries: int = 5
    backoff_s: float = 0.5
    max_backoff_s: float = 20.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass
        return min(self.backoff_s * 2**attempt, self.max_backoff_s) * (0.5 + random.random() / 2)


async def request_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    json: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
) -> Any:
    """Send one request and return its JSON body, retrying transient failures."""
    retry = retry or RetryPolicy()
    for attempt in range(retry.max_retries + 1):
        last = attempt == retry.max_retries
        try:
            response = await client.request(method, url, json=json)
        except httpx.TransportError as exc:
            if last:
                raise BackendError(f"{method} {url} failed after {attempt + 1} attempts: {exc!r}") from exc
            await asyncio.sleep(retry.delay(attempt))
            continue
        if response.status_code in RETRY_STATUSES and not last:
            await asyncio.sleep(retry.delay(attempt, response.headers.get("retry-after")))
            continue
        if response.status_code >= 400:
            body = response.text[:2000]
            raise BackendError(
                f"{method} {url} -> HTTP {response.status_code}: {body}", response.status_code, body
            )
        try:
            return response.json()
        except ValueError as exc:
            raise BackendError(
                f"{method} {url} returned non-JSON: {response.text[:200]!r}", response.status_code
            ) from exc
    raise AssertionError("unreachable")
