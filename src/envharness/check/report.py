"""What `envharness check` finds, and how it is printed: contract check results, and the
adversarial floor's episodes as a per-task table (text and markdown) and JSON.

Plain dataclasses, so a test or a CI script reads the same numbers the command prints.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from statistics import mean
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

#: The item of the author's checklist (docs/new_environment.md) each contract check verifies:
#: a failed check names it.
CHECKLIST = {
    "server_api": "step_count",
    "same_seed_same_episode": "seeded reset",
    "bad_wire_actions": "errors",
    "bad_tool_calls": "errors",
    "reset_after_done": "reset after done",
    "scripted_policy_wins": "success",
    "reward_range": "reward range",
    "task_list": "task names",
    "unknown_task": "task names",
}
#: A failure that names a thread is an object used off the thread that made it (sqlite's
#: connection), whichever check met it: its item is "one thread", not the check's own.
_THREAD_WORDS = re.compile(r"\bthreads?\b", re.IGNORECASE)


def checklist_item(name: str, reason: str, *, raised: bool = False) -> str | None:
    """The checklist item a failed check names: "one thread" for an object used off its thread,
    "errors" for an exception the environment raised where the check expected an answer, else
    the check's own item."""
    if _THREAD_WORDS.search(reason):
        return "one thread"
    if raised and "EXECUTION_ERROR" in reason:
        return "errors"
    return CHECKLIST.get(name)


@dataclass
class CheckResult:
    """One contract check: its name, PASS/FAIL/SKIP, and the reason in words."""

    name: str
    status: str
    reason: str = ""
    #: The checklist item a failure names (`checklist_item`); None: the check's own.
    item: str | None = None

    def line(self) -> str:
        item = (self.item or CHECKLIST.get(self.name)) if self.status == FAIL else None
        return (
            f"{self.status}  {self.name}"
            + (f": {self.reason}" if self.reason else "")
            + (f" [checklist: {item}, docs/new_environment.md]" if item else "")
        )


@dataclass
class CheckReport:
    """Every contract check of one environment, in the order they ran."""

    env: str
    results: list[CheckResult] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: How many tasks the environment lists (more than `tasks`: only some were checked).
    listed: int = 0

    def add(self, name: str, status: str, reason: str = "", *, raised: bool = False) -> CheckResult:
        """Note one check; `raised`: it failed by an exception (the server's error, a timeout)."""
        item = checklist_item(name, reason, raised=raised) if status == FAIL else None
        result = CheckResult(name, status, reason, item)
        self.results.append(result)
        return result

    @property
    def ok(self) -> bool:
        """No check failed (skipped ones do not count against the environment)."""
        return not self.failed

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == FAIL]

    @property
    def skipped(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == SKIP]

    def status(self, name: str) -> str | None:
        """The status of the check called `name` (None when it did not run)."""
        return next((r.status for r in self.results if r.name == name), None)

    def format(self) -> str:
        counts = {s: sum(r.status == s for r in self.results) for s in (PASS, FAIL, SKIP)}
        head = f"envharness check {self.env}" + (
            f" ({len(self.tasks)} task(s): {', '.join(self.tasks[:6])}"
            f"{', ...' if len(self.tasks) > 6 else ''})"
            if self.tasks
            else ""
        )
        if self.listed > len(self.tasks):
            head += f"\n  {len(self.tasks)} of {self.listed} listed tasks checked (the default ones); --tasks all checks every one"
        tail = f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped in {self.seconds:.1f}s"
        return "\n".join([head, *(r.line() for r in self.results), tail])


# -- the adversarial floor ------------------------------------------------------------------
@dataclass
class FloorEpisode:
    """One episode of a floor policy: what it did and what it earned."""

    policy: str
    task: str
    seed: int
    reward: float
    success: bool
    actions: list[str] = field(default_factory=list)
    stop_reason: str = ""
    error: str | None = None


@dataclass
class FloorCell:
    """One policy on one task: successes out of episodes, mean reward, crashed episodes."""

    successes: int
    episodes: int
    mean_reward: float
    errors: int

    def text(self) -> str:
        return f"{self.successes}/{self.episodes}"


@dataclass
class FloorReport:
    """The floor of one environment: every episode, and the per-task numbers drawn from them."""

    env: str
    tasks: list[str]
    policies: list[str]
    episodes_per_task: int
    max_steps: int
    seed: int
    episodes: list[FloorEpisode] = field(default_factory=list)
    seconds: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    def of(self, task: str, policy: str | None = None) -> list[FloorEpisode]:
        return [e for e in self.episodes if e.task == task and (policy is None or e.policy == policy)]

    def cell(self, task: str, policy: str) -> FloorCell:
        eps = self.of(task, policy)
        return FloorCell(
            sum(e.success for e in eps),
            len(eps),
            mean(e.reward for e in eps) if eps else 0.0,
            sum(e.error is not None for e in eps),
        )

    def scored(self) -> dict[str, list[FloorEpisode]]:
        """Tasks where any policy succeeded, with the winning episodes (task order kept)."""
        out: dict[str, list[FloorEpisode]] = {}
        for task in self.tasks:
            wins = [e for e in self.of(task) if e.success]
            if wins:
                out[task] = wins
        return out

    def rate(self, policy: str) -> float:
        eps = [e for e in self.episodes if e.policy == policy]
        return sum(e.success for e in eps) / len(eps) if eps else 0.0

    def worst_rate(self) -> tuple[float, str, str]:
        """The highest success rate of any policy on any task: (rate, task, policy)."""
        best = (0.0, "", "")
        for task in self.tasks:
            for policy in self.policies:
                c = self.cell(task, policy)
                if c.episodes and c.successes / c.episodes > best[0]:
                    best = (c.successes / c.episodes, task, policy)
        return best

    def errors(self) -> list[FloorEpisode]:
        return [e for e in self.episodes if e.error is not None]

    def to_json(self) -> dict[str, Any]:
        per_task = []
        for task in self.tasks:
            cells = {p: asdict(self.cell(task, p)) for p in self.policies}
            per_task.append({"task": task, "policies": cells, "mean_reward": _mean_reward(self.of(task))})
        return {
            "env": self.env,
            "options": self.options,
            "policies": self.policies,
            "episodes_per_task": self.episodes_per_task,
            "max_steps": self.max_steps,
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "success_rate": {p: self.rate(p) for p in self.policies},
            "tasks": per_task,
            "scored": {t: [asdict(e) for e in eps] for t, eps in self.scored().items()},
            "episodes": [asdict(e) for e in self.episodes],
        }


