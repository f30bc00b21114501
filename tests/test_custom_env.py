"""A user's own environment goes everywhere MiniWoB goes, with nothing in envharness naming it:
served, evaluated with its scripted policy over every task of its listing, trained for a GRPO
step, replayed, played over MCP and described to `/web`. Both forms of the same game: the
short one (`examples/custom_env/guess.py`: `define_environment` derives the rest) and the long
one (`number_guess.py`: its own session factory, parser and prompt styles)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from envharness.cli import main as cli_main
from envharness.core.launchers import LocalServer
from envharness.harness import read_records

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_env"
SPEC = "number_guess:SPEC"
FORMS = ["guess:SPEC", SPEC]  # short, long
pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The example's module on the path here and in the servers started as child processes."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(EXAMPLE), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


@pytest.mark.parametrize("spec", FORMS)
def test_eval_plays_every_listed_task_with_the_scripted_policy(spec, tmp_path, capsys):
    out = tmp_path / "eval"
    code = cli_main(
        [
            "eval",
            "--env",
            spec,
            "--model",
            "scripted",
            "--tasks",
            "all",
            "--episodes",
            "3",
            "--max-turns",
            "12",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    rates = {t["task"]: t["success_rate"] for t in summary["tasks"]}
    assert rates == {"guess-10": 1.0, "guess-100": 1.0, "guess-1000": 1.0, "all": 1.0}
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    hard = [e for e in episodes if e["task"] == "guess-1000"]
    assert all(len(e["steps"]) <= 10 for e in hard)  # bisection: at most ceil(log2(1000)) guesses
    assert [s["action"] for s in hard[0]["steps"]][0] == "500"
    capsys.readouterr()
    assert cli_main(["replay", str(out)]) == 0  # the same seeds and guesses give the same games
    assert "9/9 episodes identical" in capsys.readouterr().out


def test_a_split_name_and_a_bad_task_or_prompt(tmp_path, capsys):
    assert (
        cli_main(
            [
                "eval",
                "--env",
                SPEC,
                "--model",
                "scripted",
                "--tasks",
                "easy",
                "--episodes",
                "1",
                "--out",
                str(tmp_path / "a"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["tasks"][0]["task"] == "guess-10"
    capsys.readouterr()
    assert cli_main(["eval", "--env", SPEC, "--tasks", "guess-7", "--out", str(tmp_path / "b")]) == 2
    assert "unknown task 'guess-7'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(
            ["eval", "--env", SPEC, "--prompt", "compact", "--out", str(tmp_path / "c")]
        )  # the browser's style
    assert "unknown prompt style 'compact'" in capsys.readouterr().err


@pytest.mark.parametrize("spec", FORMS)
def test_one_grpo_step_trains_on_it(spec, tmp_path, capsys):
    out = tmp_path / "train"
    code = cli_main(
        [
            "train",
            "--env",
            spec,
            "--model",
            "tiny",
            "--steps",
            "1",
            "--max-turns",
            "2",
            "--num-generations",
            "2",
            "--groups-per-step",
            "1",
            "--max-new-tokens",
            "6",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    records = read_records(out / "episodes.jsonl")
    assert len(records) == 2 and all(r.task == "guess-100" and r.error is None for r in records)
    assert all(r.tool_calls and r.tool_calls[0]["name"] == "guess" for r in records)
    assert json.loads((out / "train_config.json").read_text())["env"] == spec


@pytest.mark.parametrize("spec, field", [("guess:SPEC", "number"), (SPEC, "guess")])
def test_served_mcp_tools_and_web_info(spec, field):
    with LocalServer(spec, web=True) as server:
        info = httpx.get(f"{server.base_url}/web/info").json()
        assert info["env"] == spec and field in info["action_schema"]["properties"]
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        reply = httpx.post(f"{server.base_url}/mcp", json=body, headers=headers)
        assert reply.status_code == 200, reply.text
        names = {t["name"] for t in reply.json()["result"]["tools"]}
        assert {"reset", "step", "state"} <= names  # the generic tools of an environment that brings none


def test_the_short_form_derives_its_tool_parser_and_tasks():
    """What `define_environment` derives from the environment class: the tool from the action
    type, a plain reply read as its argument, the task list and its check."""
    from envharness.core.registry import env_harness

    harness = env_harness("guess:SPEC")
    factory = harness.session_factory(lambda: None)
    assert factory.tool_specs == [
        {
            "name": "guess",
            "description": "Guess the number.",
            "inputSchema": {
                "type": "object",
                "properties": {"number": {"type": "integer", "description": "your guess"}},
                "required": ["number"],
            },
        }
    ]
    assert harness.tool_call_parser("I think it is 42.").args == {"number": 42}
    assert harness.tool_call_parser('{"name": "guess", "arguments": {"number": 7}}')[0].args == {"number": 7}
    assert harness.tool_call_parser("no idea").metadata["parse_error"].startswith("no number")
    assert harness.task_list().tasks == ("guess-10", "guess-100", "guess-1000") and harness.default_tasks == (
        "guess-100",
    )
    with pytest.raises(ValueError, match="unknown task 'guess-7'"):
        harness.check_task("guess-7")
    assert (
        len((EXAMPLE / "guess.py").read_text().splitlines()) <= 66
    )  # the whole game, evaluable and trainable
