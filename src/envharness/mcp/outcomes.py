"""What an agent's MCP session earned, readable by whoever trains the agent.

An agent that owns its loop plays through `/mcp` with its own MCP client; the trainer never
sees the tool results. So that the reward comes from the environment and not from the
agent's word, an MCP client may tag its session with a rollout id (`/mcp?rollout=ID`, or an
`X-Rollout-Id` header) and the server keeps, per tag, the reward and done of each tool call
since the last `reset`. `GET /mcp/rollouts/{id}` answers it (behind the server's token);
`DELETE` forgets it. At most `capacity` tags are kept (the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

ROLLOUT_QUERY = "rollout"
ROLLOUT_HEADER = "x-rollout-id"


@dataclass
class RolloutOutcome:
    """One tagged episode as the environment saw it (since its latest reset)."""

    rollout_id: str
    reward: float = 0.0  # the sum of the step rewards since the last reset (the episode return)
    done: bool = False
    step_rewards: list[float] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    resets: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RolloutOutcomes:
    """Tag -> `RolloutOutcome`, bounded."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, RolloutOutcome] = OrderedDict()

    def record(self, rollout_id: str, tool: str, observation: Any, is_error: bool) -> None:
        """Note one tool call; `observation` is the session's latest (reward, done) or None."""
        outcome = self._items.get(rollout_id)
        if outcome is None:
            outcome = self._items[rollout_id] = RolloutOutcome(rollout_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        outcome.tool_calls += 1
        outcome.tool_errors += int(is_error)
        if is_error or observation is None:
            return
        if tool == "reset":
            outcome.resets += 1
            outcome.reward, outcome.done, outcome.step_rewards = 0.0, bool(observation.done), []
            return
        reward = float(observation.reward or 0.0)
        outcome.step_rewards.append(reward)
        outcome.reward += reward
        outcome.done = bool(observation.done)

    def get(self, rollout_id: str) -> RolloutOutcome | None:
        return self._items.get(rollout_id)

    def pop(self, rollout_id: str) -> RolloutOutcome | None:
        return self._items.pop(rollout_id, None)


def rollout_tag(request: Any) -> str | None:
    """The rollout id an HTTP request carries (query `rollout=` or header), if any."""
    if request is None:
        return None
    tag = request.query_params.get(ROLLOUT_QUERY) or request.headers.get(ROLLOUT_HEADER)
    return tag or None
