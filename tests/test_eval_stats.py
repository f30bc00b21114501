"""Eval numbers and run folders without a browser: Wilson intervals, per-task stats, the
terminal table, the PNG chart, reading episode lines back (resume), comparing two runs."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from envharness.eval.compare import compare_table
from envharness.eval.plot import plot_success_rates
from envharness.eval.runfolder import cut_partial_line, finished_keys, identity_mismatch, read_episodes
from envharness.eval.stats import format_table, summarize, wilson_interval


@pytest.mark.parametrize(
    "k, n, expected",
    [  # the other closed form, (k + z²/2 ± z·sqrt(k(n-k)/n + z²/4)) / (n + z²), worked out apart
        # (e.g. 0/10's upper bound is z²/(n + z²) = 0.27753)
        (0, 10, (0.0, 0.27753)),
        (5, 10, (0.23659, 0.76341)),
        (10, 10, (0.72247, 1.0)),
        (1, 4, (0.04559, 0.69936)),
        (37, 50, (0.60447, 0.84128)),
    ],
)
def test_wilson_interval_matches_reference_values(k, n, expected):
    low, high = wilson_interval(k, n)
    assert low == pytest.approx(expected[0], abs=1e-4) and high == pytest.approx(expected[1], abs=1e-4)


def test_wilson_interval_without_trials_is_uninformative():
    assert wilson_interval(0, 0) == (0.0, 1.0)


def record(task, seed, reward, *, error=None, steps=2, tokens=(100, 5), seconds=1.5):
    return {
        "version": 1,
        "episode_id": f"{task}-s{seed}",
        "task": task,
        "seed": seed,
        "env_reward": reward,
        "error": error,
        "timings": {"total_s": seconds},
        "steps": [{"prompt_tokens": tokens[0], "completion_tokens": tokens[1]} for _ in range(steps)],
    }


def test_summarize_per_task_and_overall():
    records = [
        record("a", 0, 1.0),
        record("a", 1, 0.0, steps=4),
        record("b", 0, 0.0, error="ConnectionError: gone", steps=0),
    ]
    rows = summarize(records, ["a", "b"])
    assert [r.task for r in rows] == ["a", "b", "all"]
    a, b, total = rows
    assert (a.episodes, a.successes, a.success_rate, a.mean_steps, a.mean_tokens) == (2, 1, 0.5, 3.0, 315.0)
    assert a.mean_reward == 0.5 and a.mean_seconds == 1.5 and a.errors == 0
    assert (b.successes, b.errors, b.mean_tokens) == (0, 1, 0.0)
    assert (total.episodes, total.successes, total.errors) == (3, 1, 1)
    assert (a.ci_low, a.ci_high) == wilson_interval(1, 2)
    table = format_table(rows)
    lines = table.splitlines()
    assert lines[0].split() == [
        "task",
        "n",
        "success",
        "95%",
        "CI",
        "reward",
        "steps",
        "tokens",
        "time/ep",
        "errors",
    ]
    assert lines[2].split()[:3] == ["a", "2", "0.50"] and "[0.09, 0.91]" in lines[2]
    assert lines[-1].split()[:3] == ["all", "3", "0.33"]


def test_a_single_task_has_no_overall_row():
    assert [r.task for r in summarize([record("a", 0, 1.0)])] == ["a"]


def test_plot_is_a_png_with_one_bar_per_row(tmp_path):
    rows = summarize([record("a", 0, 1.0), record("b", 0, 0.0), record("b", 1, 1.0)], ["a", "b"])
    path = plot_success_rates(rows, tmp_path / "plot.png")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 300 and image.height > 200
        assert len(set(image.convert("RGB").getdata())) > 20  # bars, whiskers, text: not blank


def write_lines(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_read_episodes_keeps_the_newest_line_and_ignores_an_unfinished_one(tmp_path):
    path = tmp_path / "episodes.jsonl"
    crashed = record("a", 0, 0.0, error="TimeoutError: slow")
    write_lines(
        path, [crashed, record("a", 1, 1.0), record("a", 0, 1.0)], tail='{"version": 1, "task": "a", "se'
    )
    records = read_episodes(path)
    assert sorted((r["seed"], r["env_reward"]) for r in records) == [(0, 1.0), (1, 1.0)]
    assert finished_keys([crashed]) == set()
    cut_partial_line(path)
    assert path.read_text().endswith("}\n") and len(path.read_text().splitlines()) == 3


def test_read_episodes_names_a_bad_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    write_lines(path, [record("a", 0, 1.0)], tail="not json\n")
    with pytest.raises(ValueError, match=r"episodes.jsonl:2: not JSON"):
        read_episodes(path)
    write_lines(path, [record("a", 0, 1.0) | {"version": 99}])
    with pytest.raises(ValueError, match=r":1: not an episode record: .*version 99"):
        read_episodes(path)


def test_identity_mismatch_names_the_settings_that_differ():
    old = {"model": "scripted", "temperature": 0.0, "max_steps": 5}
    assert identity_mismatch(old, dict(old)) == []
    assert identity_mismatch(old, old | {"model": "embedded"}) == ["model: 'scripted' -> 'embedded'"]


def test_compare_prints_both_runs_side_by_side(tmp_path):
    for name, rewards in (("runA", [1.0, 1.0, 0.0]), ("runB", [0.0, 0.0, 0.0])):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model": f"model-{name}", "tasks": ["a", "b"]}))
        write_lines(
            folder / "episodes.jsonl",
            [record("a", 0, rewards[0]), record("a", 1, rewards[1]), record("b", 0, rewards[2])],
        )
    table = compare_table(tmp_path / "runA", tmp_path / "runB")
    header, _, row_a, row_b, row_all, note = table.splitlines()
    assert "A: runA (model-runA)" in header and "B: runB (model-runB)" in header
    assert row_a.startswith("a ") and "1.00 [0.34,1.00] n=2" in row_a and "0.00 [0.00,0.66] n=2" in row_a
    assert row_a.rstrip().endswith("-1.00")  # intervals overlap: no star
    assert row_b.split()[0] == "b" and row_all.split()[0] == "all"
    assert "Wilson" in note
    with pytest.raises(ValueError, match="holds no episodes"):
        compare_table(tmp_path / "runA", tmp_path / "missing")
