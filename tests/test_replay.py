"""`envharness replay`: a run's episodes played again on a fresh server come out the same
(MiniWoB, a web-task module, Wordle), and an altered record is caught at its step."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from envharness.cli import main as cli_main
from envharness.replay import replay_run

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _eval(out: Path, *args: str) -> Path:
    code = cli_main(
        ["eval", *args, "--out", str(out), "--no-progress", "--no-screenshots", "--max-new-tokens", "16"]
    )
    assert code == 0
    return out


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]


def _rewrite(folder: Path, records: list[dict]) -> None:
    (folder / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def miniwob_run(tmp_path_factory) -> Path:
    """The embedded model sampling at temperature 1: clicks that miss, refused arguments, noops, wins."""
    return _eval(
        tmp_path_factory.mktemp("replay") / "miniwob",
        "--model",
        "embedded",
        "--temperature",
        "1",
        "--tasks",
        "click-test,click-checkboxes,enter-text",
        "--episodes",
        "3",
        "--max-steps",
        "4",
    )


def test_a_miniwob_run_replays_identically(miniwob_run, capsys):
    records = _records(miniwob_run)
    # the run is worth replaying: several steps, and observations fingerprinted (reset + each step)
    assert sum(len(r["tool_calls"]) for r in records) >= 9
    assert all(len(r["observation_digests"]) >= 1 for r in records)
    assert cli_main(["replay", str(miniwob_run)]) == 0
    printed = capsys.readouterr().out
    assert "9/9 episodes identical, 0 different, 0 skipped (browsergym, eval run)" in printed
    report = json.loads((miniwob_run / "replay.json").read_text())
    assert report["identical"] == 9 and all(e["identical"] and not e["findings"] for e in report["results"])


def test_an_altered_action_is_a_difference_at_its_step(miniwob_run, tmp_path, capsys):
    altered = tmp_path / "altered"
    altered.mkdir()
    for name in ("config.json", "episodes.jsonl"):
        (altered / name).write_bytes((miniwob_run / name).read_bytes())
    records = _records(altered)
    target = next(r for r in records if any(c["name"] == "click" for c in r["tool_calls"]))
    step = next(i for i, c in enumerate(target["tool_calls"], 1) if c["name"] == "click")
    target["tool_calls"][step - 1]["arguments"]["bid"] = "9999"  # an element that is not on the page
    _rewrite(altered, records)
    assert cli_main(["replay", str(altered)]) == 1
    printed = capsys.readouterr().out
    assert f"DIFFERENT  {target['episode_id']}: step {step}:" in printed
    assert "8/9 episodes identical, 1 different" in printed
    report = json.loads((altered / "replay.json").read_text())
    found = next(e for e in report["results"] if e["episode_id"] == target["episode_id"])
    assert found["findings"][0]["step"] == step
    assert {f["what"] for f in found["findings"] if f["step"] == step} >= {"the observation", "the error"}


def test_an_altered_reward_and_first_page_are_differences(miniwob_run, tmp_path):
    altered = tmp_path / "altered"
    altered.mkdir()
    for name in ("config.json", "episodes.jsonl"):
        (altered / name).write_bytes((miniwob_run / name).read_bytes())
    records = _records(altered)
    records[0]["observation_digests"][0] = "0" * 16  # another first page
    records[1]["env_reward"] = 0.5  # a reward the environment never gave
    _rewrite(altered, records)
    report = replay_run(altered)
    by_id = {e.episode_id: e for e in report.episodes}
    first = by_id[records[0]["episode_id"]].first_difference
    assert (first.step, first.what) == (0, "the first observation")
    assert any(
        f.what == "the episode's reward" and f.recorded == 0.5
        for f in by_id[records[1]["episode_id"]].findings
    )
    assert report.identical == 7


def test_a_web_task_module_and_wordle_replay_identically(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the web tasks' module, here and in the servers started
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(EXAMPLES), *filter(None, [os.environ.get("PYTHONPATH")])])
    )
    web = _eval(
        tmp_path / "web",
        "--env",
        "browsergym",
        "--env-option",
        "tasks=webtasks.formtasks",
        "--model",
        "scripted",
        "--tasks",
        "all",
        "--episodes",
        "2",
        "--max-steps",
        "6",
    )
    wordle = _eval(
        tmp_path / "wordle",
        "--env",
        "textarena",
        "--model",
        "embedded",
        "--temperature",
        "1",
        "--tasks",
        "Wordle-v0",
        "--episodes",
        "3",
        "--max-steps",
        "3",
    )
    assert sum(len(r["tool_calls"]) for r in _records(wordle)) >= 6
    capsys.readouterr()
    assert cli_main(["replay", str(web)]) == 0
    assert "6/6 episodes identical" in capsys.readouterr().out
    assert cli_main(["replay", str(wordle)]) == 0
    assert "3/3 episodes identical, 0 different, 0 skipped (textarena, eval run)" in capsys.readouterr().out
    records = _records(wordle)  # another guess at the first move: the game's answer differs there
    records[0]["tool_calls"][0]["arguments"]["message"] = "[zzzzz]"
    _rewrite(wordle, records)
    report = replay_run(wordle)
    assert report.identical == 2 and report.differing[0].first_difference.step == 1


def test_a_folder_that_is_not_a_run_is_refused(tmp_path, capsys):
    assert cli_main(["replay", str(tmp_path)]) == 2
    assert "neither config.json (eval) nor train_config.json (train)" in capsys.readouterr().err
    (tmp_path / "train_config.json").write_text(json.dumps({"env": "browsergym", "agent": "agents.py:play"}))
    assert cli_main(["replay", str(tmp_path)]) == 2
    assert "--agent" in capsys.readouterr().err


def _folder(path: Path, config: dict, records: str = '{"version": 1, "task": "t"}\n') -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "episodes.jsonl").write_text(records)
    return path


def test_a_broken_or_empty_run_is_refused_in_words(tmp_path, capsys):
    wrong = {"env_options": "notadict", "tasks": 5, "actions": 7, "mix": "x", "env": 3}
    for field, value in wrong.items():
        folder = _folder(tmp_path / field, {"env": "echo", field: value})
        assert cli_main(["replay", str(folder)]) == 2, field
        err = capsys.readouterr().err
        assert f"config.json is not a run's config: {field}" in err and "Traceback" not in err, err
    assert cli_main(["replay", str(tmp_path / "nowhere")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    assert cli_main(["replay", str(_folder(tmp_path / "empty", {"env": "echo"}, records=""))]) == 2
    assert "holds no episodes: nothing to replay" in capsys.readouterr().err


def test_replay_never_runs_code_from_the_run_folder(tmp_path, capsys, monkeypatch):
    folder = _folder(tmp_path / "run", {"env": "planted:SPEC"})
    marker = tmp_path / "ran"
    (folder / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\nSPEC = None\n")
    monkeypatch.chdir(folder)
    monkeypatch.delenv("ENVHARNESS_NO_CWD_IMPORT", raising=False)
    assert cli_main(["replay", "."]) == 2
    err = capsys.readouterr().err
    assert "never imports code from the run's folder" in err and "--env" in err, err
    assert not marker.exists()  # the planted module was never imported
    assert "planted" not in sys.modules
    assert os.environ.get("ENVHARNESS_NO_CWD_IMPORT") is None  # put back after the command
