"""TextArena's multi-player games: one session is one game, a step acts for the player to move,
each player sees only its own view; OpenEnv's generic client plays whole games for both seats
over the wire; the scripted players are legal and strong; bad input gets words."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient

from envharness.core.launchers import LocalServer
from envharness.envs.textarena import games
from envharness.envs.textarena.environment import TextArenaEnvironment
from envharness.envs.textarena.factory import TextArenaConfigError, make_environment_factory
from envharness.envs.textarena.harness import check_task, game_catalog
from envharness.envs.textarena.models import TextArenaAction
from envharness.envs.textarena.opponents import NoScriptedMove, random_move, scripted_move

pytestmark = pytest.mark.timeout(600)

CARD = re.compile(r"Your card is: '([JQK])'")


def play(env: TextArenaEnvironment, task: str, seed: int, policies, rng: random.Random):
    """One game in-process; `policies[player]` picks each seat's move. Returns the last observation."""
    obs = env.reset(seed=seed, task=task)
    for _ in range(200):
        if obs.done:
            return obs
        player = obs.current_player_id
        obs = env.step(TextArenaAction(message=policies[player](task, obs, rng), player_id=player))
    raise AssertionError(f"{task} seed {seed} did not end in 200 moves")


def test_every_offline_multi_player_game_starts_and_lists_its_player_counts():
    listing = game_catalog()
    multi = listing.splits["multiplayer"]
    assert "KuhnPoker-v0" in multi and "TicTacToe-v0" in multi and "Wordle-v0" not in multi
    assert set(multi) <= set(listing.tasks) and "Wordle-v0" in listing.tasks
    assert "TicTacToe-v0" in listing.splits["players-2"] and "TicTacToe-v0" not in listing.splits["players-3"]
    assert "ThreePlayerTicTacToe-v0" in listing.splits["players-3"]
    families = {games.game_of(i) for i in multi}
    assert families == set(games.PLAYER_COUNTS)
    assert not families & set(games.MULTI_PLAYER_LEFT_OUT)
    env = TextArenaEnvironment()
    for family in sorted(families):
        env_id = next(i for i in multi if games.game_of(i) == family)
        obs = env.reset(seed=1, task=env_id)
        low, _ = games.player_counts(env_id)
        assert env.state.num_players == low, family
        assert obs.current_player_id in range(low) and obs.messages and not obs.done, family


def test_kuhn_poker_each_player_sees_only_its_own_card_and_seeds_replay():
    env = TextArenaEnvironment()
    obs = env.reset(seed=5, task="KuhnPoker-v0")
    while not obs.done:
        assert "game_state" not in env.state.raw_state  # the cards stay hidden mid-game
        new = obs.messages[obs.metadata["new_messages_from"] :]
        obs = env.step(TextArenaAction(message="[check]" if "[check]" in new[-1].content else "[call]"))
    assert obs.info["rewards"] in ([1.0, -1.0], [-1.0, 1.0], [0.0, 0.0])
    assert obs.reward == obs.info["rewards"][obs.current_player_id]
    dealt = env.state.raw_state["game_state"]["player_cards"]  # revealed once the game is over
    for player in (0, 1):
        view = [m.content for m in env._logs[player]]
        # each round's deal names one card, the player's own: the last one is what the game dealt it
        cards = [CARD.search(t).group(1) for t in view if CARD.search(t)]
        assert (
            cards and cards[-1] == "JQK"[int(dealt[str(player)] if str(player) in dealt else dealt[player])]
        )
        assert all(t.count("Your card") <= 1 for t in view)
    # the same seed deals the same cards and gives the first move to the same player
    first = env.reset(seed=5, task="KuhnPoker-v0")
    again = TextArenaEnvironment().reset(seed=5, task="KuhnPoker-v0")
    assert [m.content for m in first.messages] == [m.content for m in again.messages]
    assert first.current_player_id == again.current_player_id
    other = TextArenaEnvironment().reset(seed=6, task="KuhnPoker-v0")
    assert [m.content for m in first.messages] != [m.content for m in other.messages] or (
        first.current_player_id != other.current_player_id
    )


