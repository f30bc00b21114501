"""Per-task numbers of an eval run: success rate with its Wilson 95% interval, reward, steps,
tokens, time. Computed from the run's episode records (plain dicts, as read from JSONL).

An episode succeeded when its session's `verify` says so (``metrics["success"]``: MiniWoB's raw
reward reaching the task's full score; TextArena's reward reaching 1), or else when the
environment's reward reaches the task's full score (`harness/success.py`). Episodes that earned
part of a score are counted apart (`partial_credit`; BrowserGym counts them as successes).
Episodes the environment's own bug ended (`metrics.env_error`) are counted apart too (`env bugs`).
Episodes that crashed (`error` set: a model that raised, a timeout) count as failures,
and are also counted apart (`errors`) so a broken run is not mistaken for a weak model. Model
replies from which no action could be read (`no_action`: the reply held no tool call, or the
parser fell back, e.g. to MiniWoB's `noop()`) are counted too: a prompt or parser that does not
fit the model scores 0 with no error at all. Episodes lost
to the infrastructure (their server died or was taken out: `metrics.infra_failure`) are not
scored at all: they are left out of `episodes`, the success rate and the means, and counted
in `infra_failures` (`--resume` reruns them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from envharness.harness.failures import is_env_error, is_infra_failure
from envharness.harness.success import episode_success, partial_credit

Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) for no trials. Unlike the
    normal approximation it stays inside [0, 1] and is not degenerate at 0/n or n/n."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def is_success(record: dict[str, Any]) -> bool:
    """The one verdict (`harness/success.py`): the session's own when its `verify` reports
    ``success`` (TextArena: a won game), else the task's full score."""
    return episode_success(record.get("verify_metrics"), record.get("env_reward"), record.get("error"))


def is_partial_credit(record: dict[str, Any]) -> bool:
    """Part of the task's score without a success (counted apart, never as a success)."""
    return partial_credit(record.get("verify_metrics"), record.get("env_reward"), record.get("error"))


def episode_tokens(record: dict[str, Any]) -> int:
    """Prompt + completion tokens over all of an episode's model calls."""
    steps = record.get("steps") or []
    return sum(int(s.get("prompt_tokens") or 0) + int(s.get("completion_tokens") or 0) for s in steps)


def episode_steps(record: dict[str, Any]) -> int:
    return len(record.get("steps") or record.get("tool_calls") or [])


def no_action_replies(record: dict[str, Any]) -> int:
    """The episode's model replies from which no action was read: each step (or tool call) with
    a `parse_error`, and the last reply when the episode stopped on one without a tool call."""
    steps = record.get("steps") or []
    if steps:  # eval's tape notes every reply, "no action in the reply" included
        return sum(1 for s in steps if s.get("parse_error"))
    unread = sum(1 for c in record.get("tool_calls") or [] if c.get("parse_error"))
    return unread + int((record.get("metrics") or {}).get("stop_reason") == "no_tool_calls")


def episode_seconds(record: dict[str, Any]) -> float:
    return float((record.get("timings") or {}).get("total_s") or 0.0)


@dataclass
class TaskStats:
    task: str
    episodes: int
    successes: int
    ci_low: float
    ci_high: float
    mean_reward: float
    mean_steps: float
    mean_tokens: float
    mean_seconds: float
    errors: int
    #: Episodes lost to a dead or removed server: not scored, not in `episodes`.
    infra_failures: int = 0
    #: Episodes ended by the environment's own bug (its `step` raised something other than
    #: `InvalidAction`): not the agent's failures, not in `episodes`.
    env_errors: int = 0
    #: Episodes that earned part of the task's score (MiniWoB: 0 < raw reward < 1): failures
    #: here, successes by BrowserGym's count (reward = raw reward > 0).
    partial_credit: int = 0
    #: Model replies from which no action was read (`no_action_replies`), over the episodes.
    no_action: int = 0

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


def task_stats(task: str, records: list[dict[str, Any]]) -> TaskStats:
    lost = sum(1 for r in records if is_infra_failure(r))
    bugs = sum(1 for r in records if is_env_error(r) and not is_infra_failure(r))
    records = [r for r in records if not is_infra_failure(r) and not is_env_error(r)]
    n = len(records)
    wins = sum(map(is_success, records))
    low, high = wilson_interval(wins, n)
    avg = lambda values: mean(values) if values else 0.0  # noqa: E731
    return TaskStats(
        task=task,
        episodes=n,
        successes=wins,
        ci_low=low,
        ci_high=high,
        mean_reward=avg([float(r.get("env_reward") or 0.0) for r in records]),
        mean_steps=avg([episode_steps(r) for r in records]),
        mean_tokens=avg([episode_tokens(r) for r in records]),
        mean_seconds=avg([episode_seconds(r) for r in records]),
        errors=sum(1 for r in records if r.get("error")),
        infra_failures=lost,
        env_errors=bugs,
        partial_credit=sum(map(is_partial_credit, records)),
        no_action=sum(map(no_action_replies, records)),
    )


def summarize(records: Iterable[dict[str, Any]], tasks: list[str] | None = None) -> list[TaskStats]:
    """One `TaskStats` per task (in `tasks` order when given, else first-seen order), plus an
    `all` row when there is more than one task."""
    by_task: dict[str, list[dict[str, Any]]] = {t: [] for t in tasks or []}
    for record in records:
        by_task.setdefault(str(record.get("task")), []).append(record)
    rows = [task_stats(task, recs) for task, recs in by_task.items()]
    if len(rows) > 1:
        rows.append(task_stats("all", [r for recs in by_task.values() for r in recs]))
    return rows


def format_table(rows: list[TaskStats]) -> str:
    """A fixed-width table for the terminal."""
    infra = any(r.infra_failures for r in rows)  # the column appears only when a server was lost
    partial = any(r.partial_credit for r in rows)  # and this one when an episode earned part of a score
    bugs = any(r.env_errors for r in rows)  # and this one when the environment's step crashed
    unread = any(r.no_action for r in rows)  # and this one when a reply held no action
    header = (
        ("task", "n", "success", "95% CI", "reward", "steps", "tokens", "time/ep", "errors")
        + (("no action",) if unread else ())
        + (("partial",) if partial else ())
        + (("infra",) if infra else ())
        + (("env bugs",) if bugs else ())
    )
    lines = [header]
    for r in rows:
        lines.append(
            (
                r.task,
                str(r.episodes),
                f"{r.success_rate:.2f}",
                f"[{r.ci_low:.2f}, {r.ci_high:.2f}]",
                f"{r.mean_reward:.2f}",
                f"{r.mean_steps:.1f}",
                f"{r.mean_tokens:.0f}",
                f"{r.mean_seconds:.1f}s",
                str(r.errors),
            )
            + ((str(r.no_action),) if unread else ())
            + ((str(r.partial_credit),) if partial else ())
            + ((str(r.infra_failures),) if infra else ())
            + ((str(r.env_errors),) if bugs else ())
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for k, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:])]
        out.append("  ".join(cells))
        if k == 0 or (k == len(lines) - 2 and rows and rows[-1].task == "all" and len(rows) > 1):
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
