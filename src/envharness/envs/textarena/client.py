"""TextArena clients: the async one names the wire models, the sync one names the async one.

``TextArenaEnv.from_local(env_vars={"TEXTARENA_ENV_ID": "Wordle-v0"})`` starts
``envharness serve textarena`` (no Docker) with OpenEnv's variables, as
``from_docker_image("textarena-env:latest", env_vars=...)`` does for OpenEnv's image;
``reset(seed=3, task="Mastermind-v0")`` picks the game and replays it by seed.
"""

from __future__ import annotations

from envharness.core.client import AsyncEnvClient, EnvClient
from envharness.envs.textarena.models import TextArenaAction, TextArenaObservation, TextArenaState


class AsyncTextArenaEnv(AsyncEnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    observation_type = TextArenaObservation
    state_type = TextArenaState
    env_name = "textarena"


class TextArenaEnv(EnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    async_client_class = AsyncTextArenaEnv


__all__ = ["AsyncTextArenaEnv", "TextArenaAction", "TextArenaEnv", "TextArenaObservation", "TextArenaState"]
