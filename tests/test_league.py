"""`eval --league`: a round robin of players on a two-player game, through real eval runs on a
loopback server, and the Bradley-Terry ratings fitted from the games."""

from __future__ import annotations

import json

import pytest

from envharness.cli import main as cli_main
from envharness.eval.league import Pairing, fit_ratings, plan_pairings


def test_a_round_robin_plays_every_pairing_and_ranks_the_strong_player_first(tmp_path, capsys):
    out = tmp_path / "league"
    code = cli_main(
        ["eval", "--env", "textarena", "--tasks", "TicTacToe-v0", "--league", "scripted", "random", "tiny",
         "--episodes", "4", "--max-turns", "9", "--max-new-tokens", "8", "--out", str(out), "--no-progress"]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    saved = json.loads((out / "league.json").read_text())
    pairs = {(p["first"], p["second"]): p for p in saved["pairings"]}
    assert set(pairs) == {("scripted", "random"), ("scripted", "tiny"), ("random", "tiny")}
    # the server's random player sits in the opponent's seat: the tiny model plays the model's
    assert (pairs[("random", "tiny")]["model"], pairs[("random", "tiny")]["opponent"]) == ("tiny", "random")
    for p in pairs.values():
        assert p["games"] + p["unfinished"] == 4
        records = (
            (tmp_path / "league" / p["folder"].split("/")[-1] / "episodes.jsonl").read_text().splitlines()
        )
        assert len(records) == 4 and {json.loads(r)["verify_metrics"]["opponent"] for r in records} == {
            p["opponent"]
        }
    assert pairs[("scripted", "random")]["losses"] == 0  # minimax never loses
    ratings = saved["ratings"]
    assert ratings["random"] == 0 and ratings["scripted"] == max(ratings.values())
    assert printed.splitlines()[2].split()[:2] == ["1", "scripted"]


def test_ratings_follow_the_results():
    even = [Pairing("a", "b", "a", "b", wins=3, draws=2, losses=3)]
    assert fit_ratings(["a", "b"], even) == {"a": 0.0, "b": 0.0}
    one_sided = [Pairing("a", "b", "a", "b", wins=8), Pairing("b", "c", "b", "c", wins=8)]
    ratings = fit_ratings(["a", "b", "c"], one_sided, anchor="c")
    assert ratings["c"] == 0 and ratings["a"] > ratings["b"] > 0  # finite: one virtual draw a pairing


def test_bad_leagues_are_refused_in_words(capsys):
    with pytest.raises(ValueError, match="two or more different players"):
        plan_pairings(["embedded"], ["random"])
    with pytest.raises(ValueError, match="cannot play each other"):
        plan_pairings(["random", "greedy", "embedded"], ["random", "greedy"])
    code = cli_main(["eval", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--league", "tiny", "random",
                     "--opponent", "random"])  # fmt: skip
    assert code == 2 and "leave out --opponent" in capsys.readouterr().err
