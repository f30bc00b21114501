"""The TextArena environment in-process, on the real `textarena` 0.7.4 and its offline NLTK data:
replayable seeds, per-reset games and arguments, every single-player game, refusals, OpenEnv's
TEXTARENA_* variables, and no `nltk.download` at run time."""

from __future__ import annotations

import random
import re
import threading
from collections import OrderedDict

import numpy
import pytest

from envharness.envs.textarena import games, nltk_data
from envharness.envs.textarena.environment import TextArenaConfig, TextArenaEnvironment
from envharness.envs.textarena.factory import (
    TextArenaConfigError,
    make_environment_factory,
    options_from_environ,
)
from envharness.envs.textarena.models import TextArenaAction
from envharness.envs.textarena.wordle import feedback

pytestmark = pytest.mark.timeout(600)


def play(env: TextArenaEnvironment, move: str):
    return env.step(TextArenaAction(message=move))


def secret(env: TextArenaEnvironment) -> str:
    return games.unwrap(env._game).state.game_state["secret_word"]


@pytest.fixture(scope="module")
def wordle() -> TextArenaEnvironment:
    return TextArenaEnvironment(TextArenaConfig())


def test_same_seed_same_game_and_same_feedback(wordle):
    secrets, feedbacks = [], []
    for _ in range(2):
        first = wordle.reset(seed=11)
        secrets.append(secret(wordle))
        feedbacks.append([play(wordle, "[crane]").messages[-1].content, first.prompt])
    assert secrets[0] == secrets[1] and feedbacks[0] == feedbacks[1]
    assert {secret(wordle) for _ in range(6) if wordle.reset(seed=random.randrange(10**6))} != {secrets[0]}
    assert wordle.state.seed is not None and wordle.reset().metadata["seed"] == wordle.state.seed


def test_moves_replay_too_for_games_that_draw_while_playing():
    """Bandit draws every pull's outcome from `random`: a replay gives the same outcomes."""
    env = TextArenaEnvironment(TextArenaConfig(env_id="Bandit-v0"))
    runs = []
    for _ in range(2):
        env.reset(seed=5)
        runs.append([play(env, "[red]").messages[-1].content for _ in range(5)])
    assert runs[0] == runs[1]


def test_sessions_keep_their_randomness_apart_and_leave_the_process_rng_alone():
    before = random.getstate()
    envs = [TextArenaEnvironment(TextArenaConfig(env_id="Bandit-v0")) for _ in range(4)]
    alone = TextArenaEnvironment(TextArenaConfig(env_id="Bandit-v0"))
    alone.reset(seed=9)
    expected = [play(alone, "[blue]").messages[-1].content for _ in range(10)]
    outcomes: list[list[str]] = [[] for _ in envs]

    def run(i: int) -> None:
        envs[i].reset(seed=9)
        for _ in range(10):
            outcomes[i].append(play(envs[i], "[blue]").messages[-1].content)
            random.random()  # another thread using the global RNG meanwhile

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [expected] * 4
    random.setstate(before)
    TextArenaEnvironment(TextArenaConfig(env_id="Bandit-v0")).reset(seed=3)
    assert random.getstate() == before


def spelling_bee_letters(env: TextArenaEnvironment, seed: int) -> str:
    prompt = env.reset(seed=seed, task="SpellingBee-v0").prompt
    return re.search(r"Allowed Letters: (\w+)", prompt).group(1)


def test_numpy_draws_replay_with_the_seed_and_stay_in_the_session():
    """SpellingBee draws its letters from numpy's global generator (``numpy.random.choice``),
    which textarena never seeds: the same seed gives the same letters, concurrent sessions
    (each draws while another thread uses numpy's generator) get what a lone one gets, and
    numpy's own generator is left as it was."""
    env = TextArenaEnvironment()
    alone = {seed: spelling_bee_letters(env, seed) for seed in range(4)}
    assert {seed: spelling_bee_letters(env, seed) for seed in range(4)} == alone
    assert spelling_bee_letters(TextArenaEnvironment(), 2) == alone[2]
    assert len(set(alone.values())) > 1
    together: dict[int, str] = {}
    barrier = threading.Barrier(len(alone))

    def run(seed: int) -> None:
        session = TextArenaEnvironment()
        barrier.wait()
        for _ in range(3):
            together[seed] = spelling_bee_letters(session, seed)
            numpy.random.random()  # another thread using numpy's global generator meanwhile

    threads = [threading.Thread(target=run, args=(seed,)) for seed in alone]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    numpy.random.seed(1)
    before = numpy.random.get_state()
    spelling_bee_letters(env, 5)
    after = numpy.random.get_state()
    assert (after[1] == before[1]).all() and after[2:] == before[2:]