def test_private_information_stays_private_over_the_wire_with_openenv_client():
    """OpenEnv's own client acts for both seats in turn; the mid-game state hides the cards."""
    with (
        LocalServer("textarena", task="KuhnPoker-v0") as server,
        GenericEnvClient(base_url=server.base_url).sync() as env,
    ):
        result = env.reset(seed=11)
        views: dict[int, list[str]] = {0: [], 1: []}
        moves = 0
        while not result.done:
            obs = result.observation
            player = obs["current_player_id"]
            assert obs["legal_players"] == [0, 1]
            views[player] = [m["content"] for m in obs["messages"]]
            assert "game_state" not in env.state()["raw_state"]  # no peeking mid-game
            legal = "[check]" if "'[check]'" in views[player][-1] else "[call]"
            result = env.step({"message": legal, "player_id": player})
            moves += 1
        assert moves >= 6 and set(result.observation["info"]["rewards"]) <= {-1.0, 0.0, 1.0}
        for player in (0, 1):
            mine = [CARD.search(t).group(1) for t in views[player] if CARD.search(t)]
            assert mine, player
            for text in views[player]:  # the other player's deal never reaches this player
                assert f"You are Player {1 - player}" not in text
        with pytest.raises(RuntimeError, match="game is over"):
            env.step({"message": "[check]"})
        result = env.reset(seed=11)
        player = result.observation["current_player_id"]
        with pytest.raises(RuntimeError, match=f"player {player}'s turn, not player {1 - player}'s"):
            env.step({"message": "[check]", "player_id": 1 - player})
        assert env.step({"message": "[check]", "player_id": player}).observation is not None


@pytest.mark.parametrize("task", ["TicTacToe-v0", "ConnectFour-v0", "SimpleNegotiation-v0-short"])
def test_openenv_client_plays_whole_games_for_both_players(task):
    with (
        LocalServer("textarena", task=task) as server,
        GenericEnvClient(base_url=server.base_url).sync() as env,
    ):
        rng = random.Random(3)
        result = env.reset(seed=4)
        for _ in range(120):
            if result.done:
                break
            obs = result.observation
            if task.startswith("Simple"):
                move = (
                    "[Accept]" if "[Offer" in obs["messages"][-1]["content"] else "[Offer: 1 Wood -> 1 Wood]"
                )
            else:
                move = random_move(task, obs, rng)
            result = env.step({"message": move, "player_id": obs["current_player_id"]})
        assert result.done, task
        rewards = result.observation["info"]["rewards"]
        assert len(rewards) == 2 and result.reward == rewards[result.observation["current_player_id"]]


def test_scripted_players_are_legal_and_beat_random_play():
    env = TextArenaEnvironment()
    rng = random.Random(0)
    for task, games_played in (
        ("TicTacToe-v0", 20),
        ("Nim-v0", 20),
        ("ConnectFour-v0", 10),
        ("KuhnPoker-v0", 60),
    ):
        score = {"win": 0, "draw": 0, "loss": 0}
        for seed in range(games_played):
            seat = seed % 2  # the scripted player takes each seat half the time
            policies = {seat: scripted_move, 1 - seat: random_move}
            obs = play(env, task, seed, policies, rng)
            reward = obs.info["rewards"][seat]
            assert not obs.info.get("invalid_move") or obs.current_player_id != seat, (task, seed)
            score["win" if reward > 0 else "loss" if reward < 0 else "draw"] += 1
        if task == "TicTacToe-v0":
            assert score["loss"] == 0, score  # minimax never loses
        assert score["win"] > score["loss"], (task, score)


