"""`eval --opponent self|<model>`: the client plays the other seats of a two-player game with a
model, through a real server on loopback. Each seat sees only its own view; the episode keeps
the model-under-test's messages, the opponent's moves apart; the games table names it."""

from __future__ import annotations

import json

import pytest

from envharness.cli import main as cli_main

pytestmark = pytest.mark.timeout(900)


def _eval(out, model, opponent, tasks, episodes, max_turns):
    return cli_main(
        ["eval", "--env", "textarena", "--model", model, "--opponent", opponent, "--tasks", tasks,
         "--episodes", str(episodes), "--max-turns", str(max_turns), "--max-new-tokens", "8",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip


def _records(out):
    lines = (out / "episodes.jsonl").read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda r: (r["task"], r["seed"]))


def test_self_plays_both_seats_of_tic_tac_toe_and_kuhn_poker_to_the_end(tmp_path, capsys):
    """The scripted model (the strong seat player, reading its own conversation) in every seat: real games, played out."""
    out = tmp_path / "self"
    assert _eval(out, "scripted", "self", "TicTacToe-v0,KuhnPoker-v0", 2, 12) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    records = _records(out)
    assert len(records) == 4 and all(r["error"] is None for r in records), records
    for record in records:
        metrics, seat = record["verify_metrics"], record["verify_metrics"]["seat"]
        assert seat == record["seed"] % 2 and metrics["opponent"] == "self"  # alternate by seed
        assert metrics["outcome"] in ("win", "loss", "draw") and not metrics["invalid_move"]
        assert record["env_reward"] == {"win": 1.0, "loss": -1.0, "draw": 0.0}[metrics["outcome"]]
        moves = record["opponent_moves"]
        assert moves and all(m["seat"] == 1 - seat and m["move"].startswith("[") for m in moves)
        assert moves[-1]["done"] or record["steps"][-1]["done"]  # someone's move ended the game
        # each seat sees its own view: the model its seat's opening, the opponent the other's
        assert f"You are Player {seat}" in record["messages"][0]["content"]
        assert f"You are Player {1 - seat}" not in record["messages"][0]["content"]
        assert f"You are Player {1 - seat}" in moves[0]["shown"]
        # the opponent's replies are not the episode's messages (nothing trains on them)
        replies = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        assert len(replies) == len(record["steps"])
    kuhn = [r for r in records if r["task"] == "KuhnPoker-v0"]
    for record in kuhn:  # the model's first view names its own card only, the opponent's its own
        own = record["messages"][0]["content"].count("Your card is")
        assert own >= 1 and record["opponent_moves"][0]["shown"].count("Your card is") >= 1
    assert "KuhnPoker-v0  self" in printed and "TicTacToe-v0  self" in printed


def test_a_model_spec_opponent_is_loaded_and_named_in_the_games_table(tmp_path, capsys):
    """The tiny model in the other seat: its (bad) moves go to the game, which rules on them."""
    out = tmp_path / "tiny"
    assert _eval(out, "scripted", "tiny", "KuhnPoker-v0,TicTacToe-v0", 2, 6) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    records = _records(out)
    assert len(records) == 4 and all(r["error"] is None for r in records), records
    for record in records:
        metrics, moves = record["verify_metrics"], record["opponent_moves"]
        assert metrics["opponent"] == "tiny" and metrics["outcome"] in ("win", "loss", "draw", "unfinished")
        assert moves and all(m["seat"] != metrics["seat"] for m in moves)
        assert not metrics["invalid_move"] or record["steps"]  # an invalid move of the opponent's is not ours
    # the tiny model sends no move: where it moves first, the game ends before the model's first
    # turn, and the model is asked nothing (no step, no reply in the episode)
    ended_early = [r for r in records if not r["steps"]]
    assert ended_early
    for record in ended_early:
        assert record["opponent_moves"][-1]["done"] and record["verify_metrics"]["outcome"] == "win"
        assert [m["role"] for m in record["messages"]] == ["user"]
    assert "KuhnPoker-v0  tiny" in printed and "TicTacToe-v0  tiny" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert "tiny" in json.dumps(summary)


def test_replay_plays_the_recorded_opponent_moves_and_finds_a_changed_one(tmp_path, capsys):
    """`replay` of a run with a model opponent: the opponent's recorded moves go to the game
    again (never re-sampled), so the episodes come out identical; a changed move is found.
    When the opponent's move ends the game, the agent's last view is still its own."""
    from envharness.replay import replay_run

    out = tmp_path / "run"
    assert _eval(out, "scripted", "self", "TicTacToe-v0", 2, 12) == 0, capsys.readouterr().err
    records = _records(out)
    for record in records:
        seat = record["verify_metrics"]["seat"]
        assert f"You are Player {seat}" in record["goal"] and f"Player {1 - seat} in" not in record["goal"]
        assert [m["after_step"] for m in record["opponent_moves"]] == sorted(
            m["after_step"] for m in record["opponent_moves"]
        )
    # the report shows both players' moves: the opponent's, in order among the model's steps
    html = (out / "report.html").read_text()
    for record in records:
        for move in record["opponent_moves"]:
            assert f"<b>Player {move['seat']}</b> (self) &middot; move <code>{move['move']}</code>" in html
    report = replay_run(out)
    assert report.identical == 2 and not report.skipped, report.to_json()

    # the opponent's first move changed in the record: the game the agent saw is not the same
    lines = (out / "episodes.jsonl").read_text().splitlines()
    changed = json.loads(lines[0])
    first = changed["opponent_moves"][0]
    later = changed["tool_calls"][-1]["arguments"]["message"]  # a cell the model takes later on
    assert len(changed["tool_calls"]) >= 2 and later != first["move"]
    first["reply"] = first["move"] = later
    lines[0] = json.dumps(changed)
    (out / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    report = replay_run(out)
    episode = next(e for e in report.episodes if e.episode_id == changed["episode_id"])
    assert report.identical == 1 and not episode.identical and episode.skipped is None
    assert episode.first_difference is not None, episode


def test_the_scripted_model_plays_the_strong_seat_players_from_its_conversation(tmp_path, capsys):
    """`--model scripted` (what `sft` demonstrates and `check` plays) reads the board, the card
    and the moves from its own conversation and plays the strong player: Tic-Tac-Toe minimax
    never loses, and Nim and Connect Four get legal moves in their own syntax."""
    out = tmp_path / "strong"
    code = cli_main(
        ["eval", "--env", "textarena", "--model", "scripted", "--opponent", "random",
         "--tasks", "TicTacToe-v0,Nim-v0,ConnectFour-v0", "--episodes", "6", "--max-turns", "30",
         "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    records = _records(out)
    outcomes = {(r["task"], r["verify_metrics"]["outcome"]) for r in records}
    assert ("TicTacToe-v0", "loss") not in outcomes, outcomes
    assert not any(r["verify_metrics"]["invalid_move"] for r in records), outcomes
    assert all(r["verify_metrics"]["outcome"] in ("win", "draw", "loss") for r in records)


def test_the_servers_opponent_moves_are_recorded_and_shown_as_its_own_lines(tmp_path, capsys):
    """`--opponent random|scripted` is played by the server: its moves reach the record (as the
    agent's observations listed them, nothing the agent was not shown) and the report shows each
    as its own line among the agent's steps; `replay` plays the run again identically."""
    from envharness.replay import replay_run

    out = tmp_path / "run"
    assert _eval(out, "scripted", "random", "TicTacToe-v0", 2, 12) == 0, capsys.readouterr().err
    records = _records(out)
    html = (out / "report.html").read_text()
    for record in records:
        seat, moves = record["verify_metrics"]["seat"], record["env_opponent_moves"]
        assert moves and record["opponent_moves"] is None  # not a model's moves: replay must not replay them
        assert all(m["seat"] == 1 - seat for m in moves)
        steps = [m["after_step"] for m in moves]
        assert steps == sorted(steps) and steps[-1] <= len(record["steps"])
        assert (steps[0] == 0) == (seat == 1)  # the opponent opens only where the agent is Player 1
        seen = "\n".join(str(m["content"]) for m in record["messages"] if m["role"] != "assistant")
        for move in moves:
            assert move["move"] in seen  # the agent was told each of them
            assert f"<b>Player {move['seat']}</b> (random) &middot; move <code>{move['move']}</code>" in html
    report = replay_run(out)
    assert report.identical == 2 and not report.skipped, report.to_json()
