"""Browser clients: the async one names the wire models, the sync one names the async one.

``BrowserGymEnv.from_local()`` starts ``envharness serve browsergym`` (no Docker);
``reset(task="click-test", seed=3)`` picks the MiniWoB task of each episode.
``screenshot_array=True`` decodes screenshots into numpy arrays on arrival (the wire carries
base64 PNG/JPEG), for code written against OpenEnv's array screenshots.
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

    def __init__(self, base_url: str, *, screenshot_array: bool = False, **options: Any) -> None:
        """`options`: those of `AsyncEnvClient`. `screenshot_array`: observations come as
        `BrowserGymImageObservation`, their `screenshot` a ``(height, width, 3)`` uint8 array."""
        super().__init__(base_url, **options)
        self.screenshot_array = screenshot_array

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[BrowserGymObservation]:
        result = super()._parse_result(payload)
        if self.screenshot_array:
            observation = result.observation
            fields = {name: getattr(observation, name) for name in type(observation).model_fields}
            result.observation = BrowserGymImageObservation(**{**fields, "screenshot": observation.screenshot_array()})
        return result


class BrowserGymEnv(EnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    async_client_class = AsyncBrowserGymEnv
