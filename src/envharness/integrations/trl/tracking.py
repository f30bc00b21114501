"""Experiment tracking for `envharness train --report-to`: which trackers, and their settings.

Nothing leaves the machine unless asked: the default is ``none``; ``tensorboard`` writes
event files under ``<output_dir>/runs/``; ``trackio`` logs to its local database
(``trackio show`` opens the dashboard) and never creates a Hugging Face Space here (set
``TRACKIO_SPACE_ID`` yourself to sync to one); ``wandb`` uploads to Weights & Biases unless
``WANDB_MODE=offline``. A tracker whose package is missing is refused before the run
starts, with the install command, instead of failing after the model has loaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

REPORT_TO = ("none", "tensorboard", "trackio", "wandb")

#: tracker -> (modules any one of which makes it work, what to install)
_NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "tensorboard": (("tensorboard", "tensorboardX"), "pip install tensorboardX  (or tensorboard)"),
    "trackio": (("trackio",), "pip install trackio"),
    "wandb": (("wandb",), "pip install wandb"),
}


class TrackerUnavailableError(ValueError):
    """`--report-to` names an unknown tracker, or one whose package is not installed."""


def check_report_to(report_to: str) -> None:
    """Raise `TrackerUnavailableError` (in words, with the fix) unless `report_to` can run here."""
    if report_to not in REPORT_TO:
        raise TrackerUnavailableError(f"unknown tracker {report_to!r}; choose from {', '.join(REPORT_TO)}")
    if report_to == "none":
        return
    modules, install = _NEEDS[report_to]
    if not any(importlib.util.find_spec(m) is not None for m in modules):
        raise TrackerUnavailableError(
            f"--report-to {report_to} needs the {report_to} package, which is not installed: {install}"
        )


def grpo_tracking_options(
    report_to: str, output_dir: str | Path, project: str = "envharness"
) -> dict[str, Any]:
    """`GRPOConfig` keyword arguments for `report_to` (a checked tracker name)."""
    if report_to == "none":
        return {"report_to": "none"}
    options: dict[str, Any] = {
        "report_to": [report_to],
        "run_name": Path(output_dir).name or "train",
        "project": project,
    }
    if report_to == "trackio":
        options.update(trackio_space_id=None, trackio_static_space_id=False)  # local only
    return options
