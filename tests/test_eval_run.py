"""`envharness eval` end to end: real browser server on loopback, real Chromium, scripted model.

One scripted run (started by the command itself, server included) is shared by the tests
that read its folder; resume works on a copy of it.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from io import BytesIO

import pytest
from PIL import Image

from envharness.cli import main
from envharness.eval.runfolder import read_episodes
from envharness.prompts.text import PromptContext

TASKS = ["click-test", "click-button", "focus-text", "enter-text"]
EPISODES = 2
CHROMIUM = "/usr/lib/chromium/chromium"


def eval_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["eval", "--no-progress", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    """`envharness eval --model scripted` over four tasks; returns (folder, printed output)."""
    out = tmp_path_factory.mktemp("eval") / "scripted"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # capsys is function-scoped
        code = main(
            [
                "eval",
                "--no-progress",
                "--model",
                "scripted",
                "--tasks",
                ",".join(TASKS),
                "--episodes",
                str(EPISODES),
                "--out",
                str(out),
            ]
        )
    assert code == 0, buffer.getvalue()
    return out, buffer.getvalue()


def test_scripted_model_solves_every_scripted_task(scripted_run):
    folder, printed = scripted_run
    summary = json.loads((folder / "summary.json").read_text())
    rates = {row["task"]: (row["success_rate"], row["episodes"], row["errors"]) for row in summary["tasks"]}
    assert rates == {task: (1.0, EPISODES, 0) for task in TASKS} | {"all": (1.0, EPISODES * len(TASKS), 0)}
    # The printed table: one row per task and the overall row, then the paths written.
    rows = {
        line.split()[0]: line.split()
        for line in printed.splitlines()
        if line.split() and line.split()[0] in TASKS + ["all"]
    }
    assert set(rows) == set(TASKS) | {"all"}
    assert all(row[1:3] == [str(EPISODES), "1.00"] for task, row in rows.items() if task != "all")
    assert rows["all"][1:3] == [str(EPISODES * len(TASKS)), "1.00"]
    for name in ("episodes.jsonl", "report.html", "success_rate.png", "summary.json"):
        assert str(folder / name) in printed


def test_episode_lines_hold_every_step(scripted_run):
    folder, _ = scripted_run
    records = read_episodes(folder / "episodes.jsonl")
    assert sorted((r["task"], r["seed"]) for r in records) == sorted(
        (t, s) for t in TASKS for s in range(EPISODES)
    )
    for record in records:
        assert record["env_reward"] == 1.0 and record["done"] and record["error"] is None
        assert record["goal"] and record["model"] == "scripted"
        steps = record["steps"]
        assert steps and steps[-1]["reward"] == 1.0 and steps[-1]["done"]
        for step in steps:
            assert step["prompt"][-1]["content"].startswith(f"Goal: {record['goal']}\n")
            assert step["completion"] and step["action"] and step["error"] == "" and step["executed"]
            with Image.open(folder / step["screenshot"]) as shot:
                assert shot.format == "JPEG" and shot.width > 300
        assert (folder / record["final_screenshot"]).is_file()
    enter_text = [r for r in records if r["task"] == "enter-text"]
    assert all([s["action"].split("(")[0] for s in r["steps"]] == ["fill", "click"] for r in enter_text)


def test_plot_is_written(scripted_run):
    folder, _ = scripted_run
    with Image.open(folder / "success_rate.png") as image:
        assert image.format == "PNG" and image.width > 300
        assert len(set(image.convert("RGB").getdata())) > 20


def test_html_report_renders_in_headless_chromium(scripted_run):
    from playwright.sync_api import sync_playwright

    folder, _ = scripted_run
    html = (folder / "report.html").read_text()
    assert 'src="screenshots/' not in html and "data:image/jpeg;base64," in html  # self-contained
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto((folder / "report.html").as_uri())
            page.evaluate("document.querySelectorAll('details.episode').forEach(d => d.open = true)")
            images = page.evaluate("Array.from(document.images).map(i => i.complete && i.naturalWidth > 0)")
            rows = page.locator("table.summary tr").count()
            png = page.screenshot(full_page=False)
        finally:
            browser.close()
    steps = sum(len(r["steps"]) for r in read_episodes(folder / "episodes.jsonl"))
    # the plot, one screenshot per step and one final page per episode, all decoded
    assert images == [True] * (1 + steps + EPISODES * len(TASKS))
    assert rows == 1 + len(TASKS) + 1
    with Image.open(BytesIO(png)) as shot:
        colours = len(set(shot.convert("RGB").getdata()))
    assert colours > 200, f"the rendered report looks blank ({colours} distinct colours)"


def test_resume_runs_only_missing_and_crashed_episodes(scripted_run, tmp_path, capsys):
    folder, _ = scripted_run
    copy = tmp_path / "resumed"
    shutil.copytree(folder, copy)
    lines = (copy / "episodes.jsonl").read_text().splitlines()
    crashed = json.loads(lines[0]) | {"error": "ConnectionError: the server went away", "env_reward": 0.0}
    lines[0] = json.dumps(crashed)
    (copy / "episodes.jsonl").write_text("\n".join(lines) + "\n")

    code, out, _ = eval_cli(
        capsys,
        "--model",
        "scripted",
        "--tasks",
        ",".join(TASKS),
        "--episodes",
        str(EPISODES + 1),
        "--out",
        str(copy),
        "--resume",
    )
    assert code == 0
    new = len(TASKS) + 1  # episode index 2 of every task, and the crashed one again
    assert f"({new} run now, {EPISODES * len(TASKS) - 1} from before)" in out
    after = (copy / "episodes.jsonl").read_text().splitlines()
    assert after[: len(lines)] == lines and len(after) == len(lines) + new  # appended, nothing rewritten
    redone = [json.loads(line) for line in after[len(lines) :]]
    assert sorted((r["task"], r["seed"]) for r in redone) == sorted(
        [(t, EPISODES) for t in TASKS] + [(crashed["task"], crashed["seed"])]
    )
    records = read_episodes(copy / "episodes.jsonl")
    assert len(records) == (EPISODES + 1) * len(TASKS) and all(r["env_reward"] == 1.0 for r in records)

    # Nothing left to do: a second resume runs nothing and reports the same table.
    code, out, _ = eval_cli(
        capsys,
        "--model",
        "scripted",
        "--tasks",
        ",".join(TASKS),
        "--episodes",
        str(EPISODES + 1),
        "--out",
        str(copy),
        "--resume",
    )
    assert code == 0 and f"(0 run now, {(EPISODES + 1) * len(TASKS)} from before)" in out


def test_a_finished_run_folder_is_not_mixed_with_other_settings(scripted_run, tmp_path, capsys):
    folder, _ = scripted_run
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    before = (copy / "episodes.jsonl").read_text()
    code, _, err = eval_cli(capsys, "--model", "scripted", "--tasks", "click-test", "--out", str(copy))
    assert code == 2 and "--resume" in err and "--overwrite" in err
    code, _, err = eval_cli(
        capsys, "--model", "embedded", "--tasks", "click-test", "--out", str(copy), "--resume"
    )
    assert code == 2 and "model: 'scripted' -> 'embedded'" in err
    assert (copy / "episodes.jsonl").read_text() == before


def test_refused_actions_are_recorded_and_shown_to_the_model(browser_server, tmp_path, capsys):
    # Only fill and noop are enabled: the scripted model's click on Submit is refused by the harness.
    out = tmp_path / "refused"
    code, _, _ = eval_cli(
        capsys,
        "--model",
        "scripted",
        "--tasks",
        "enter-text",
        "--episodes",
        "1",
        "--max-steps",
        "3",
        "--actions",
        "fill,noop",
        "--out",
        str(out),
        "--env-url",
        browser_server.base_url,
    )
    assert code == 0
    (record,) = read_episodes(out / "episodes.jsonl")
    assert record["error"] is None and record["env_reward"] == 0.0
    fill, click, again = record["steps"]
    assert fill["action"].startswith("fill('") and fill["reward"] == 0.0 and fill["error"] == ""
    refusal = "Error: unknown tool 'click'; available tools: fill, noop"
    assert click["action"].startswith("click(") and click["error"] == refusal and click["reward"] is None
    assert f"Last action error: {refusal}" in again["prompt"][-1]["content"]
    assert again["executed"] and again["error"] == refusal  # the last step, closed when the episode ended


def blind_prompt(ctx: PromptContext) -> list[dict]:
    """A user prompt builder that leaves the page out: the scripted model cannot act on it."""
    return [{"role": "user", "content": f"Goal: {ctx.goal}\nStep {ctx.step}."}]


def test_custom_prompt_and_compare(scripted_run, browser_server, tmp_path, capsys):
    folder, _ = scripted_run
    blind = tmp_path / "blind"
    code, out, _ = eval_cli(
        capsys,
        "--model",
        "scripted",
        "--tasks",
        "click-test,focus-text",
        "--episodes",
        str(EPISODES),
        "--max-steps",
        "2",
        "--prompt",
        f"{__name__}:blind_prompt",
        "--out",
        str(blind),
        "--env-url",
        browser_server.base_url,
    )
    assert code == 0
    records = read_episodes(blind / "episodes.jsonl")
    assert all(r["env_reward"] == 0.0 and len(r["steps"]) == 2 for r in records)  # noop until max steps
    assert all(
        s["prompt"] == blind_prompt(PromptContext(goal=r["goal"], step=s["index"]))
        for r in records
        for s in r["steps"]
    )

    code, out, _ = eval_cli(capsys, "--compare", str(folder), str(blind))
    assert code == 0
    header, _, *rows = out.splitlines()
    assert f"A: {folder.name} (scripted)" in header and "B: blind (scripted)" in header
    by_task = {row.split()[0]: row for row in rows if row.split()}
    assert (
        f"1.00 [0.34,1.00] n={EPISODES}" in by_task["click-test"]
        and f"0.00 [0.00,0.66] n={EPISODES}" in by_task["click-test"]
    )
    assert by_task["click-test"].rstrip().endswith("-1.00")
    assert by_task["enter-text"].split()[-2:] == ["-", "-"]  # a task only run A has


def test_bad_options_fail_before_anything_starts(tmp_path, capsys):
    for args, reason in [
        (["--tasks", "click-nothing"], "unknown MiniWoB task"),
        (["--episodes", "0"], "--episodes must be at least 1"),
        (["--actions", "click,teleport"], "unknown BrowserGym tool(s) ['teleport']"),
        (["--prompt", "nowhere:builder"], "cannot import"),
    ]:
        code, _, err = eval_cli(capsys, "--model", "scripted", "--out", str(tmp_path / "bad"), *args)
        assert code == 2 and reason in err, (args, err)
    assert not (tmp_path / "bad").exists()
