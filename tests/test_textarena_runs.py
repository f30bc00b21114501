"""TextArena through the generic commands, as a user runs them: `envharness eval` with the
embedded model on Wordle-v0 (table and report), one multi-turn GRPO step on Wordle (the game's
feedback masked out of the loss), eval spread over two servers (the fleet), and `/web`."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from envharness.cli import main as cli_main
from envharness.core.launchers import LocalServer
from envharness.harness import read_records

pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_eval_embedded_on_wordle_prints_its_table_and_report(tmp_path, capsys):
    out = tmp_path / "eval"
    code = cli_main(
        [
            "eval",
            "--env",
            "textarena",
            "--model",
            "embedded",
            "--tasks",
            "Wordle-v0",
            "--episodes",
            "2",
            "--max-turns",
            "3",
            "--max-new-tokens",
            "12",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "embedded on 1 task(s), 2 episode(s) each" in printed
    assert any(line.split()[:2] == ["Wordle-v0", "2"] for line in printed.splitlines())
    assert (out / "report.html").read_text().count("Wordle-v0") >= 1
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["seed"] for r in records) == [0, 1] and all(r["error"] is None for r in records)
    for r in records:
        assert r["tool_calls"] and all(c["name"] == "send" for c in r["tool_calls"])
        assert r["tokens"]["completion"] > 0  # exact tokens from the local model
        # a lost game's partial reward (letters found) is no win: success means reward >= 1
        assert r["verify_metrics"]["success"] == (r["env_reward"] >= 1.0)
    summary = json.loads((out / "summary.json").read_text())["tasks"][0]
    assert summary["successes"] == sum(r["env_reward"] >= 1.0 for r in records)


def stubborn_model_app(guess: str):
    """An OpenAI-compatible model that always sends the same Wordle guess (it loses, finding some letters)."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def complete() -> dict:
        call = {
            "id": "call_0",
            "type": "function",
            "function": {"name": "send", "arguments": json.dumps({"message": f"[{guess}]"})},
        }
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "stubborn",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    return app


def test_eval_counts_a_partial_reward_as_a_loss_and_a_win_as_a_win(tmp_path, capsys):
    from _models_fixtures import serve

    wins = tmp_path / "scripted"  # the scripted player solves every game with turns enough
    assert (
        cli_main(
            [
                "eval",
                "--env",
                "textarena",
                "--model",
                "scripted",
                "--tasks",
                "Wordle-v0,GuessTheNumber-v0",
                "--episodes",
                "2",
                "--max-turns",
                "12",
                "--out",
                str(wins),
                "--no-progress",
            ]
        )
        == 0
    ), capsys.readouterr().err
    losses = (
        tmp_path / "stubborn"
    )  # the same guess six times: a lost game, with credit for the letters it found
    with serve(stubborn_model_app("crane")) as url:
        assert (
            cli_main(
                [
                    "eval",
                    "--env",
                    "textarena",
                    "--model",
                    f"openai:stubborn@{url}/v1",
                    "--tasks",
                    "Wordle-v0",
                    "--episodes",
                    "4",
                    "--max-turns",
                    "8",
                    "--out",
                    str(losses),
                    "--no-progress",
                ]
            )
            == 0
        ), capsys.readouterr().err
    won = [json.loads(line) for line in (wins / "episodes.jsonl").read_text().splitlines()]
    lost = [json.loads(line) for line in (losses / "episodes.jsonl").read_text().splitlines()]
    assert won and all(r["env_reward"] == 1.0 and r["verify_metrics"]["success"] for r in won)
    partial = [r for r in lost if 0.0 < r["env_reward"] < 1.0]
    assert partial, [r["env_reward"] for r in lost]  # the case this test is about happened
    assert all(r["env_reward"] < 1.0 and not r["verify_metrics"]["success"] for r in lost)
    for out, records in ((wins, won), (losses, lost)):
        per_task = [t for t in json.loads((out / "summary.json").read_text())["tasks"] if t["task"] != "all"]
        assert sum(t["successes"] for t in per_task) == sum(r["env_reward"] >= 1.0 for r in records)
    assert (
        sum(t["successes"] for t in per_task) == 0
        and per_task[0]["episodes"] == 4
        and per_task[0]["mean_reward"] > 0
    )