def _mean_reward(episodes: list[FloorEpisode]) -> float:
    return mean(e.reward for e in episodes) if episodes else 0.0


def _rows(report: FloorReport) -> list[list[str]]:
    rows = []
    for task in report.tasks:
        cells = [report.cell(task, p) for p in report.policies]
        errors = sum(c.errors for c in cells)
        rows.append([task, *(c.text() for c in cells), f"{_mean_reward(report.of(task)):.2f}", str(errors)])
    return rows


def _header(report: FloorReport) -> list[str]:
    return ["task", *report.policies, "mean reward", "errors"]


def floor_table(report: FloorReport) -> str:
    """The per-task table as aligned text (success count / episodes per policy)."""
    rows = [_header(report), *_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in rows
    ]
    return "\n".join(lines)


def floor_markdown_table(report: FloorReport) -> str:
    header = _header(report)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join([f"`{r[0]}`", *r[1:]]) + " |" for r in _rows(report)]
    return "\n".join(lines)


def scored_lines(report: FloorReport, markdown: bool = False) -> list[str]:
    """Each task where a policy scored, with its winning episodes (policy, seed, actions, reward)."""
    lines = []
    for task, wins in report.scored().items():
        lines.append(f"- `{task}`:" if markdown else f"{task}:")
        for e in wins:
            actions = "; ".join(e.actions) or "(no action)"
            text = f"{e.policy} seed {e.seed}, reward {e.reward:g}: {actions}"
            lines.append(f"  - {text}" if markdown else f"  {text}")
    return lines


def floor_summary(report: FloorReport) -> str:
    scored = report.scored()
    rates = ", ".join(f"{p} {report.rate(p):.1%}" for p in report.policies)
    n = len(report.episodes)
    return (
        f"{len(report.tasks)} task(s), {n} episode(s) in {report.seconds:.0f}s; success rate per policy: {rates}; "
        f"{len(scored)} task(s) where a policy scored"
        + (f": {', '.join(scored)}" if scored else "")
        + (f"; {len(report.errors())} episode(s) crashed" if report.errors() else "")
    )


def floor_text(report: FloorReport) -> str:
    """What the command prints: the table, then the tasks where a policy scored."""
    parts = [
        f"adversarial floor of {report.env}: {', '.join(report.policies)}; {report.episodes_per_task} episode(s) "
        f"per task and policy, seeds {report.seed}..{report.seed + report.episodes_per_task - 1}, "
        f"at most {report.max_steps} step(s)",
        "",
        floor_table(report),
        "",
    ]
    scored = scored_lines(report)
    parts += ["tasks where a policy scored:", *scored] if scored else ["no policy scored on any task"]
    crashed = report.errors()
    if crashed:
        parts += [
            "",
            "crashed episodes:",
            *(f"  {e.task} {e.policy} seed {e.seed}: {e.error}" for e in crashed[:20]),
        ]
        if len(crashed) > 20:
            parts.append(f"  ... and {len(crashed) - 20} more (floor.json has them all)")
    parts += ["", floor_summary(report)]
    return "\n".join(parts)


def floor_markdown(report: FloorReport) -> str:
    """floor.md: the settings, the table, and the tasks where a policy scored."""
    options = ", ".join(f"{k}={v}" for k, v in report.options.items()) or "none"
    parts = [
        f"# Adversarial floor: {report.env}",
        "",
        f"Policies {', '.join(report.policies)}; {report.episodes_per_task} episode(s) per task and policy "
        f"(seeds {report.seed}..{report.seed + report.episodes_per_task - 1}), at most {report.max_steps} step(s); "
        f"server options: {options}.",
        "",
        floor_summary(report) + ".",
        "",
        "Each cell: successes / episodes.",
        "",
        floor_markdown_table(report),
        "",
    ]
    scored = scored_lines(report, markdown=True)
    parts += ["## Tasks where a policy scored", "", *scored] if scored else ["No policy scored on any task."]
    return "\n".join(parts) + "\n"


__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "CheckReport",
    "CheckResult",
    "FloorCell",
    "FloorEpisode",
    "FloorReport",
    "floor_markdown",
    "floor_markdown_table",
    "floor_summary",
    "floor_table",
    "floor_text",
    "scored_lines",
]
