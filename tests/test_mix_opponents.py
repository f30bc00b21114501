"""`train --mix ... --opponent`: a two-player game beside MiniWoB tasks in one GRPO batch. The
opponent seats the mix's environment whose tasks are multi-player games (its server's options
for `random`/`scripted`, the self-play rollout for `self`); the browser plays as ever.

Real GRPOTrainer steps of the tiny model, a real BrowserGym server (Chromium, MiniWoB) and a
real TextArena server on loopback; the mix's rollout is wrapped only to keep a copy of the batch
it hands TRL."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from envharness.cli import main as cli_main
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds import MixRun
from envharness.integrations.trl.layers import Layer
from envharness.integrations.trl.training import train

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

MIX = {"browsergym": ["click-test"], "textarena": ["KuhnPoker-v0"]}


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.fixture
def handed(monkeypatch):
    """What the mix's rollout hands TRL, per call: (prompts, the batch)."""
    calls: list[tuple[list, dict]] = []
    build = MixRun.rollout

    def spying(self, parts, clients):
        rollout = build(self, parts, clients)

        class Spy(Layer):
            def __call__(self, prompts, trainer):
                out = self.inner(prompts, trainer)
                calls.append((list(prompts), out))
                return out

        return Spy(rollout)

    monkeypatch.setattr(MixRun, "rollout", spying)
    return calls


def _train(tmp_path, opponent: str, groups: int) -> tuple[list[dict], Path]:
    out = tmp_path / opponent
    config = TrainConfig(
        mix=MIX, opponent=opponent, model="tiny", output_dir=str(out), max_steps=1, num_generations=2,
        groups_per_step=groups, max_completion_length=6, max_turns=3,
    )  # fmt: skip
    train(config)
    return _records(out), out


def _rows(prompts: list[str], batch: dict) -> list[dict]:
    """Each row of the batch TRL got, with the environment its prompt names."""
    return [
        {"env": json.loads(p)["env"], "seed": json.loads(p)["seed"], "metrics": m, "reward": r, "mask": mask}
        for p, m, r, mask in zip(
            prompts, batch["verify_metrics"], batch["env_reward"], batch["env_mask"], strict=True
        )
    ]


@pytest.mark.timeout(900)
def test_a_server_opponent_plays_the_games_seat_and_leaves_the_browser_alone(tmp_path, handed):
    records, out = _train(tmp_path, "random", groups=4)
    [(prompts, batch)] = handed
    rows = _rows(prompts, batch)
    assert len(rows) == 8 and {r["env"] for r in rows} == {"browsergym", "textarena"}
    game = [r for r in rows if r["env"] == "textarena"]
    browser = [r for r in rows if r["env"] == "browsergym"]
    # the game's server plays the other seat: the trained seat alternates by seed
    assert all(r["metrics"]["opponent"] == "random" for r in game)
    assert all(r["metrics"]["seat"] == r["seed"] % 2 for r in game)  # --seat alternate: by seed
    assert all("opponent" not in r["metrics"] and "seat" not in r["metrics"] for r in browser)
    assert all(sum(r["mask"]) > 0 for r in browser)  # the browser rows train as ever
    assert len(records) == 8 and all(r["error"] is None for r in records)
    by_env = defaultdict(list)
    for r in records:
        by_env[r["metrics"]["env"]].append(r)
    assert {env: len(rs) for env, rs in by_env.items()} == {"browsergym": 4, "textarena": 4}
    assert all(
        r["task"] == "KuhnPoker-v0" and r["verify_metrics"]["seat"] in (0, 1) for r in by_env["textarena"]
    )
    assert all(r["task"] == "click-test" and r["tool_calls"][0]["action"] for r in by_env["browsergym"])
    # replay seats the game's server as the run did (train_config.json's opponent and seat)
    assert cli_main(["replay", str(out)]) == 0
    replayed = json.loads((out / "replay.json").read_text())
    assert replayed["env"] == "browsergym+textarena" and replayed["identical"] == replayed["episodes"] == 8