def test_one_grpo_step_on_wordle_masks_the_games_feedback(tmp_path, capsys):
    out = tmp_path / "train"
    code = cli_main(
        [
            "train",
            "--env",
            "textarena",
            "--tasks",
            "Wordle-v0",
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
            "--reward",
            "success",
            "--reward",
            "greens",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    records = read_records(out / "episodes.jsonl")
    assert len(records) == 2 and all(r.task == "Wordle-v0" and r.error is None for r in records)
    assert records[0].seed == records[1].seed  # a group plays one game
    assert all(r.tool_calls and r.tool_calls[0]["name"] == "send" for r in records)
    logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    step = next(log for log in logs if "reward" in log)
    assert "rewards/reward_success/mean" in step and "rewards/reward_greens/mean" in step
    config = json.loads((out / "train_config.json").read_text())
    assert config["env"] == "textarena"
    # a first move that does not end the game (textarena lets an invalid one pass with a warning)
    # gets a second turn: the game's feedback between the two is env tokens (mask 0)
    two_turns = [r for r in records if len(r.tool_calls) == 2]
    assert two_turns, [r.tool_calls for r in records]
    for r in two_turns:
        assert (
            r.tokens["env"] > 0
            and 0 < r.tokens["model"] <= 12
            and r.tokens["completion"] == r.tokens["model"] + r.tokens["env"]
        )
    capsys.readouterr()  # the training run replays: the same game and moves give the same feedback
    assert cli_main(["replay", str(out)]) == 0
    assert "2/2 episodes identical, 0 different, 0 skipped (textarena, train run)" in capsys.readouterr().out


def test_eval_over_two_servers_plays_every_game(tmp_path, capsys):
    with LocalServer("textarena") as a, LocalServer("textarena") as b:
        common = [
            "eval",
            "--env",
            "textarena",
            "--no-progress",
            "--model",
            "scripted",
            "--tasks",
            "rl",
            "--episodes",
            "2",
            "--max-turns",
            "12",
        ]
        assert cli_main([*common, "--out", str(tmp_path / "one"), "--env-url", a.base_url]) == 0
        opened = [httpx.get(f"{s.base_url}/health").json()["sessions_opened"] for s in (a, b)]
        assert (
            cli_main([*common, "--out", str(tmp_path / "two"), "--env-urls", f"{a.base_url},{b.base_url}"])
            == 0
        )
        after = [httpx.get(f"{s.base_url}/health").json()["sessions_opened"] for s in (a, b)]
    assert all(x > y for x, y in zip(after, opened)), "both servers took episodes"
    rows = [
        {
            t["task"]: (t["episodes"], t["successes"])
            for t in json.loads((tmp_path / d / "summary.json").read_text())["tasks"]
        }
        for d in ("one", "two")
    ]
    assert rows[0] == rows[1]
    assert rows[0]["all"] == (8, 8)  # the scripted players win every seeded game on both layouts


def test_web_page_describes_the_game():
    with LocalServer("textarena", web=True) as server:
        page = httpx.get(f"{server.base_url}/web")
        assert page.status_code == 200 and "<html" in page.text.lower()
        info = httpx.get(f"{server.base_url}/web/info").json()
        assert info["env"] == "textarena" and info["default_task"] == "Wordle-v0"
        assert "Mastermind-v0" in info["tasks"] and info["action_field"] == "message"
        assert any(a["example"] == "[crane]" for a in info["actions"])


def test_held_out_evaluation_counts_a_partial_wordle_as_a_loss(tmp_path):
    """`train --eval-every` counts what `eval` counts: a lost Wordle that found letters pays a
    reward between 0 and 1 and is not a success (greedy, the embedded model, seeds 0 and 3)."""
    from envharness.harness import read_records
    from envharness.integrations.trl.evaluate import evaluate
    from envharness.integrations.trl.loading import load_model
    from envharness.integrations.trl.servers import env_clients
    from envharness.integrations.trl.training import TrainConfig

    model, tokenizer = load_model("embedded")
    config = TrainConfig(env="textarena", tasks=["Wordle-v0"], max_turns=4, max_completion_length=24)
    records = tmp_path / "held_out.jsonl"
    with env_clients("textarena") as make_client:
        rate = evaluate(model, tokenizer, make_client, config, [0, 3], records=records, temperature=0.0)
    played = read_records(records)
    assert any(0.0 < (r.env_reward or 0.0) < 1.0 for r in played), [r.env_reward for r in played]
    assert rate == sum(bool(r.verify_metrics.get("success")) for r in played) / 2 == 0.0
