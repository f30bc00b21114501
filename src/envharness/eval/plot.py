"""The success-rate chart of a run: one bar per task with its Wilson 95% interval as whiskers.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, so no global backend is
switched and no window can open).
"""

from __future__ import annotations

from pathlib import Path

from envharness.eval.stats import TaskStats


def plot_success_rates(
    stats: list[TaskStats], path: str | Path, *, title: str = "Success rate per task"
) -> Path:
    """Write the chart as PNG to `path` and return it. An `all` row is drawn in another colour."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = [s.task for s in stats]
    rates = [s.success_rate for s in stats]
    lower = [max(0.0, s.success_rate - s.ci_low) for s in stats]
    upper = [max(0.0, s.ci_high - s.success_rate) for s in stats]
    colours = ["#7f7f7f" if s.task == "all" else "#3b75af" for s in stats]

    fig = Figure(figsize=(max(4.0, 0.9 * len(stats) + 1.5), 3.6), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    positions = range(len(stats))
    ax.bar(positions, rates, color=colours, yerr=[lower, upper], capsize=4, ecolor="#222222")
    for x, s in zip(positions, stats):
        ax.text(
            x,
            min(1.02, s.ci_high + 0.02),
            f"{s.successes}/{s.episodes}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(list(positions), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("success rate (95% CI)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
