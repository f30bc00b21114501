"""`--opponent` and `--seat` of `eval` and `train`: the server's opponents play the seats the
model does not, through a real server on loopback; bad input is refused in words before
anything starts."""

from __future__ import annotations

import json

import pytest

from envharness.cli import main as cli_main
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError


def _eval(out, *extra):
    return cli_main(
        ["eval", "--env", "textarena", "--model", "tiny", "--tasks", "TicTacToe-v0", "--episodes", "2",
         "--max-turns", "4", "--max-new-tokens", "8", "--out", str(out), "--no-progress", *extra]
    )  # fmt: skip


def _openings(out):
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["error"] is None for r in records), records
    return [r["messages"][0]["content"] for r in records]


def test_eval_opponent_seats_the_servers_player_and_seat_picks_the_models(tmp_path, capsys):
    assert _eval(tmp_path / "alt", "--opponent", "random") == 0, capsys.readouterr().err
    first, second = _openings(tmp_path / "alt")
    assert "You are Player 0" in first and "You are Player 1" in second  # alternate by seed
    assert "Player 0 placed their symbol" in second  # the server's random player moved first
    config = json.loads((tmp_path / "alt" / "config.json").read_text())
    assert config["opponent"] == "random" and config["env_options"]["opponent"] == "random"

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
        (["KuhnPoker-v0"], "self", "alternate", "a model in the other seats is not supported yet"),
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
