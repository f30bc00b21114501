"""Self-play (`--opponent self`): every seat of a multi-player game is the policy being
trained, each seat's turns its own trajectory with its own reward.

Advantages are per role, as SPIRAL's role-conditioned advantage estimation (arXiv 2506.24119):
a GRPO group is one (task, seed, seat), the G trajectories of that seat from G games of that
seed, so TRL's per-group baseline is that seat's and a seat's built-in edge (moving first) is
not learning signal. The rollout pairs consecutive groups of a batch (in a mix, of the game's
share of it, in batch order) that play the same task: a pair plays its first group's seed,
the first group is seat 0 and the second seat 1, and one set of G games feeds both. A group
without a partner (an odd count) still plays G whole games, every seat by the policy, and
keeps its own seat's trajectories. A step of N groups of G therefore plays
ceil(N/2) * G games of a two-player game, each seat's turns sampled by the trained model.

The environment shows each game as one ordinary client per seat (`EnvHarness.seat_views`);
the seats' episodes run concurrently, so the backend batches their turns.
"""

from __future__ import annotations

import contextvars
import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.model_step import BatchingModelStep
from envharness.harness.plan import PlanRow
from envharness.harness.rollout import rollout_metrics, rollout_outputs, run_episodes
from envharness.harness.session import create_session
from envharness.harness.types import HarnessRolloutResult
from envharness.integrations.trl.kinds.base import RunParts
from envharness.integrations.trl.layers import Rollout
from envharness.integrations.trl.prompting import prompt_options
from envharness.integrations.trl.rollout import (
    _episode_fields,
    parse_task_prompt,
    prompt_env,
    trainer_sampling,
    trainer_step,
)

#: The seat view the episode being opened plays (set by `_SeatFactory` for its inner factory).
_VIEW: contextvars.ContextVar[Any] = contextvars.ContextVar("envharness_seat_view")


@dataclass(frozen=True)
class SeatEpisode:
    """One seat of one game: `row` its slot in TRL's batch (None: played, not trained on)."""

    task: str
    seed: int | None
    seat: int
    game: str
    row: int | None
    #: The environment a mix's prompt names (None outside a mix).
    env: str | None = None


def plan_episodes(prompts: list[Any], generations: int, players: int = 2) -> list[SeatEpisode]:
    """Every seat of every game that `prompts` (each group's prompt repeated `generations`
    times) needs, in the order above."""
    groups = [prompts[i : i + generations] for i in range(0, len(prompts), generations)]
    episodes: list[SeatEpisode] = []
    first = 0
    while first < len(groups):
        task, seed = parse_task_prompt(groups[first][0])
        env = prompt_env(groups[first][0])
        pair = [groups[first]]  # the next groups of the same task take the next seats
        while len(pair) < players and first + len(pair) < len(groups):
            if parse_task_prompt(groups[first + len(pair)][0])[0] != task:
                break
            pair.append(groups[first + len(pair)])
        for g in range(generations):
            game = f"{uuid.uuid4().hex[:8]}-g{g}"
            for seat in range(players):
                in_batch = seat < len(pair) and g < len(pair[seat])
                row = (first + seat) * generations + g if in_batch else None
                episodes.append(SeatEpisode(str(task), seed, seat, game, row, env))
        first += len(pair)
    return episodes


class _SeatFactory:
    """Opens each episode on its seat's view of its game (the environment's own sessions)."""

    def __init__(self, inner: Any, games: dict[str, Any]) -> None:
        self.inner, self.games = inner, games

    async def create_async(
        self, task: Any = None, seed: int | None = None, episode_id: str | None = None
    ) -> Any:
        episode: SeatEpisode = task
        token = _VIEW.set(self.games[episode.game].views[episode.seat])
        try:
            return await create_session(self.inner, episode.task, seed, episode_id)
        finally:
            _VIEW.reset(token)


class SelfPlayRollout(Rollout):
    """TRL's `rollout_func` playing `row`'s games seat by seat on `clients`' server, every seat
    the policy (`row` is the run's environment, or one environment of a mix: the batch a mix
    hands it is its own groups, in their order)."""

    def __init__(self, parts: RunParts, row: PlanRow, clients: Any) -> None:
        self.harness, self.parts, self.clients = row.env.require_harness(), parts, clients
        self.records, self.metrics = parts.records, {}
        options = prompt_options(row.prompt, parts.tokenizer, row.env)
        self.sessions = self.harness.session_factory(
            lambda: _VIEW.get(), default_task=row.tasks[0], **options
        )
        self.players = self.harness.players(row.tasks[0])[0]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        generations = int(getattr(getattr(trainer, "args", None), "num_generations", 0) or 1)
        episodes = plan_episodes(prompts, generations, self.players)
        games = {e.game: self.harness.seat_views(self.clients(), self.players) for e in episodes}
        batcher = BatchingModelStep(
            self.parts.backend_factory(trainer),
            tool_call_parser=self.harness.tool_call_parser,
            send_tools=False,
        )
        step, limits = trainer_step(trainer), self.parts.limits
        limits = dataclasses.replace(limits, sampling={**trainer_sampling(trainer), **limits.sampling})

        def on_result(index: int, result: HarnessRolloutResult) -> None:
            episode = episodes[index]
            result.task, result.seed = episode.task, episode.seed
            result.metrics.update(train_step=step, seat=episode.seat, game=episode.game)
            if episode.env is not None:  # a mix: records name the environment too
                result.metrics["env"] = episode.env
            result.metrics["trained"] = episode.row is not None
            self.parts.records.write(result)

        results = run_coroutine_sync(
            run_episodes(
                _SeatFactory(self.sessions, games),
                episodes,
                model_step_builder=lambda _session: batcher.for_episode(),
                limits=limits,
                max_concurrency=len(episodes),  # every seat of a game at once: they take turns
                seeds=[e.seed for e in episodes],
                episode_ids=[f"{e.game}-seat{e.seat}" for e in episodes],
                on_result=on_result,
            )
        )
        kept = sorted((e.row, r) for e, r in zip(episodes, results) if e.row is not None)
        ordered = [r for _, r in kept]
        self.metrics = rollout_metrics(results)
        return {**rollout_outputs(ordered, trainer), **_episode_fields(ordered, False)}


__all__ = ["SeatEpisode", "SelfPlayRollout", "plan_episodes"]
