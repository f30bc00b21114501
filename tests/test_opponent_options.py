"""`--opponent` and `--seat` of `eval` and `train`: the server's opponents play the seats the
model does not, through a real server on loopback; bad input is refused in words before
anything starts."""

from __future__ import annotations

import json

import pytest

from envharness.cli import main as cli_main
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.eval.games import format_games, game_stats
from envharness.eval.stats import wilson_interval
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError


def _eval(out, *extra):
    return cli_main(
        ["eval", "--env", "textarena", "--model", "tiny", "--tasks", "TicTacToe-v0", "--episodes", "2",
         "--max-turns", "4", "--max-new-tokens", "8", "--out", str(out), "--no-progress", *extra]
    )  # fmt: skip


def _openings(out):
    lines = (out / "episodes.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["seed"])  # in the order they ended
    assert len(records) == 2 and all(r["error"] is None for r in records), records
    return [r["messages"][0]["content"] for r in records]


def test_eval_opponent_seats_the_servers_player_and_seat_picks_the_models(tmp_path, capsys):
    assert _eval(tmp_path / "alt", "--opponent", "random") == 0, capsys.readouterr().err
    first, second = _openings(tmp_path / "alt")
    assert "You are Player 0" in first and "You are Player 1" in second  # alternate by seed
    assert "Player 0 placed their symbol" in second  # the server's random player moved first
    config = json.loads((tmp_path / "alt" / "config.json").read_text())
    assert config["opponent"] == "random" and config["env_options"]["opponent"] == "random"
    # the games table: one row for the task and opponent, a game in each seat
    (row,) = json.loads((tmp_path / "alt" / "summary.json").read_text())["games"]
    assert (row["task"], row["opponent"], row["games"]) == ("TicTacToe-v0", "random", 2)
    assert sum(row["counts"].values()) == 2 and {s: v["games"] for s, v in row["seats"].items()} == {
        "0": 1,
        "1": 1,
    }
    assert "seats (wins/games)" in capsys.readouterr().out

    assert _eval(tmp_path / "seat1", "--opponent", "scripted", "--seat", "1") == 0, capsys.readouterr().err
    assert all("You are Player 1" in text for text in _openings(tmp_path / "seat1"))


@pytest.mark.parametrize(
    "tasks, opponent, seat, words",
    [
        (["Wordle-v0"], "random", "alternate", "Wordle-v0 is a single-player game: there is no other seat"),
        (["KuhnPoker-v0"], "gpt", "alternate", "--opponent gpt: unknown; one of random, scripted, self"),
        (["KuhnPoker-v0"], "", "1", "--seat 1 needs --opponent"),
        (["KuhnPoker-v0"], "random", "2", "--seat 2: KuhnPoker-v0 has seats 0 to 1"),
        (["KuhnPoker-v0"], "random", "first", "--seat first: a player number"),
    ],
)
def test_bad_opponent_and_seat_are_refused_in_words_by_eval_and_train(tasks, opponent, seat, words):
    with pytest.raises(EvalSetupError, match=words.replace("(", r"\(")):
        EvalConfig(out="x", env="textarena", tasks=tasks, opponent=opponent, seat=seat, model="tiny").check()
    train = TrainConfig(env="textarena", tasks=tasks, opponent=opponent, seat=seat, model="tiny")
    with pytest.raises(TrainSetupError, match=words):
        check_config(train)


def test_num_players_a_game_does_not_take_is_refused_in_words(tmp_path, capsys):
    code = _eval(
        tmp_path / "three",
        "--opponent",
        "random",
        "--env-option",
        "task=TicTacToe-v0",
        "--env-option",
        "num_players=3",
    )
    assert code != 0
    assert "TicTacToe-v0 is played by 2 players, not 3" in capsys.readouterr().err


def test_train_opponent_joins_the_servers_options(tmp_path):
    checked = check_config(
        TrainConfig(
            env="textarena", tasks=["KuhnPoker-v0"], opponent="scripted", seat="1", model="tiny",
            output_dir=str(tmp_path / "run"),
        )
    )  # fmt: skip
    assert checked.config.env_options == {"opponent": "scripted", "seat": "1"}


def test_games_table_counts_outcomes_with_wilson_intervals_and_the_seat_split():
    def game(seat, outcome, invalid=False, task="KuhnPoker-v0"):
        metrics = {"seat": seat, "opponent": "scripted", "outcome": outcome, "invalid_move": invalid}
        return {"task": task, "verify_metrics": metrics, "error": None}

    records = [game(0, "win"), game(1, "win"), game(0, "draw"), game(1, "loss", invalid=True)]
    records.append({"task": "Wordle-v0", "verify_metrics": {"success": True}})  # not a seated game
    (row,) = game_stats(records)
    assert row.counts == {"win": 2, "draw": 1, "loss": 1, "unfinished": 0}
    assert row.intervals["win"] == wilson_interval(2, 4) and row.invalid_rate == 0.25
    assert row.seats == {0: (2, 1), 1: (2, 1)}
    table = format_games([row])
    assert "0.50 [0.15, 0.85]" in table and "0:1/2 1:1/2" in table


def test_train_one_grpo_step_against_the_servers_opponent(tmp_path, capsys):
    """`train --opponent random` on a two-player game: the model plays its seat (alternating by
    seed), the server plays the other; the opponent's moves are the server's, never tokens here."""
    out = tmp_path / "train"
    code = cli_main(
        ["train", "--env", "textarena", "--tasks", "TicTacToe-v0", "--opponent", "random", "--model", "tiny",
         "--steps", "1", "--max-turns", "2", "--num-generations", "2", "--groups-per-step", "1",
         "--max-new-tokens", "6", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["error"] is None for r in records)
    assert all(r["verify_metrics"]["opponent"] == "random" for r in records)
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["opponent"] == "random" and saved["env_options"]["opponent"] == "random"


def test_opponent_on_servers_the_run_does_not_start_says_how_to_start_them():
    words = "start them with `serve ... --option opponent=random --option seat=alternate`"
    with pytest.raises(EvalSetupError, match=words):
        EvalConfig(
            out="x", env="textarena", tasks=["KuhnPoker-v0"], opponent="random", env_url="http://127.0.0.1:9"
        ).check()
    with pytest.raises(TrainSetupError, match=words):
        check_config(
            TrainConfig(
                env="textarena", tasks=["KuhnPoker-v0"], opponent="random", env_url="http://127.0.0.1:9"
            )
        )
    said = {"opponent": "random", "seat": "alternate"}  # the server was started with them: accepted
    config = EvalConfig(
        out="x", env="textarena", tasks=["KuhnPoker-v0"], opponent="random", env_url="http://127.0.0.1:9",
        env_options=said,
    )  # fmt: skip
    config.check()
    assert config.env_options == said


def test_train_seats_a_model_in_the_other_seats_as_eval_does():
    EvalConfig(out="x", env="textarena", tasks=["KuhnPoker-v0"], opponent="tiny", model="tiny").check()
    run = check_config(TrainConfig(env="textarena", tasks=["KuhnPoker-v0"], opponent="tiny", model="tiny"))
    assert run.kind.name == "opponent" and "opponent" not in run.config.env_options  # the client seats it


def test_sft_demonstrations_and_held_out_play_the_opponent_asked_for(tmp_path, capsys):
    """`sft --opponent scripted`: the scripted player's demonstrations are games against the
    server's scripted seat, and `--eval-every` meets the same opponent; a model opponent plays
    the demonstrations only (the held-out evaluation refuses it in words)."""
    out = tmp_path / "sft"
    code = cli_main(
        ["sft", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--opponent", "scripted", "--model", "tiny",
         "--episodes", "4", "--steps", "1", "--batch-size", "1", "--eval-every", "1", "--eval-episodes", "2",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    demos = [json.loads(line) for line in (out / "demos" / "episodes.jsonl").read_text().splitlines()]
    assert len(demos) == 4 and {r["verify_metrics"]["opponent"] for r in demos} == {"scripted"}
    assert {r["verify_metrics"]["seat"] for r in demos} == {0, 1}  # alternating by seed
    saved = json.loads((out / "sft_config.json").read_text())
    assert saved["opponent"] == "scripted" and saved["env_options"]["opponent"] == "scripted"
    assert (out / "eval_log.jsonl").is_file()
    refused = cli_main(
        ["sft", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--opponent", "self", "--model", "tiny",
         "--eval-every", "1", "--out", str(tmp_path / "no")]
    )  # fmt: skip
    assert refused != 0 and "--eval-every with --opponent self" in capsys.readouterr().err
