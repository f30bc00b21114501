"""`train --opponent self`: every seat of a two-player TextArena game is the policy being
trained; each seat's turns are their own trajectory with that seat's reward, and a GRPO group
is one (task, seed, seat), so the baseline is per role (SPIRAL's role-conditioned advantages).

Real GRPOTrainer steps of the tiny model against a real TextArena server on loopback; the
rollout is wrapped only to keep a copy of the batch it hands TRL."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from envharness.cli import main as cli_main
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds import SelfPlayRun
from envharness.integrations.trl.kinds.self_play import plan_episodes
from envharness.integrations.trl.layers import Layer
from envharness.integrations.trl.training import train


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.fixture
def handed(monkeypatch):
    """What the self-play rollout hands TRL, per call: (prompts, the batch)."""
    calls: list[tuple[list, dict]] = []
    build = SelfPlayRun.rollout

    def spying(self, parts, clients):
        rollout = build(self, parts, clients)

        class Spy(Layer):
            def __call__(self, prompts, trainer):
                out = self.inner(prompts, trainer)
                calls.append((list(prompts), out))
                return out

        return Spy(rollout)

    monkeypatch.setattr(SelfPlayRun, "rollout", spying)
    return calls


def test_each_seat_of_a_self_play_game_is_its_own_trajectory_with_its_own_reward(tmp_path, handed):
    """Tic-Tac-Toe, 3 groups of 2: groups 0 and 1 are seats 0 and 1 of one seed (one set of 2 games
    feeds both), group 2 is seat 0 of its own seed, whose games are still played whole by the
    policy in both seats (seat 1's turns recorded, not trained on)."""
    out = tmp_path / "run"
    config = TrainConfig(
        env="textarena", tasks=["TicTacToe-v0"], opponent="self", model="tiny", output_dir=str(out),
        max_steps=1, num_generations=2, groups_per_step=3, max_completion_length=6, max_turns=3,
    )  # fmt: skip
    train(config)
    [(prompts, batch)] = handed
    seeds = [json.loads(p)["seed"] for p in prompts]
    assert len(batch["completion_ids"]) == 6
    seats = [m["seat"] for m in batch["verify_metrics"]]
    assert seats == [0, 0, 1, 1, 0, 0]  # seats alternate by group; a group is one seat
    records = _records(out)
    assert len(records) == 8 and all(r["error"] is None for r in records)
    trained = [r for r in records if r["metrics"]["trained"]]
    assert len(trained) == 6
    by_game = defaultdict(dict)
    for r in records:
        by_game[r["metrics"]["game"]][r["metrics"]["seat"]] = r
    assert len(by_game) == 4 and all(set(g) == {0, 1} for g in by_game.values())
    for game in by_game.values():
        assert game[0]["seed"] == game[1]["seed"]  # one game, both seats
        assert game[0]["env_reward"] + game[1]["env_reward"] == 0  # zero-sum: +1/-1, or 0/0
        for seat, r in game.items():  # each seat that moved was shown its own view of the game
            if r["tokens"]["model"]:  # (a game can end before a seat's first turn)
                assert f"Player {seat}" in r["messages"][0]["content"]
                assert f"Player {1 - seat}" not in r["messages"][0]["content"].split("\n")[0]
    assert {r["seed"] for r in records if r["metrics"]["seat"] == 1 and r["metrics"]["trained"]} == {seeds[0]}
    assert seeds[4] in {r["seed"] for r in records if not r["metrics"]["trained"]}
    # every row TRL gets is one trained trajectory: its seat, its reward, its model tokens
    rows = Counter(
        (m["seat"], reward, sum(mask))
        for m, reward, mask in zip(batch["verify_metrics"], batch["env_reward"], batch["env_mask"])
    )
    kept = Counter((r["metrics"]["seat"], r["env_reward"], r["tokens"]["model"]) for r in trained)
    assert rows == kept
    # The tiny model's moves are invalid, so the first mover forfeits by its second: in
    # Tic-Tac-Toe seat 0 moves first (its tokens reach the loss here), in Kuhn Poker seat 1
    # (the next test), and the other seat's row holds its reward with no tokens to train.
    assert all(sum(mask) > 0 for mask in batch["env_mask"][:2] + batch["env_mask"][4:])


def _train_self_play(out, task: str) -> int:
    """`envharness train --opponent self`, one small step of 2 groups x 2 with the tiny model."""
    return cli_main(
        ["train", "--env", "textarena", "--tasks", task, "--model", "tiny", "--opponent", "self",
         "--steps", "1", "--max-turns", "3", "--num-generations", "2", "--groups-per-step", "2",
         "--max-new-tokens", "6", "--out", str(out)]
    )  # fmt: skip


def test_cli_trains_kuhn_poker_by_self_play_end_to_end(tmp_path, capsys):
    out = tmp_path / "train"
    assert _train_self_play(out, "KuhnPoker-v0") == 0, capsys.readouterr().err
    records = _records(out)
    assert len(records) == 4 and {r["metrics"]["seat"] for r in records} == {0, 1}
    assert all(r["verify_metrics"]["opponent"] == "self" for r in records)
    assert all(r["tokens"]["model"] > 0 for r in records if r["metrics"]["seat"] == 1)  # seat 1 opens
    games = Counter(r["metrics"]["game"] for r in records)
    assert sorted(games.values()) == [2, 2]
    assert json.loads((out / "train_config.json").read_text())["opponent"] == "self"


@pytest.mark.parametrize(
    "options, words",
    [
        ({"tasks": ["Wordle-v0"]}, "Wordle-v0 is a single-player game"),
        ({"agent": "examples.agents:x"}, "--opponent self with --agent"),
        (
            {"mix": {"textarena": ["Wordle-v0"]}, "tasks": []},
            "no environment of the mix has a multi-player task",
        ),
    ],
)
def test_self_play_refuses_what_it_cannot_train_in_words(options, words):
    config = TrainConfig(
        **{"env": "textarena", "tasks": ["KuhnPoker-v0"], "opponent": "self", "model": "tiny", **options}
    )
    with pytest.raises(TrainSetupError, match=words):
        check_config(config)


def test_groups_pair_by_task_and_an_unpaired_group_still_plays_whole_games():
    kuhn = [json.dumps({"task": "KuhnPoker-v0", "seed": s}) for s in (1, 1, 2, 2, 3, 3)]
    ttt = [json.dumps({"task": "TicTacToe-v0", "seed": 4})] * 2
    episodes = plan_episodes(kuhn + ttt, generations=2)
    trained = {e.row: (e.task, e.seed, e.seat) for e in episodes if e.row is not None}
    assert trained == {
        0: ("KuhnPoker-v0", 1, 0), 1: ("KuhnPoker-v0", 1, 0), 2: ("KuhnPoker-v0", 1, 1), 3: ("KuhnPoker-v0", 1, 1),
        4: ("KuhnPoker-v0", 3, 0), 5: ("KuhnPoker-v0", 3, 0), 6: ("TicTacToe-v0", 4, 0), 7: ("TicTacToe-v0", 4, 0),
    }  # fmt: skip
    played = [e for e in episodes if e.row is None]  # seat 1 of the unpaired groups' games
    assert [(e.task, e.seed, e.seat) for e in played] == [("KuhnPoker-v0", 3, 1)] * 2 + [
        ("TicTacToe-v0", 4, 1)
    ] * 2
    assert len({e.game for e in episodes}) == 6  # 3 seeds x 2 games, both seats of each


def test_a_seat_whose_turns_run_out_ends_the_game_for_the_other_unfinished(tmp_path):
    """--max-turns 1 on Tic-Tac-Toe: seat 0's one (invalid) move is its last, so seat 1 is never
    handed a turn; its episode ends too (no seat waits forever), unfinished, reward 0."""
    out = tmp_path / "run"
    config = TrainConfig(
        env="textarena", tasks=["TicTacToe-v0"], opponent="self", model="tiny", output_dir=str(out),
        max_steps=1, num_generations=2, groups_per_step=2, max_completion_length=6, max_turns=1,
    )  # fmt: skip
    train(config)
    records = _records(out)
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(r["verify_metrics"]["outcome"] == "unfinished" and r["env_reward"] == 0 for r in records)
    assert {r["tokens"]["model"] > 0 for r in records if r["metrics"]["seat"] == 1} == {False}


def test_replay_plays_each_seat_of_a_self_play_game_against_the_other_seats_record(tmp_path, capsys):
    """Every seat of a self-play game is its own record: replay plays each one again with the
    other seat's recorded moves in the other seat, so the run's episodes come out identical."""
    from envharness.replay import replay_run

    out = tmp_path / "train"
    assert _train_self_play(out, "TicTacToe-v0") == 0, capsys.readouterr().err
    report = replay_run(out)
    assert report.episodes and not report.skipped, report.to_json()
    assert report.identical == len(report.episodes) == 4, report.to_json()
    # a changed move of one seat shows in the replay of the other seat's episode
    lines = (out / "episodes.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    mover = next(i for i, r in enumerate(records) if r["tool_calls"])
    call = records[mover]["tool_calls"][0]
    call["arguments"]["message"] = "[4]" if call["arguments"].get("message") != "[4]" else "[5]"
    lines[mover] = json.dumps(records[mover])
    (out / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    partner = next(
        r["episode_id"] for r in records
        if r["metrics"]["game"] == records[mover]["metrics"]["game"] and r is not records[mover]
    )  # fmt: skip
    again = {e.episode_id: e for e in replay_run(out).episodes}
    assert not again[partner].identical, again[partner]
