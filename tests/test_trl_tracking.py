"""`envharness train --report-to`: none by default, tensorboard end to end, missing trackers refused in words."""

from __future__ import annotations

import importlib.util
import os

import pytest

from envharness.cli import main as cli_main
from envharness.integrations.trl.grpo_args import grpo_config
from envharness.integrations.trl.tracking import (
    TrackerUnavailableError,
    check_report_to,
    grpo_tracking_options,
)
from envharness.integrations.trl.training import TrainConfig

pytestmark = pytest.mark.timeout(300)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_nothing_is_reported_unless_asked(tmp_path):
    assert TrainConfig().report_to == "none"
    assert (
        grpo_config(TrainConfig(output_dir=str(tmp_path))).report_to == []
    )  # transformers' spelling of none


def test_trackio_stays_local_when_asked(tmp_path):
    options = grpo_tracking_options("trackio", tmp_path / "run-7")
    assert options == {
        "report_to": ["trackio"],
        "run_name": "run-7",
        "project": "envharness",
        "trackio_space_id": None,
        "trackio_static_space_id": False,
    }


@pytest.mark.parametrize("tracker", ["trackio", "wandb"])
def test_a_missing_tracker_is_refused_before_anything_loads(tracker, tmp_path, capsys):
    if importlib.util.find_spec(tracker) is not None:
        pytest.skip(f"{tracker} is installed here")
    with pytest.raises(TrackerUnavailableError, match=f"pip install {tracker}"):
        check_report_to(tracker)
    rc = cli_main(["train", "--model", "tiny", "--report-to", tracker, "--output-dir", str(tmp_path / "run")])
    assert rc == 2  # refused before anything loads, like any bad argument
    assert (
        f"--report-to {tracker} needs the {tracker} package, which is not installed: pip install {tracker}"
        in capsys.readouterr().err
    )


def test_an_unknown_tracker_is_refused(capsys):
    with pytest.raises(TrackerUnavailableError, match="unknown tracker 'mlflow'"):
        check_report_to("mlflow")
    with pytest.raises(SystemExit):
        cli_main(["train", "--report-to", "mlflow"])
    assert "invalid choice: 'mlflow'" in capsys.readouterr().err


def test_train_reports_to_tensorboard(tmp_path):
    if importlib.util.find_spec("tensorboard") is None and importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("neither tensorboard nor tensorboardX is installed")
    out = tmp_path / "run"
    rc = cli_main(
        [
            "train",
            "--model",
            "tiny",
            "--steps",
            "1",
            "--output-dir",
            str(out),
            "--num-generations",
            "2",
            "--groups-per-step",
            "1",
            "--max-completion-length",
            "4",
            "--report-to",
            "tensorboard",
        ]
    )
    assert rc == 0
    events = list((out / "runs").rglob("events.out.tfevents.*"))
    data = b"".join(e.read_bytes() for e in events)
    assert b"train/reward" in data and b"train/loss" in data  # the step's scalars, by tag