def test_concurrent_sokoban_sessions_build_the_level_a_lone_one_builds():
    """Sokoban's level generation searches in module globals: sessions resetting at once (the
    server runs each on its own thread) must still get the level the seed gives alone."""
    seeds = [0, 1, 2, 3]
    alone = {}
    for seed in seeds:
        env = TextArenaEnvironment(TextArenaConfig(env_id="Sokoban-v0"))
        alone[seed] = env.reset(seed=seed).messages[-1].content
    together: dict[int, str] = {}
    barrier = threading.Barrier(len(seeds))

    def run(seed: int) -> None:
        env = TextArenaEnvironment(TextArenaConfig(env_id="Sokoban-v0"))
        barrier.wait()
        together[seed] = env.reset(seed=seed).messages[-1].content

    threads = [threading.Thread(target=run, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone
    assert len(set(alone.values())) == len(seeds)


def test_wordle_feedback_matches_the_game(wordle):
    wordle.reset(seed=2)
    word = secret(wordle)
    obs = play(wordle, "[heart]")
    assert obs.messages[-1].category == "GAME_MESSAGE"
    assert " ".join(feedback("heart", word)) in obs.messages[-1].content


def test_win_reward_info_and_outcome_message(wordle):
    wordle.reset(seed=4)
    obs = play(wordle, f"[{secret(wordle)}]")
    assert obs.done and obs.reward == 1.0 and obs.info["won"] is True
    assert obs.messages[-1].category == "GAME_ADMIN" and "Congratulations" in obs.messages[-1].content
    assert wordle.state.won and wordle.state.raw_state["game_state"]["secret_word"] == secret(wordle)
    with pytest.raises(ValueError, match="game is over.*call reset"):
        play(wordle, "[crane]")


def test_partial_reward_when_guesses_run_out_is_not_a_win():
    env = TextArenaEnvironment(TextArenaConfig())
    env.reset(seed=8)
    word = secret(env)
    guesses = [
        w for w in ("heart", "cover", "screw", "table", "night", "brain", "cloth", "sound") if w != word
    ][:6]
    for g in guesses:
        obs = play(env, f"[{g}]")
    assert obs.done and 0.0 <= obs.reward < 1.0 and obs.info["won"] is False
    assert "secret word was" in obs.info["reason"]


def test_state_hides_the_secret_until_the_end(wordle):
    wordle.reset(seed=1)
    assert "game_state" not in wordle.state.raw_state and secret(wordle) not in str(wordle.state.model_dump())


def test_per_reset_game_and_kwargs(wordle):
    obs = wordle.reset(seed=1, task="Wordle-v0", word_length=6)
    assert (
        "6-letter word" in obs.prompt
        and len(secret(wordle)) == 6
        and wordle.state.game_kwargs == {"word_length": 6}
    )
    obs = wordle.reset(seed=1, task="Mastermind-v0", code_length=3)
    assert "3 digits long" in obs.prompt and wordle.state.env_id == "Mastermind-v0"
    assert "5-letter word" in wordle.reset(seed=1).prompt  # back to the server's default game
    with pytest.raises(ValueError, match="does not take these arguments.*colour"):
        wordle.reset(task="Wordle-v0", colour="blue")


def test_bad_moves_get_the_games_message_or_a_clear_error(wordle):
    wordle.reset(seed=3)
    with pytest.raises(ValueError, match="empty move"):
        play(wordle, "   ")
    with pytest.raises(ValueError, match="100000 characters refused"):
        play(wordle, "x" * 100_000)
    obs = play(wordle, "[zzzzq]")
    assert not obs.done and "'zzzzq' is not an English word" in obs.messages[-1].content
    obs = play(wordle, "no brackets here at all")  # textarena's action wrapper brackets it: wrong length
    assert "You attempted an invalid move" in "\n".join(m.content for m in obs.messages)
    assert obs.done and obs.info.get("invalid_move") is True  # the second invalid move in a row ends the game
    wordle.reset(seed=3)
    assert not play(wordle, "crane").done  # a bare word gets its brackets


@pytest.mark.parametrize(
    "env_id, reason",
    [
        ("Chess-v0", "syntax error"),
        ("Nope-v0", "unknown TextArena game"),
        ("GuessWho-v0", "OpenRouter"),
        ("Klondike-v0", "syntax error"),
    ],
)
def test_refused_games_say_why(wordle, env_id, reason):
    with pytest.raises(ValueError, match=reason):
        wordle.reset(task=env_id)
    assert wordle.reset(seed=1).done is False  # the session still plays


def test_the_catalog_is_textarenas_single_player_registry():
    ids = games.single_player_ids()
    assert len(ids) == 219 and "Wordle-v0" in ids and "Chess-v0" not in ids
    assert len({games.game_of(i) for i in ids}) == len(games.SINGLE_PLAYER_GAMES) == 30
    offline = games.offline_ids()
    assert len(offline) == 204 and not any(
        games.game_of(i) in ("GuessWho", "TwentyQuestions", "Klondike", "UltimateTexasHoldem")
        for i in offline
    )


#: Each game's plain id; the slow ones (Sokoban-v0-medium generates a level for ~40 s, the
#: hardcore Wordles tag 235k words once) are left to test_every_offline_id_is_known.
FAMILY_IDS = sorted(
    {
        next(i for i in games.offline_ids() if games.game_of(i) == g)
        for g in {games.game_of(i) for i in games.offline_ids()}
    }
)


@pytest.mark.parametrize("env_id", FAMILY_IDS)
def test_every_single_player_game_resets_and_takes_a_move(env_id):
    env = TextArenaEnvironment(TextArenaConfig(env_id=env_id))
    first = env.reset(seed=1)
    assert first.prompt and first.messages and first.messages[0].category == "PROMPT" and not first.done
    obs = play(env, "[1]")
    assert obs.messages[len(first.messages) :]  # the game answered
    assert all(isinstance(m.sender_id, int) and isinstance(m.content, str) for m in obs.messages)
    again = TextArenaEnvironment(TextArenaConfig(env_id=env_id)).reset(seed=1)
    assert again.messages == first.messages


def test_every_offline_id_is_known():
    for env_id in games.offline_ids():
        assert games.check_env_id(env_id) == env_id


def test_openenv_variables_configure_the_factory():
    environ = {
        "TEXTARENA_ENV_ID": "Mastermind-v0",
        "TEXTARENA_NUM_PLAYERS": "1",
        "TEXTARENA_MAX_TURNS": "2",
        "TEXTARENA_KW_code_length": "3",
        "TEXTARENA_KW_duplicate_numbers": "false",
    }
    assert options_from_environ(environ) == {
        "env_id": "Mastermind-v0",
        "num_players": 1,
        "max_turns": 2,
        "game_kwargs": {"code_length": 3, "duplicate_numbers": False},
    }
    env = make_environment_factory(environ=environ)()
    assert "3 digits long" in env.reset(seed=0).prompt
    assert not play(env, "[1 2 3]").done
    obs = play(env, "[2 3 4]")
    assert obs.done and obs.info["truncated"] is True and "TEXTARENA_MAX_TURNS=2" in obs.info["reason"]
    override = make_environment_factory(environ=environ, env_id="Wordle-v0", game_kwargs={})()  # options win
    assert "Wordle" in override.reset(seed=0).prompt


@pytest.mark.parametrize(
    "environ, message",
    [
        ({"TEXTARENA_KW_colour": "blue"}, "does not take these arguments.*TEXTARENA_KW_colour"),
        ({"TEXTARENA_KW_word_length": '"five"'}, "could not start"),
        ({"TEXTARENA_NUM_PLAYERS": "2"}, "Wordle-v0 is played by 1 player, not 2"),
        ({"TEXTARENA_MAX_TURNS": "zero"}, "expected a whole number"),
        ({"TEXTARENA_ENV_ID": "Chess-v0"}, "syntax error"),
    ],
)
def test_bad_variables_stop_the_factory_with_the_reason(environ, message):
    with pytest.raises((TextArenaConfigError, ValueError), match=message):
        make_environment_factory(environ=environ)


def test_nltk_download_never_runs(monkeypatch):
    nltk_data.guard_downloads()
    import nltk

    assert (
        nltk.download("words") is True and nltk.download(["words", "averaged_perceptron_tagger_eng"]) is True
    )
    with pytest.raises(
        nltk_data.MissingNLTKData, match="wordnet is not installed.*never downloads.*nltk_data"
    ):
        nltk.download("wordnet")


def test_nltk_data_builds_from_the_installed_packages(tmp_path):
    nltk_data.build(tmp_path)
    words = (tmp_path / "corpora/words/en").read_text().split()
    basic = (tmp_path / "corpora/words/en-basic").read_text().split()
    assert len(words) > 230_000 and "crane" in words and len(basic) == 850 and "behaviour" in basic
    import nltk
    from nltk.tag.perceptron import PerceptronTagger

    nltk.data.path.insert(0, str(tmp_path))
    try:
        tagger = PerceptronTagger()  # finds the model on NLTK's data path, here tmp_path
    finally:
        nltk.data.path.remove(str(tmp_path))
    assert [t for _, t in tagger.tag(["the", "crane", "is", "quick"])] == ["DT", "NN", "VBZ", "JJ"]


@pytest.mark.parametrize("game", ["Countdown-v0", "Cryptarithm-v0", "Slitherlink-v0", "ThreeCardMonte-v0"])
def test_a_second_invalid_move_ends_the_game_as_a_loss_with_its_reason(game):
    """textarena 0.7.4 swaps set_invalid_move's arguments in these games: the episode still ends
    with a numeric reward and the move's reason, instead of crashing on a reward that is text."""
    from envharness.envs.textarena.environment import TextArenaEnvironment
    from envharness.envs.textarena.models import TextArenaAction

    env = TextArenaEnvironment()
    env.reset(seed=0, task=game)
    first = env.step(TextArenaAction(message="[zz zz zz]"))
    assert not first.done  # one invalid move is allowed
    second = env.step(TextArenaAction(message="[zz zz zz]"))
    assert second.done and isinstance(second.reward, float) and second.reward < 1.0
    assert second.info["reason"].startswith("Invalid Move: ") and any(
        c.isalpha() for c in second.info["reason"][14:]
    )


def test_a_server_given_no_game_makes_none_until_a_reset_names_one(monkeypatch):
    """`serve textarena` with no game named serves the games its resets name: it does not make
    the default one at startup (Wordle's dictionaries are seconds of CPU), and the first reset
    still plays whatever it names."""
    monkeypatch.setattr(games, "_PROTOTYPES", OrderedDict())
    factory = make_environment_factory(environ={})
    assert games._PROTOTYPES == {}
    env = factory()
    assert "Mastermind" in env.reset(seed=0, task="Mastermind-v0").prompt
    assert [key[0] for key in games._PROTOTYPES] == [str(games._registry()["Mastermind-v0"].entry_point)]


def test_the_games_kept_for_copying_are_bounded_and_the_least_recently_used_go_first(monkeypatch):
    """Every set of options a client sends builds one prototype (Wordle's holds its
    dictionaries): a client that sends new ones at every reset must not grow the server."""
    monkeypatch.setattr(games, "_PROTOTYPES", OrderedDict())
    monkeypatch.setattr(games, "MAX_PROTOTYPES", 3)
    built = []
    real = games._entry_class

    def counting(entry_point):
        cls = real(entry_point)
        return lambda **kw: built.append(kw["max_turns"]) or cls(**kw)

    monkeypatch.setattr(games, "_entry_class", counting)
    for turns in (5, 6, 7):
        games.make_game("GuessTheNumber-v0", {"max_turns": turns})
    games.make_game("GuessTheNumber-v0", {"max_turns": 5})  # a hit: 5 is now the most recent
    games.make_game("GuessTheNumber-v0", {"max_turns": 8})  # 6, the least recent, goes
    assert len(games._PROTOTYPES) == 3
    assert built == [5, 6, 7, 8]
    games.make_game("GuessTheNumber-v0", {"max_turns": 7})  # still kept
    games.make_game("GuessTheNumber-v0", {"max_turns": 6})  # built again
    assert built == [5, 6, 7, 8, 6] and len(games._PROTOTYPES) == 3