@pytest.mark.timeout(900)
def test_self_play_in_a_mix_trains_both_seats_of_each_game_beside_the_browser(tmp_path, handed):
    """4 groups of 2, two of them Kuhn Poker: wherever they sit in the batch, they are seats 0
    and 1 of one seed, one set of 2 games feeding both; the browser's groups play as ever."""
    records, _ = _train(tmp_path, "self", groups=4)
    [(prompts, batch)] = handed
    rows = _rows(prompts, batch)
    game = [r for r in rows if r["env"] == "textarena"]
    browser = [r for r in rows if r["env"] == "browsergym"]
    assert len(game) == 4 and len(browser) == 4
    assert [r["metrics"]["seat"] for r in game] == [0, 0, 1, 1]  # a group is one seat
    for first, second in zip(game[:2], game[2:]):  # generation g of each seat: one game
        assert first["reward"] + second["reward"] == 0  # zero-sum: +1/-1, or 0/0
    assert all(r["metrics"]["opponent"] == "self" for r in game)
    assert all("seat" not in r["metrics"] for r in browser) and all(sum(r["mask"]) > 0 for r in browser)
    assert len(records) == 8 and all(r["error"] is None for r in records)
    played = [r for r in records if r["metrics"]["env"] == "textarena"]
    assert len(played) == 4 and all(r["metrics"]["trained"] for r in played)
    games = defaultdict(dict)
    for r in played:
        games[r["metrics"]["game"]][r["metrics"]["seat"]] = r
    assert len(games) == 2 and all(set(g) == {0, 1} for g in games.values())
    for g in games.values():
        assert g[0]["seed"] == g[1]["seed"] and g[0]["env_reward"] + g[1]["env_reward"] == 0
    # in Kuhn Poker seat 1 opens: its tokens reach the loss
    assert all(sum(r["mask"]) > 0 for r in game if r["metrics"]["seat"] == 1)
    browsed = [r for r in records if r["metrics"]["env"] == "browsergym"]
    assert len(browsed) == 4 and all("seat" not in r["metrics"] for r in browsed)


@pytest.mark.timeout(900)
def test_a_model_opponent_in_a_mix_plays_the_games_other_seat(tmp_path, handed):
    records, out = _train(tmp_path, "tiny", groups=2)
    [(prompts, batch)] = handed
    rows = _rows(prompts, batch)
    assert sorted(r["env"] for r in rows) == ["browsergym"] * 2 + ["textarena"] * 2
    game = [r for r in records if r["metrics"]["env"] == "textarena"]
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(r["verify_metrics"]["opponent"] == "tiny" for r in game)
    assert all(r["verify_metrics"]["seat"] == r["seed"] % 2 for r in game)
    # Kuhn Poker's seat 1 opens: where the trained seat is 0, the opponent moved first
    assert all(r["opponent_moves"] for r in game if r["verify_metrics"]["seat"] == 0)
    browsed = [r for r in records if r["metrics"]["env"] == "browsergym"]
    assert all(not r.get("opponent_moves") and "seat" not in r["verify_metrics"] for r in browsed)
    # replay plays the opponent's recorded moves again, the browser's episodes on their own server
    assert cli_main(["replay", str(out)]) == 0
    assert json.loads((out / "replay.json").read_text())["identical"] == 4


@pytest.mark.parametrize(
    "options, words",
    [
        (
            {"mix": {"browsergym": ["click-test"], "textarena": ["Wordle-v0"]}, "opponent": "random"},
            "--opponent random: no environment of the mix has a multi-player task",
        ),
        (
            {
                "mix": {"browsergym": ["click-test"], "textarena": ["KuhnPoker-v0", "Wordle-v0"]},
                "opponent": "random",
            },
            "Wordle-v0 is a single-player game",
        ),
        ({"mix": MIX, "opponent": "nobody"}, "--opponent nobody: unknown"),
        ({"mix": MIX, "seat": "1"}, "--seat 1 needs --opponent"),
        ({"mix": MIX, "opponent": "self", "eval_every": 1}, "--eval-every with --opponent self in a mix"),
        ({"mix": MIX, "opponent": "tiny", "processes": 2}, "--opponent tiny trains on one process"),
    ],
)
def test_a_mix_refuses_an_opponent_it_cannot_seat_in_words(options, words):
    with pytest.raises(TrainSetupError, match=words):
        check_config(TrainConfig(**{"model": "tiny", **options}))


def test_a_mix_seats_only_its_game_and_keeps_the_seat_choice():
    run = check_config(TrainConfig(mix=MIX, opponent="scripted", seat="1", model="tiny"))
    seated = {row.name: row.seats for row in run.plan.rows if row.seats.server_options}
    assert set(seated) == {"textarena"}
    assert seated["textarena"].server_options == {"opponent": "scripted", "seat": "1"}
    assert run.config.env_options == {}  # each server's options stay its own
