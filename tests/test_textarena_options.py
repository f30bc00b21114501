"""Game options are bounded before a game sees them: every argument of every game this server
runs is declared (read from the games' constructors, so a game or an argument added later
without a bound fails here), textarena's own variants lie within the bounds, and a client's
oversized board or tower is refused in words by a real server without the game being built."""

from __future__ import annotations

import inspect

import httpx
import pytest

from envharness.core.client import EnvServerError
from envharness.core.environment import InvalidOptions
from envharness.core.launchers import LocalServer
from envharness.core.option_bounds import Bound, ResetOptions, integer
from envharness.envs.textarena import games
from envharness.envs.textarena.client import TextArenaEnv
from envharness.envs.textarena.environment import TextArenaEnvironment
from envharness.envs.textarena.options import GAME_OPTIONS, WITHHELD

pytestmark = pytest.mark.timeout(600)


def served_games() -> dict[str, tuple[type, list]]:
    """Game family -> (its class, the registered specs of its ids), for every id served here."""
    out: dict[str, tuple[type, list]] = {}
    registry = games._registry()
    for env_id in games.single_player_ids() + games.multi_player_ids():
        family = games.game_of(env_id)
        if family in games.BROKEN:
            continue
        spec = registry[env_id]
        cls = games._entry_class(spec.entry_point)
        out.setdefault(family, (cls, []))[1].append(spec)
    return out


def constructor_arguments(cls: type) -> set[str]:
    """What a client could pass to the game: its constructor's arguments, less reset's own."""
    own = set(inspect.signature(TextArenaEnvironment.reset).parameters)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    taken = inspect.signature(cls.__init__).parameters.values()
    return {p.name for p in taken if p.name != "self" and p.kind in kinds} - own


def test_every_argument_of_every_served_game_is_bounded_or_withheld():
    served = served_games()
    assert len(served) > 60  # the catalog: 29 single-player and 50-odd multi-player games
    unbounded = {
        family: sorted(constructor_arguments(cls) - set(GAME_OPTIONS.get(family, {})) - set(WITHHELD))
        for family, (cls, _) in served.items()
    }
    assert not {f: names for f, names in unbounded.items() if names}, "give these a bound in options.py"
    stray = {
        family: sorted(set(bounds) - constructor_arguments(served[family][0]))
        for family, bounds in GAME_OPTIONS.items()
        if family in served
    }
    assert not {f: names for f, names in stray.items() if names}, (
        "bounds for arguments the game does not take"
    )
    assert not set(GAME_OPTIONS) - set(served) - {"Klondike"}, "bounds for games not served"


def test_textarena_variants_lie_within_the_bounds():
    for family, (_, specs) in served_games().items():
        for spec in specs:
            for name, value in spec.kwargs.items():
                if name in WITHHELD or value is None:
                    continue
                bound: Bound = GAME_OPTIONS[family][name]
                assert bound.problem(value) is None, (spec.id, name, value, bound.problem(value))


def test_the_generic_check_refuses_in_words():
    declared = ResetOptions({"level": integer(1, 20)})
    declared.check({"level": 20, "seed": 3, "episode_id": "e"})
    for options, words in [
        ({"level": 21}, "option level must be an integer from 1 to 20, got 21"),
        ({"level": True}, "option level must be an integer, got True"),
        ({"level": 10**5000}, "an integer of 16610 bits"),
        ({"speed": 1}, "this environment does not take these arguments: 'speed' (it takes: level)"),
        ({"seed": -1}, "option seed must be an integer from 0 to"),
    ]:
        with pytest.raises(InvalidOptions, match=words.replace("(", r"\(").replace(")", r"\)")):
            declared.check(options)


@pytest.fixture(scope="module")
def server():
    with LocalServer("textarena") as srv:
        yield srv


LARGEST_ASKED = [
    ("Minesweeper-v0", {"rows": 2000, "cols": 2000}, "option rows must be an integer from 2 to 24, got 2000"),
    ("TowerOfHanoi-v0", {"num_disks": 3_000_000}, "option num_disks must be an integer from 1 to 10"),
    ("Sokoban-v0", {"dim_room": [500, 500]}, "option dim_room item 0 must be an integer from 5 to 8"),
    ("Wordle-v0", {"word_length": 10**400}, "an integer of 1329 bits"),
    ("Taboo-v0", {"data_path": "/etc/passwd"}, "Taboo-v0 does not take these arguments: 'data_path'"),
    ("Nim-v0", {"piles": list(range(1, 10_000))}, "option piles must be a list of at most 10 items"),
]


@pytest.mark.parametrize(("task", "asked", "words"), LARGEST_ASKED, ids=[t for t, _, _ in LARGEST_ASKED])
def test_a_server_refuses_oversized_game_options_before_making_the_game(server, task, asked, words):
    made_before = set(games._PROTOTYPES)
    with TextArenaEnv(server.base_url) as env, pytest.raises(EnvServerError) as refused:
        env.reset(task=task, seed=1, **asked)
    assert words in str(refused.value), refused.value
    assert set(games._PROTOTYPES) == made_before  # the game was never built
    reply = httpx.post(f"{server.base_url}/reset", json={"task": task, **asked}, timeout=120)
    assert 400 <= reply.status_code < 500 and words in reply.text, reply.text
    with TextArenaEnv(server.base_url) as env:  # the server and a sensible game are unharmed
        assert env.reset(task=task, seed=1).observation.prompt
