"""What eval counts, said: replies without an action are a column of their own (terminal table,
summary.json, report.html); report.html says `errors` as the table does, shows partial credit
apart, and shows nothing of a browser for an environment without screenshots. User environments
from the tests' folder (`ledger_env.py`, `countdown_env.py`), real servers on loopback."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from envharness.cli import main as cli_main

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


def run_eval(env: str, out: Path, capsys, *extra: str) -> str:
    argv = ["eval", "--env", env, "--model", "scripted", "--episodes", "2", "--max-turns", "3"]
    assert cli_main([*argv, *extra, "--out", str(out), "--no-progress"]) == 0
    return capsys.readouterr().out


def test_replies_without_an_action_are_counted_everywhere(tmp_path, capsys):
    """A model whose every reply holds no amount: 0 success and 0 errors, and now 6 replies
    (2 episodes x 3 turns) without an action, said in each of eval's outputs."""
    out = tmp_path / "mute"
    table = run_eval("ledger_env:MUTE", out, capsys)
    header = next(line for line in table.splitlines() if line.startswith("task"))
    row = next(line for line in table.splitlines() if line.startswith("ledger-10"))
    cells = dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", row.strip())))
    assert cells["no action"] == "6" and cells["errors"] == "0" and cells["success"] == "0.00"
    summary = json.loads((out / "summary.json").read_text())["tasks"][0]
    assert summary["no_action"] == 6 and summary["errors"] == 0
    html = (out / "report.html").read_text()
    assert "<th>no action</th>" in html and "<td>6</td>" in html
    assert "3 replies without an action" in html
    text = (DOCS / "commands.md").read_text()
    for key in json.loads((out / "config.json").read_text()):  # every setting config.json holds
        assert f"`{key}`" in text[text.index("`config.json` holds") :], key


def test_the_report_says_errors_and_partial_credit_and_nothing_of_a_browser(tmp_path, capsys):
    out = tmp_path / "near"
    run_eval("countdown_env:NEAR_MISS", out, capsys, "--tasks", "countdown-easy")
    html = (out / "report.html").read_text()
    assert "crashed" not in html and "<th>errors</th>" in html  # the table's word
    assert "<th>partial</th>" in html
    badges = re.findall(r'<span class="badge">([^<]*)</span>', html)
    assert badges == ["partial credit", "partial credit"]  # not "failure" with a reward of 0.9
    for browser_word in (
        "no screenshot",
        "screenshot_max_side",
        "screenshots=",
        "vision=",
        "browser",
        "axtree",
    ):
        assert browser_word not in html, browser_word
    assert "observation_tokens=1024" in html


def test_every_column_and_config_json_are_documented():
    """docs/commands.md defines each column of eval's table and summary.json, and config.json."""
    text = (DOCS / "commands.md").read_text()
    section = text[text.index("### What eval writes") : text.index("## Options shared by eval and train")]
    for column in (
        "`n`",
        "`success`",
        "`reward`",
        "`steps`",
        "`tokens`",
        "`time/ep`",
        "`errors`",
        "`no action`",
        "`partial`",
        "`infra`",
        "`env bugs`",
        "`config.json`",
    ):
        assert column in section, column
    from envharness.eval.stats import TaskStats

    for field in TaskStats.__dataclass_fields__:  # summary.json's keys
        assert f"`{field}`" in section, field
