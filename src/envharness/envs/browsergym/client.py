"""Browser clients: the async one names the wire models, the sync one names the async one.

``BrowserGymEnv.from_local()`` starts ``envharness serve browsergym`` (no Docker);
``reset(task="click-test", seed=3)`` picks the MiniWoB task of each episode.
"""

from __future__ import annotations

from envharness.core.client import AsyncEnvClient, EnvClient
from envharness.envs.browsergym.models import BrowserGymAction, BrowserGymObservation, BrowserGymState


class AsyncBrowserGymEnv(AsyncEnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    observation_type = BrowserGymObservation
    state_type = BrowserGymState
    env_name = "browsergym"


class BrowserGymEnv(EnvClient[BrowserGymAction, BrowserGymObservation, BrowserGymState]):
    async_client_class = AsyncBrowserGymEnv
