"""`train --opponent <model>`: the policy being trained plays one seat of a two-player TextArena
game, a separately loaded, frozen model the others; only the trained seat's turns reach TRL.

Real GRPOTrainer steps of the tiny model against a real TextArena server on loopback, the
opponent a second tiny model built from scratch. Every generation of both backends is noted
(the backends themselves run unchanged) so the batch TRL receives can be checked token by
token against who generated what."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from envharness.cli import main as cli_main
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.kinds import OpponentRun
from envharness.integrations.trl.layers import Layer
from envharness.integrations.trl.training import train
from envharness.models.transformers_backend import TransformersBackend


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _model_spans(ids: list[int], mask: list[int]) -> list[tuple[int, ...]]:
    """The runs of env_mask 1 in a row: the model turns the loss trains on."""
    spans, run = [], []
    for token, bit in zip(ids, mask):
        if bit:
            run.append(token)
        elif run:
            spans.append(tuple(run))
            run = []
    return spans + ([tuple(run)] if run else [])


@pytest.fixture
def seen(monkeypatch):
    """What the run did: the batch TRL got, every generation by backend, the opponent backend
    and the trainer."""
    seen: dict = {"batches": [], "generations": []}
    generate, build = TransformersBackend.generate, OpponentRun.rollout

    async def noting(self, requests):
        out = await generate(self, requests)
        seen["generations"] += [(self, tuple(g.completion_ids), g.text) for g in out]
        return out

    def spying(self, parts, clients):
        rollout = build(self, parts, clients)
        seen["opponent"] = rollout.opponent_backend
        seen["opponent_weights"] = {
            k: v.clone() for k, v in rollout.opponent_backend.model.state_dict().items()
        }

        class Spy(Layer):
            def __call__(self, prompts, trainer):
                out = self.inner(prompts, trainer)
                seen["batches"].append(out)
                seen["trainer"] = trainer
                return out

        return Spy(rollout)

    monkeypatch.setattr(TransformersBackend, "generate", noting)
    monkeypatch.setattr(OpponentRun, "rollout", spying)
    return seen


def _train(tmp_path, task: str, seat: str) -> list[dict]:
    out = tmp_path / task
    config = TrainConfig(
        env="textarena", tasks=[task], opponent="tiny", seat=seat, model="tiny", output_dir=str(out),
        max_steps=1, num_generations=2, groups_per_step=2, max_completion_length=6, max_turns=3,
    )  # fmt: skip
    train(config)
    return _records(out)


def test_only_the_trained_seats_tokens_reach_the_batch_and_the_opponent_stays_frozen(tmp_path, seen):
    """Simple Negotiation takes any text as a move, so both seats move in turn: the trained
    seat's rows hold its own three turns, the opponent's three replies in between only as the
    game reports them (env_mask 0)."""
    records = _train(tmp_path, "SimpleNegotiation-v0", "1")
    [batch] = seen["batches"]
    opponent, trainer = seen["opponent"], seen["trainer"]
    assert opponent.model is not trainer.model
    mine = [ids for backend, ids, _ in seen["generations"] if backend is not opponent]
    theirs = [ids for backend, ids, _ in seen["generations"] if backend is opponent]
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert all(
        r["verify_metrics"]["seat"] == 1 and r["verify_metrics"]["opponent"] == "tiny" for r in records
    )
    # the opponent moved between the trained seat's turns, and every move is in the records
    moves = [m for r in records for m in r["opponent_moves"]]
    assert len(theirs) == len(moves) >= 8 and all(m["seat"] == 0 for m in moves)
    assert Counter(m["reply"] for m in moves) == Counter(
        text for backend, _, text in seen["generations"] if backend is opponent
    )
    assert all(max(m["after_step"] for m in r["opponent_moves"]) >= 2 for r in records)  # interleaved
    # the loss's tokens are exactly the trained model's generations, none of the opponent's
    spans = [
        s for ids, mask in zip(batch["completion_ids"], batch["env_mask"]) for s in _model_spans(ids, mask)
    ]
    assert Counter(spans) == Counter(mine)
    assert (
        sum(map(sum, batch["env_mask"])) == sum(map(len, mine)) == sum(r["tokens"]["model"] for r in records)
    )
    assert not set(theirs) & set(spans)
    for r in records:  # the trained seat's own turns are its own replies, never the opponent's
        said = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
        assert len(said) == 3 and not {m["reply"] for m in r["opponent_moves"]} & set(said)
    # the opponent's weights are its own and did not move
    now = opponent.model.state_dict()
    assert all(torch.equal(now[k], v) for k, v in seen["opponent_weights"].items())
    assert not any(p.requires_grad for p in opponent.model.parameters())


def test_the_rows_reward_is_the_trained_seats(tmp_path, seen):
    """Kuhn Poker, the trained model in seat 0: player 1 opens, and the tiny opponent's two
    invalid moves forfeit the game before seat 0 moves. The rows carry seat 0's +1 (not the
    mover's -1) and no tokens: the opponent's never reach them."""
    records = _train(tmp_path, "KuhnPoker-v0", "0")
    [batch] = seen["batches"]
    opponent = seen["opponent"]
    theirs = [ids for backend, ids, _ in seen["generations"] if backend is opponent]
    assert len(theirs) == 8 and all(theirs)  # two moves in each of four games
    assert all(len(r["opponent_moves"]) == 2 and r["verify_metrics"]["seat"] == 0 for r in records)
    assert batch["env_reward"] == [1.0] * 4 == [r["env_reward"] for r in records]
    assert all(r["verify_metrics"]["outcome"] == "win" and r["opponent_moves"][-1]["done"] for r in records)
    assert sum(map(sum, batch["env_mask"])) == 0


def test_cli_trains_kuhn_poker_against_a_model_opponent_end_to_end_and_replays_its_moves(tmp_path, capsys):
    """Seat 0: the opponent opens, so every game records its moves; `replay` plays them again
    from the record instead of sampling the opponent."""
    out = tmp_path / "train"
    code = cli_main(
        ["train", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--model", "tiny", "--opponent", "tiny",
         "--seat", "0", "--steps", "1", "--max-turns", "3", "--num-generations", "2", "--groups-per-step", "1",
         "--max-new-tokens", "6", "--out", str(out)]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    records = _records(out)
    assert len(records) == 2 and all(r["error"] is None for r in records)
    assert all(
        r["verify_metrics"]["opponent"] == "tiny" and r["verify_metrics"]["seat"] == 0 for r in records
    )
    assert all(r["opponent_moves"] and {m["seat"] for m in r["opponent_moves"]} == {1} for r in records)
    assert json.loads((out / "train_config.json").read_text())["opponent"] == "tiny"
    assert cli_main(["replay", str(out)]) == 0, capsys.readouterr().err
    replayed = json.loads((out / "replay.json").read_text())
    assert replayed["episodes"] == replayed["identical"] == 2


@pytest.mark.parametrize(
    "options, words",
    [
        ({"opponent": "/no/such/checkpoint"}, "--opponent /no/such/checkpoint: unknown"),
        ({"tasks": ["Wordle-v0"]}, "Wordle-v0 is a single-player game"),
        (
            {"mix": {"textarena": ["Wordle-v0"]}, "tasks": []},
            "no environment of the mix has a multi-player task",
        ),
        ({"agent": "examples.agents:x"}, "--opponent tiny with --agent"),
        ({"processes": 2}, "--opponent tiny trains on one process"),
        ({"eval_every": 1}, "not available for a run of kind .opponent."),
    ],
)
def test_a_model_opponent_refuses_what_it_cannot_train_in_words(options, words):
    config = TrainConfig(
        **{"env": "textarena", "tasks": ["KuhnPoker-v0"], "opponent": "tiny", "model": "tiny", **options}
    )
    with pytest.raises(TrainSetupError, match=words):
        check_config(config)


def test_an_opponent_that_does_not_load_is_one_line_before_training(tmp_path, capsys):
    broken = tmp_path / "ckpt"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    out = tmp_path / "run"
    code = cli_main(
        ["train", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--model", "tiny", "--opponent", str(broken),
         "--steps", "1", "--num-generations", "2", "--groups-per-step", "1", "--out", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    [line] = [x for x in err.splitlines() if x.startswith("envharness train:")]
    assert line.startswith(f"envharness train: --opponent {broken}: cannot load it:")
    assert not (out / "episodes.jsonl").exists() or not _records(out)


def test_processes_with_a_model_opponent_is_refused_before_any_rank_starts(capsys):
    code = cli_main(
        ["train", "--env", "textarena", "--tasks", "KuhnPoker-v0", "--model", "tiny", "--opponent", "tiny",
         "--processes", "2", "--out", "unused"]
    )  # fmt: skip
    assert code == 2
    assert (
        "--opponent tiny trains on one process; it cannot run as --processes 2 yet" in capsys.readouterr().err
    )


def test_an_opponent_served_over_openais_api_plays_its_seats(tmp_path):
    """`--opponent openai:MODEL@URL`: a tiny model behind `/v1/chat/completions` on loopback, the
    run on `--device cpu` (a device of the trained model's, not the remote opponent's); two steps,
    each rollout on its own event loop, one HTTP client for the run."""
    from _models_fixtures import chat_completions_app, serve

    from envharness.models.embedded import tiny_test_model

    served = TransformersBackend(*tiny_test_model(seed=1))
    out = tmp_path / "run"
    with serve(chat_completions_app(served)) as url:
        spec = f"openai:tiny@{url}/v1"
        config = TrainConfig(
            env="textarena", tasks=["KuhnPoker-v0"], opponent=spec, seat="0", model="tiny", device="cpu",
            output_dir=str(out), max_steps=2, num_generations=2, groups_per_step=1, max_completion_length=6,
        )  # fmt: skip
        train(config)
    records = _records(out)
    assert len(records) == 4 and all(r["error"] is None for r in records)
    assert {r["metrics"]["train_step"] for r in records} == {0, 1}
    assert all(r["verify_metrics"]["opponent"] == spec and r["verify_metrics"]["seat"] == 0 for r in records)
    assert all(
        len(r["opponent_moves"]) == 2 and all(m["reply"] for m in r["opponent_moves"]) for r in records
    )