@pytest.mark.parametrize(
    ("task", "players"), [("GameOfPureStrategy-v0", 2), ("IndianPoker-v0", 2), ("SecretMafia-v0", 6)]
)
def test_the_random_player_plays_whole_games_that_list_moves_their_own_way(task, players):
    """Games whose legal moves are not an 'Available Moves' list (a hand of cards, the actions
    with their amounts left open, the targets of a night's vote): random play on every seat
    ends the game, each move legal (the game's rules refuse none)."""
    env, rng = TextArenaEnvironment(), random.Random(1)
    for seed in (0, 1):
        obs, moves = env.reset(seed=seed, task=task, num_players=players), 0
        while not obs.done and moves < 1000:
            obs = env.step(
                TextArenaAction(message=random_move(task, obs, rng), player_id=obs.current_player_id)
            )
            moves += 1
        logs = [m.content for log in env._logs.values() for m in log]
        refused = [text for text in logs if "attempted an invalid move" in text]
        assert not refused and not obs.info.get("invalid_move"), (task, seed, refused)
        assert obs.done and moves > 1 and len(obs.info["rewards"]) == players, (task, seed, moves)


def test_bad_input_gets_words():
    env = TextArenaEnvironment()
    with pytest.raises(ValueError, match="played by 2 players, not 3"):
        env.reset(task="KuhnPoker-v0", num_players=3)
    with pytest.raises(TextArenaConfigError, match="played by 2 players, not 4"):
        make_environment_factory(environ={}, task="TicTacToe-v0", num_players=4)
    with pytest.raises(TextArenaConfigError, match="No game was named.*games for 3 players: .*LiarsDice-v0"):
        make_environment_factory(environ={}, num_players=3)  # the default game is Wordle's one player
    with pytest.raises(ValueError, match="syntax error"):
        env.reset(task="Chess-v0")
    with pytest.raises(ValueError, match="OpenRouter"):
        env.reset(task="Debate-v0")
    assert check_task("KuhnPoker-v0") == "KuhnPoker-v0"
    with pytest.raises(NoScriptedMove, match="no scripted player"):
        scripted_move("Othello-v0-tiny", env.reset(seed=0, task="Othello-v0-tiny"), random.Random(0))
    # an illegal move: the game's own rule and message, then the game's own penalty
    obs = env.reset(seed=2, task="TicTacToe-v0")
    mover = obs.current_player_id
    obs = env.step(TextArenaAction(message="[42]"))
    new = " ".join(m.content for m in obs.messages[obs.metadata["new_messages_from"] :]).lower()
    assert obs.current_player_id == mover and "attempted an invalid move" in new
    obs = env.step(TextArenaAction(message="[42]"))
    assert obs.done and obs.info["invalid_move"] and obs.info["rewards"][mover] == -1.0


def test_opponent_seats_make_a_single_agent_session_that_replays():
    """With an opponent the environment plays the other seats: the client sees only its seat."""
    env = TextArenaEnvironment()
    first = env.reset(seed=7, task="KuhnPoker-v0", opponent="scripted")
    seat = env.state.seat
    assert seat == 7 % 2 and first.current_player_id == seat and first.seat == seat
    moves, obs = [], first
    while not obs.done:
        assert obs.current_player_id == seat  # the client's turn every time it is asked
        move = "[check]" if "'[check]'" in obs.messages[-1].content else "[fold]"
        moves.append(move)
        obs = env.step(TextArenaAction(message=move))
    assert obs.reward == obs.info["rewards"][seat]
    transcript = [m.content for m in obs.messages]
    again = TextArenaEnvironment()
    obs2 = again.reset(seed=7, task="KuhnPoker-v0", opponent="scripted")
    for move in moves:
        obs2 = again.step(TextArenaAction(message=move))
    assert [m.content for m in obs2.messages] == transcript  # opponent moves replay with the seed
    seats_played = {
        TextArenaEnvironment().reset(seed=s, task="TicTacToe-v0", opponent="random").seat for s in range(4)
    }
    assert seats_played == {0, 1}
    with pytest.raises(ValueError, match="single-player game, there is no other seat"):
        env.reset(task="Wordle-v0", opponent="random")
    with pytest.raises(ValueError, match="unknown opponent 'gpt'"):
        env.reset(task="KuhnPoker-v0", opponent="gpt")
    with pytest.raises(ValueError, match="seat=5: a player number from 0 to 1"):
        env.reset(task="KuhnPoker-v0", opponent="random", seat=5)
    with pytest.raises(ValueError, match="has no scripted player"):
        env.reset(task="Othello-v0-tiny", opponent="scripted")


