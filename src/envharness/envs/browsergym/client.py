"""Browser clients: the async one names the wire models, the sync one names the async one.

``BrowserGymEnv.from_local()`` starts ``envharness serve browsergym`` (no Docker);
``reset(task="click-test", seed=3)`` picks the MiniWoB task of each episode.
Screenshots travel as base64 PNG/JPEG and arrive decoded: ``np.array(obs.screenshot)`` is a
``(height, width, 3)`` uint8 array as with OpenEnv's client, ``obs.screenshot_bytes`` the
encoded image. ``screenshot_array=False`` skips the decoding (``obs.screenshot`` stays the
base64 string), for code that only stores or forwards the image.
"""

from __future__ import annotations

from typing import Any

from envharness.core.client import AsyncEnvClient, EnvClient
from envharness.core.types import StepResult
from envharness.envs.browsergym.models import (
    BrowserGymAction,
    BrowserGymImageObservation,
    BrowserGymObservation,
    BrowserGymState,
)


class AsyncBrowserGymEnv(AsyncEnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    observation_type = BrowserGymObservation
    state_type = BrowserGymState
    env_name = "browsergym"

    def __init__(self, base_url: str, *, screenshot_array: bool = True, **options: Any) -> None:
        """`options`: those of `AsyncEnvClient`. `screenshot_array` (default): observations come
        as `BrowserGymImageObservation`, their `screenshot` a ``(height, width, 3)`` uint8 array."""
        super().__init__(base_url, **options)
        self.screenshot_array = screenshot_array

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BrowserGymObservation]:
        result = super()._parse_result(payload)
        if self.screenshot_array:
            result.observation = BrowserGymImageObservation.from_encoded(result.observation)
        return result


class BrowserGymEnv(EnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    async_client_class = AsyncBrowserGymEnv
