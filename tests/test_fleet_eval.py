"""`envharness eval --env-urls A,B`: episodes spread over two real browser servers give the
same report as one server; bad fleet flags are clear errors."""

from __future__ import annotations

import json

import httpx
import pytest

from envharness.cli import main
from envharness.core.launchers import LocalServer

TASKS = "click-test,enter-text"
SAME = (
    "task",
    "episodes",
    "successes",
    "ci_low",
    "ci_high",
    "mean_reward",
    "mean_steps",
    "mean_tokens",
    "errors",
    "infra_failures",
)


def summary_rows(folder) -> list[dict]:
    rows = json.loads((folder / "summary.json").read_text())["tasks"]
    return [{k: row[k] for k in SAME} for row in rows]


def test_eval_over_two_servers_gives_the_single_server_report(tmp_path, capsys):
    with LocalServer("browsergym") as a, LocalServer("browsergym") as b:
        common = [
            "eval",
            "--no-progress",
            "--no-screenshots",
            "--model",
            "scripted",
            "--tasks",
            TASKS,
            "--episodes",
            "3",
        ]
        assert main([*common, "--out", str(tmp_path / "one"), "--env-url", a.base_url]) == 0
        opened = [httpx.get(f"{s.base_url}/health").json()["sessions_opened"] for s in (a, b)]
        assert (
            main([*common, "--out", str(tmp_path / "two"), "--env-urls", f"{a.base_url},{b.base_url}"]) == 0
        )
        after = [httpx.get(f"{s.base_url}/health").json()["sessions_opened"] for s in (a, b)]
    assert all(x > y for x, y in zip(after, opened)), "both servers took episodes"
    one, two = summary_rows(tmp_path / "one"), summary_rows(tmp_path / "two")
    assert one == two and one[-1]["successes"] == 6
    printed = capsys.readouterr().out
    tables = [chunk.split("\n\n")[0] for chunk in printed.split("episode(s) each")[1:]]
    assert len(tables) == 2 and [ln.split()[:3] for ln in tables[0].splitlines()[1:]] == [
        ln.split()[:3] for ln in tables[1].splitlines()[1:]
    ]


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--env-url", "http://127.0.0.1:9", "--env-urls", "http://127.0.0.1:9"],
            "one of --env-url, --env-urls and --servers",
        ),
        (["--ray-address", "auto"], "--ray-address needs --servers"),
    ],
)
def test_bad_fleet_flags_are_clear_errors(tmp_path, capsys, flags, message):
    code = main(
        [
            "eval",
            "--no-progress",
            "--model",
            "scripted",
            "--tasks",
            "click-test",
            "--out",
            str(tmp_path / "x"),
            *flags,
        ]
    )
    assert code == 2 and message in capsys.readouterr().err


def test_train_flags_are_checked_before_anything_starts():
    import argparse

    from envharness.cli import train
    from envharness.integrations.trl.checks import check_config
    from envharness.integrations.trl.errors import TrainSetupError

    parser = argparse.ArgumentParser()
    train.add_arguments(parser)
    config = train.config_from_args(parser.parse_args(["--env-urls", "http://a:1,http://b:2"]))
    assert config.env_urls == ["http://a:1", "http://b:2"] and config.servers == 0
    with pytest.raises(TrainSetupError, match="one of --env-url, --env-urls and --servers"):
        check_config(train.config_from_args(parser.parse_args(["--servers", "2", "--env-url", "http://a:1"])))
    with pytest.raises(TrainSetupError, match="--ray-address needs --servers"):
        check_config(train.config_from_args(parser.parse_args(["--ray-address", "auto"])))


def test_train_over_two_servers_runs_every_episode(tmp_path):
    import os

    from envharness.harness import read_records
    from envharness.integrations.trl.servers import train_server_options

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    out = tmp_path / "run"
    with (
        LocalServer("browsergym", **train_server_options("browsergym")) as a,
        LocalServer("browsergym", **train_server_options("browsergym")) as b,
    ):
        code = main(
            [
                "train",
                "--model",
                "tiny",
                "--steps",
                "1",
                "--save-steps",
                "1",
                "--output-dir",
                str(out),
                "--num-generations",
                "2",
                "--groups-per-step",
                "2",
                "--max-completion-length",
                "8",
                "--env-urls",
                f"{a.base_url},{b.base_url}",
            ]
        )
        opened = [httpx.get(f"{s.base_url}/health").json()["sessions_opened"] for s in (a, b)]
    assert code == 0
    records = read_records(out / "episodes.jsonl")
    assert len(records) == 4 and all(r.error is None and not r.metrics.get("infra_failure") for r in records)
    assert all(n > 0 for n in opened), "the episodes were spread over both servers"