def test_eval_plays_a_two_player_game_against_the_servers_opponent(tmp_path, capsys):
    from envharness.cli import main as cli_main

    def run(out, *extra):
        return cli_main(
            ["eval", "--env", "textarena", "--model", "tiny", "--tasks", "TicTacToe-v0", "--episodes", "2",
             "--max-turns", "6", "--max-new-tokens", "8", "--out", str(out), "--no-progress", *extra]
        )  # fmt: skip

    assert run(tmp_path / "vs", "--env-option", "opponent=random") == 0, capsys.readouterr().err
    lines = (tmp_path / "vs" / "episodes.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["seed"])  # in the order they ended
    assert len(records) == 2 and all(r["error"] is None for r in records)
    openings = [r["messages"][0]["content"] for r in records]
    assert "You are Player 0" in openings[0] and "You are Player 1" in openings[1]  # seeds 0, 1: each seat
    assert "Player 0 placed their symbol" in openings[1]  # the opponent moved first, the agent saw it
    assert [r["verify_metrics"]["step_count"] for r in records] == [0, 0]  # no move from the tiny model
    capsys.readouterr()
    run(tmp_path / "alone")
    records = [json.loads(line) for line in (tmp_path / "alone" / "episodes.jsonl").read_text().splitlines()]
    assert records and all("2-player game and an agent plays one seat" in (r["error"] or "") for r in records)


@pytest.mark.parametrize("seed", [3, 4])
def test_the_player_reads_everything_said_to_it_between_its_moves(seed):
    """After the player's move the game may end the round, deal the next card and let the
    opponent move; the text the model reads (`feedback_text`) carries all of it, not only what
    came after the opponent's move: every card dealt to the player reaches the model."""
    from envharness.envs.textarena.environment import TextArenaEnvironment
    from envharness.envs.textarena.models import TextArenaAction
    from envharness.envs.textarena.sessions import feedback_text, opening_text

    env = TextArenaEnvironment()
    obs = env.reset(task="KuhnPoker-v0", seed=seed, opponent="random", seat=1)
    read = [opening_text(obs)]
    while not obs.done:
        move = "[check]" if "[check]" in obs.messages[-1].content else "[call]"
        obs = env.step(TextArenaAction(message=move))
        read.append(feedback_text(obs))
    dealt = {
        m.content
        for m in obs.messages
        if re.match(r"### Starting round [123] out of 3 rounds\. Your card", m.content)
    }
    assert len(dealt) == 3 and all(any(card in text for text in read) for card in dealt), (dealt, read)
    assert not any(text == "submitted move: '[check]'." for text in read[1:])  # never the own move alone


def test_a_session_plays_against_the_model_the_server_was_started_with():
    """`serve textarena --option opponent_model=tiny`: a client asks for `opponent="model"` and
    plays its seat against that model over the wire (the model's moves, good or bad, go to the
    game). Only the operator names the model: a client's `opponent_model` is a game argument
    the game refuses, and a server without one refuses `opponent="model"` in words."""
    with (
        LocalServer("textarena", opponent_model="tiny") as server,
        GenericEnvClient(base_url=server.base_url).sync() as env,
    ):
        result = env.reset(task="TicTacToe-v0", seed=2, opponent="model", seat=0)
        state = env.state()  # which model is the operator's: the client learns only that it is one
        assert (
            result.observation["seat"] == 0
            and state["opponent"] == "model"
            and "tiny" not in json.dumps(state)
        )
        turns = 0
        while not result.done and turns < 9:
            listed = re.findall(r"'(\[\d\])'", result.observation["messages"][-1]["content"])
            result = env.step({"message": listed[0] if listed else "[4]"})
            turns += 1
        senders = {m["sender_id"] for m in result.observation["messages"] if m["category"] == "PLAYER_ACTION"}
        assert result.done and senders == {0, 1}  # the model moved in seat 1
        with pytest.raises(RuntimeError, match="does not take these arguments.*opponent_model"):
            env.reset(task="TicTacToe-v0", opponent="random", opponent_model="/etc/passwd")
    with (
        LocalServer("textarena") as server,
        GenericEnvClient(base_url=server.base_url).sync() as env,
        pytest.raises(RuntimeError, match="this server seats no model"),
    ):
        env.reset(task="TicTacToe-v0", opponent="model")


class Routed:
    """TextArena's own routing, recorded: every `State.add_observation` call's text and addressee
    (-1: every player)."""

    def __init__(self, monkeypatch) -> None:
        from textarena.core import State

        self.sent: list[tuple[int, str]] = []
        route = State.add_observation

        def add_observation(state, message, observation_type, from_id=-1, to_id=-1):
            if isinstance(message, str):
                self.sent.append((to_id, message))
            return route(state, message, observation_type, from_id, to_id)

        monkeypatch.setattr(State, "add_observation", add_observation)

    def secrets(self, player: int) -> set[str]:
        """What only `player` was told: texts addressed to it and to no one else."""
        told = {text for to, text in self.sent if to == player}
        return told - {text for to, text in self.sent if to != player}


def two_player_games() -> list[str]:
    """One id of every game the Task API lists for two players (the first of its variants)."""
    first: dict[str, str] = {}
    for env_id in game_catalog().splits["players-2"]:
        first.setdefault(games.game_of(env_id), env_id)
    return list(first.values())


#: Games that deal each seat something of its own (a card, the other's card, a hand): there a
#: seat's secrets go beyond its prompt and its own moves.
PRIVATE_DEALS = {
    "KuhnPoker": "Your card is",
    "IndianPoker": "Your opponent's card is",
    "GameOfPureStrategy": "Your remaining hand",
}


@pytest.mark.parametrize("env_id", two_player_games())
def test_each_seat_sees_only_its_own_view(env_id, monkeypatch):
    """In every two-player game the Task API lists: a text TextArena addressed to one seat only
    never reaches the other seat, neither in an observation the environment gives it nor in
    its log, over the deal and the first 12 moves (random legal
    moves; a game that lists none gets a word)."""
    routed = Routed(monkeypatch)
    env, rng = TextArenaEnvironment(), random.Random(0)
    seen: dict[int, list[str]] = {0: [], 1: []}
    obs = env.reset(seed=1, task=env_id, num_players=2)
    for _ in range(12):
        seen[obs.current_player_id] += [m.content for m in obs.messages]
        if obs.done:
            break
        try:
            move = random_move(env_id, obs, rng)
        except NoScriptedMove:
            move = "[pass]"
        obs = env.step(TextArenaAction(message=move, player_id=obs.current_player_id))
    seen[obs.current_player_id] += [m.content for m in obs.messages]
    for player, other in ((0, 1), (1, 0)):
        secrets = routed.secrets(player)
        assert secrets, (env_id, player)  # the oracle is not empty: each seat was told something alone
        shown = set(seen[other]) | {m.content for m in env._logs[other]}
        assert not secrets & shown, (env_id, player, secrets & shown)
        private = PRIVATE_DEALS.get(games.game_of(env_id) or "")
        assert private is None or any(private in t for t in secrets), (env_id, player, secrets)


def textarenas_own_count() -> dict[str, dict[str, list[str]]]:
    """TextArena's registry, by its own word: each registered game family (the package its entry
    point lives in) under ``single`` or ``multi``, by the state its module builds (a
    single-player game builds `ta.SinglePlayerState`); a family whose module is not in the wheel
    under ``missing``. Read from the source files, so a module that does not compile counts too."""
    from textarena.envs.registration import ENV_REGISTRY

    package = Path(games.textarena().__file__).parent  # the registry fills when textarena is imported
    found: dict[str, dict[str, list[str]]] = {"single": {}, "multi": {}, "missing": {}}
    for env_id, spec in ENV_REGISTRY.items():
        module = str(spec.entry_point).partition(":")[0]
        family = module.split(".")[2]
        source = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
        if not source.exists():
            kind = "missing"
        else:
            kind = "single" if "SinglePlayerState" in source.read_text() else "multi"
        found[kind].setdefault(family, []).append(env_id)
    return found


def counts_that_start(env_id: str, counts: range) -> list[int]:
    """The numbers of players TextArena's own `make` and `reset` start `env_id` with, here and
    offline (none where the game cannot be made)."""
    import textarena as ta

    try:
        game = ta.make(env_id)
    except Exception:  # a module that does not compile or import, files missing from the wheel
        return []
    started = []
    for count in counts:
        try:
            game.reset(num_players=count, seed=1)
        except Exception:
            continue
        started.append(count)
    return started


def test_the_counts_the_docs_give_are_textarenas_registrys(monkeypatch):
    """The games (and ids) the server serves and the docs count are TextArena's registry's, split
    by the state each game's module builds, less those TextArena's own `make` and `reset` cannot
    start here (no OpenRouter key, no `gym`, files missing from the wheel, syntax errors): found
    without the server's tables, then compared with them, the catalog and the docs."""
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    own = textarenas_own_count()
    starts = {
        family: counts_that_start(ids[0], range(2, 7))
        for family, ids in (own["multi"] | own["missing"]).items()
    }
    multi = {family for family, counts in starts.items() if counts}
    single = {family for family, ids in own["single"].items() if counts_that_start(ids[0], range(1, 2))}
    assert multi == set(games.PLAYER_COUNTS) and set(own["single"]) == set(games.SINGLE_PLAYER_GAMES)
    assert single == set(games.SINGLE_PLAYER_GAMES) - {*games.BROKEN, *games.NEEDS_OPENROUTER}
    assert {family: min(starts[family]) for family in multi} == {
        f: low for f, (low, _) in games.PLAYER_COUNTS.items()
    }
    assert {games.game_of(i) for i in two_player_games()} == {f for f in multi if 2 in starts[f]}
    for family in multi:  # every count the server takes, up to 6, starts the game (Taboo: not 5)
        taken = [n for n in range(2, 7) if games.takes_players(own["multi"][family][0], n)]
        assert set(taken) <= set(starts[family]), family
    multi_ids = [i for family in multi for i in own["multi"][family]]
    served_single = [i for family in single for i in own["single"][family]]
    catalog = game_catalog()
    assert sorted(catalog.splits["multiplayer"]) == sorted(multi_ids)
    assert sorted(catalog.tasks) == sorted(served_single + multi_ids)
    counts = (len(multi), len(multi_ids), len(served_single), sum(map(len, own["single"].values())))
    docs = (Path(__file__).parents[1] / "docs" / "textarena.md").read_text()
    claimed = (
        int(re.search(r"the (\d+) multi-player games that run offline", docs).group(1)),
        int(re.search(r"\((\d+) ids with their variants", docs).group(1)),
        *map(int, re.search(r"is served: (\d+) of (\d+) ids", docs).groups()),
    )
    assert claimed == counts == (56, 420, 204, 219)


def test_a_count_a_game_cannot_take_is_refused_in_words():
    with pytest.raises(
        games.GameRefused, match=r"Taboo-v0 is played by an even number of players, 4 to 6, not 5"
    ):
        games.check_players("Taboo-v0", 5)
    assert games.check_players("Taboo-v0", 6) == 6
    with pytest.raises(games.GameRefused, match=r"KuhnPoker-v0 is played by 2 players, not 3"):
        games.check_players("KuhnPoker-v0", 3)
    assert (
        "Taboo-v0" in game_catalog().splits["players-4"]
        and "Taboo-v0" not in game_catalog().splits["players-5"]
    )
