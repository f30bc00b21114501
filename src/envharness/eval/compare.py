"""`envharness eval --compare RUN_A RUN_B`: two runs' per-task numbers side by side.

Each run is read from its folder (`episodes.jsonl`, `config.json`); tasks are listed in
run A's order, then those only run B has. The difference column is B - A in success rate;
`*` marks it when the two Wilson intervals do not overlap.
"""

from __future__ import annotations

from pathlib import Path

from envharness.eval.runfolder import RunFolder, read_episodes
from envharness.eval.stats import TaskStats, summarize


def load_run(path: str | Path) -> tuple[str, dict[str, TaskStats]]:
    """(label, per-task stats) of a run folder; ValueError when it holds no episodes."""
    folder = RunFolder(Path(path))
    records = read_episodes(folder.episodes)
    if not records:
        raise ValueError(f"{folder.path} holds no episodes ({folder.episodes} is missing or empty)")
    config = folder.read_config() or {}
    tasks = [t for t in config.get("tasks", []) if any(str(r.get("task")) == t for r in records)]
    label = f"{folder.path.name} ({config.get('model', '?')})"
    return label, {s.task: s for s in summarize(records, tasks or None)}


def _cell(s: TaskStats | None) -> str:
    if s is None:
        return "-"
    return f"{s.success_rate:.2f} [{s.ci_low:.2f},{s.ci_high:.2f}] n={s.episodes} steps={s.mean_steps:.1f}"


def compare_table(path_a: str | Path, path_b: str | Path) -> str:
    """The side-by-side table as text."""
    label_a, a = load_run(path_a)
    label_b, b = load_run(path_b)
    tasks = [t for t in a if t != "all"] + [t for t in b if t not in a and t != "all"]
    if len(tasks) > 1:
        tasks.append("all")
    rows = [("task", f"A: {label_a}", f"B: {label_b}", "B-A")]
    for task in tasks:
        sa, sb = a.get(task), b.get(task)
        if sa is not None and sb is not None:
            separate = sa.ci_high < sb.ci_low or sb.ci_high < sa.ci_low
            diff = f"{sb.success_rate - sa.success_rate:+.2f}{' *' if separate else ''}"
        else:
            diff = "-"
        rows.append((task, _cell(sa), _cell(sb), diff))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("success rate [Wilson 95% CI]; * = the intervals do not overlap")
    return "\n".join(lines)
