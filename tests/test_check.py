"""`envharness check`: the contract passes on every registered environment, on every task
(MiniWoB's 125, each game TextArena's Task API lists, echo, the web-task example), and on the
custom example; it fails, saying why, on environments broken on purpose (defined here: the custom
example's number guessing with one fault each); the adversarial floor stays near zero on
MiniWoB and Wordle and lists the episodes of a policy that does score."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import sys
from pathlib import Path

import pytest

from envharness.check import check_environment, run_floor
from envharness.check.floor import (
    INJECTIONS,
    HostilePolicy,
    NoopPolicy,
    RandomPolicy,
    RepeatPolicy,
    random_call,
)
from envharness.check.playground import first_difference, seated_options, stable
from envharness.check.report import PASS, SKIP, floor_markdown, floor_text
from envharness.cli import main as cli_main
from envharness.core.registry import EnvSpec, env_harness
from envharness.envs.browsergym import miniwob
from envharness.harness.tools import tool_spec

TESTS = Path(__file__).resolve().parent
EXAMPLE = TESTS.parent / "examples" / "custom_env"
if str(EXAMPLE) not in sys.path:  # the broken environments below build on the example
    sys.path.insert(0, str(EXAMPLE))

import number_guess  # noqa: E402

pytestmark = pytest.mark.timeout(300)
WEB = ["click-test", "enter-text"]


# -- the custom example, broken on purpose, one fault each ---------------------------------
class SeedlessGuess(number_guess.NumberGuessEnvironment):
    """Ignores the seed: the same seed is another game."""

    def reset(self, seed=None, episode_id=None, task="guess-100", **options):
        return super().reset(None, episode_id, task, **options)


class JammingGuess(number_guess.NumberGuessEnvironment):
    """A guess out of range jams it: that step and every later one raise."""

    jammed = False

    def step(self, action):
        if self.jammed or not 1 <= action.guess <= self._top:
            self.jammed = True
            raise RuntimeError("the machine is jammed")
        return super().step(action)


class TickingGuess(number_guess.NumberGuessEnvironment):
    """Its feedback tells the time (every step the server has taken): the same seed starts the
    same game, but later steps differ, as a page that follows the clock."""

    ticks = 0

    def step(self, action):
        observation = super().step(action)
        TickingGuess.ticks += 1
        observation.feedback += f" (tick {TickingGuess.ticks})"
        return observation


class LateGuess(TickingGuess):
    """Tells the time from the start on: its first observations differ too."""

    def reset(self, seed=None, episode_id=None, task="guess-100", **options):
        observation = super().reset(seed, episode_id, task, **options)
        TickingGuess.ticks += 1
        observation.prompt += f" (tick {TickingGuess.ticks})"
        return observation


class LaxGuess(number_guess.NumberGuessEnvironment):
    """Plays guess-100 for any task name it does not know, instead of refusing it."""

    def reset(self, seed=None, episode_id=None, task="guess-100", **options):
        return super().reset(
            seed, episode_id, task if task in number_guess.RANGES else "guess-100", **options
        )


class GenerousGuess(number_guess.NumberGuessEnvironment):
    """Pays 1 for any guess at all."""

    def step(self, action):
        observation = super().step(action)
        observation.reward, observation.done = 1.0, True
        return observation


def _spec(name: str, environment: str, harness: str = "number_guess:HARNESS") -> EnvSpec:
    return EnvSpec(
        name=f"test_check:{name}",
        environment=f"test_check:{environment}",
        client="number_guess:AsyncNumberGuessEnv",
        harness=harness,
    )


LOSING_HARNESS = dataclasses.replace(number_guess.HARNESS, scripted_policy=lambda messages: "1")
SEEDLESS = _spec("SEEDLESS", "SeedlessGuess")
JAMMING = _spec("JAMMING", "JammingGuess")
LAX = _spec("LAX", "LaxGuess")
LOSING = EnvSpec(
    name="test_check:LOSING",
    environment="number_guess:NumberGuessEnvironment",
    client="number_guess:AsyncNumberGuessEnv",
    harness="test_check:LOSING_HARNESS",
)
GENEROUS = _spec("GENEROUS", "GenerousGuess")
TICKING = _spec("TICKING", "TickingGuess")
CLOCK_HARNESS = dataclasses.replace(number_guess.HARNESS, clock_driven=lambda task: "it tells the time")
TICKING_DECLARED = _spec("TICKING_DECLARED", "TickingGuess", harness="test_check:CLOCK_HARNESS")
LATE_DECLARED = _spec("LATE_DECLARED", "LateGuess", harness="test_check:CLOCK_HARNESS")


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """This module and the example importable in the servers started as child processes."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(TESTS), str(EXAMPLE), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )


def statuses(report) -> dict[str, str]:
    return {r.name: r.status for r in report.results}


# -- the contract passes ----------------------------------------------------------------
BARE = "envharness.envs.echo.environment:EchoEnvironment"  # echo's server alone: no harness


def test_an_environment_without_a_harness_gets_the_server_checks_and_says_which_it_skips(capsys):
    assert cli_main(["check", BARE, "--env-option", "max_steps=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    status = {
        line.split()[1].rstrip(":"): line.split()[0]
        for line in lines
        if line.split()[:1] in (["PASS"], ["FAIL"], ["SKIP"])
    }
    assert status["server_api"] == status["same_seed_same_episode"] == status["bad_wire_actions"] == PASS
    assert status["reset_after_done"] == PASS  # max_steps=3 ends its episodes
    assert status["bad_tool_calls"] == status["scripted_policy_wins"] == status["task_list"] == SKIP
    assert any(line.startswith(f"SKIP  task_list: {BARE} registers no harness") for line in lines)


def test_echo_passes_and_skips_reset_after_done_as_its_episodes_never_end():
    report = check_environment("echo")
    assert report.ok and [r.name for r in report.skipped] == ["reset_after_done"], report.format()
    assert "no episode ended" in report.skipped[0].reason
    assert check_environment("echo", {"max_steps": 3}).skipped == []


# -- every built-in environment, on every task ----------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_browsergym_passes_every_check_on_every_miniwob_task():
    """All 125 tasks, one seed each, on one server (one browser): its sessions restart, switch
    and load pages as a user's run does. Eight actions are enough for every scripted solution."""
    report = check_environment("browsergym", tasks=["all"], episodes=1, max_steps=8)
    assert statuses(report) == dict.fromkeys(statuses(report), PASS), report.format()
    assert report.tasks == list(miniwob.all_tasks()) and len(report.tasks) == 125


def textarena_games(players: str) -> list[str]:
    """Each game the TextArena server's Task API lists, by its base id (``Wordle-v0``; its other
    ids are the same game with other settings, ``-train`` or ``-raw``), for one player or more."""
    harness = env_harness("textarena")
    return [
        task
        for task in harness.served_tasks().tasks
        if re.fullmatch(r".+-v\d+", task) and (harness.players(task) == (1, 1)) == (players == "one")
    ]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("players", ["one", "several"])
def test_textarena_passes_every_check_on_every_game(players):
    """Single-player games as they are; multi-player ones against the server's random player."""
    games = textarena_games(players)
    assert len(games) == (26 if players == "one" else 56)
    options, _ = seated_options("textarena", {}, games, "", "alternate", False)  # as `envharness check`
    report = check_environment("textarena", options, tasks=games, episodes=1)
    assert report.ok and not report.skipped, report.format()


def test_the_custom_example_passes(capsys):
    assert cli_main(["check", "number_guess:SPEC", "--tasks", "all", "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "9 passed, 0 failed, 0 skipped" in out and "task_list: 3 task(s) listed" in out


def test_a_web_task_module_passes(monkeypatch):
    """The browser with the user's own web tasks (`--env-option tasks=webtasks.formtasks`)."""
    examples = str(TESTS.parent / "examples")
    monkeypatch.syspath_prepend(examples)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([examples, *filter(None, [os.environ.get("PYTHONPATH")])])
    )
    report = check_environment(
        "browsergym", options={"tasks": "webtasks.formtasks"}, tasks=["all"], episodes=1
    )
    assert statuses(report) == dict.fromkeys(statuses(report), PASS), report.format()
    assert report.tasks == ["fill-form", "find-item", "tick-boxes"]


def test_the_short_form_of_the_example_passes(capsys):
    """`examples/custom_env/guess.py`: the game in `define_environment`'s short form."""
    assert cli_main(["check", "guess:SPEC", "--tasks", "all", "--episodes", "1"]) == 0
    assert "9 passed, 0 failed, 0 skipped" in capsys.readouterr().out


# -- and fails, saying why, on broken environments --------------------------------------------
@pytest.mark.parametrize(
    "env, check, words",
    [
        ("test_check:SEEDLESS", "same_seed_same_episode", "played twice with the same actions"),
        ("test_check:JAMMING", "bad_tool_calls", "the episode died at"),
        ("test_check:LOSING", "scripted_policy_wins", "it lost"),
        ("test_check:LAX", "unknown_task", "the server accepted reset(task='guess-100-no-such-task')"),
    ],
)
def test_a_broken_environment_fails_the_check_it_breaks(env, check, words, capsys):
    assert cli_main(["check", env, "--episodes", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed and failed[0].startswith(f"FAIL  {check}: ") and words in failed[0], lines
    assert any(line.startswith("PASS  server_api") for line in lines)  # the rest is still checked


def test_a_clock_driven_task_is_compared_by_its_start_only(capsys):
    """A page that follows the clock fails the comparison unless its harness declares it
    (`EnvHarness.clock_driven`); then its start is still compared: a first observation that
    differs fails."""
    assert cli_main(["check", "test_check:TICKING", "--episodes", "1", "--tasks", "guess-100"]) == 1
    assert "FAIL  same_seed_same_episode: guess-100 seed 0" in capsys.readouterr().out
    assert cli_main(["check", "test_check:TICKING_DECLARED", "--episodes", "1", "--tasks", "guess-100"]) == 0
    out = capsys.readouterr().out
    assert (
        "PASS  same_seed_same_episode" in out
        and "guess-100 compared by its goal only (it tells the time)" in out
    )
    assert cli_main(["check", "test_check:LATE_DECLARED", "--episodes", "1", "--tasks", "guess-100"]) == 1
    assert (
        "FAIL  same_seed_same_episode: guess-100 seed 0, played twice with the same actions: the first"
        in (capsys.readouterr().out)
    )


def test_bad_usage_exits_2(capsys):
    assert cli_main(["check", "no-such-env"]) == 2
    assert cli_main(["check", BARE, "--floor"]) == 2  # the floor plays through a harness
    assert cli_main(["check", "textarena", "--floor", "--floor-policies", "random,psychic"]) == 2
    assert cli_main(["check", "number_guess:SPEC", "--tasks", "guess-7"]) == 2
    err = capsys.readouterr().err
    assert "Unknown environment 'no-such-env'" in err and "unknown floor policy psychic" in err
    assert "unknown task 'guess-7'" in err


# -- the adversarial floor ----------------------------------------------------------------
@pytest.mark.slow
def test_the_floor_on_miniwob_is_near_zero_and_tabled():
    report = run_floor("browsergym", tasks=WEB, episodes=3, max_steps=5)
    assert report.tasks == WEB and len(report.episodes) == 2 * 4 * 3
    assert not report.errors(), [e.error for e in report.errors()]
    assert report.rate("noop") == report.rate("hostile") == 0.0
    assert sum(e.success for e in report.episodes) <= 2  # near zero: a lucky random click at most
    text = floor_text(report)
    assert all(any(line.split()[:1] == [task] for line in text.splitlines()) for task in WEB)
    hostile = next(e for e in report.episodes if e.policy == "hostile")
    assert hostile.actions[0].startswith("__import__('os').system(")  # an unknown tool, refused in words


def test_the_floor_on_wordle_is_zero_and_written(tmp_path, capsys):
    out = tmp_path / "floor"
    assert (
        cli_main(
            [
                "check",
                "textarena",
                "--floor",
                "--tasks",
                "Wordle-v0",
                "--floor-out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "no policy scored on any task" in printed
    row = next(line.split() for line in printed.splitlines() if line.startswith("Wordle-v0"))
    assert row[1:5] == ["0/3", "0/3", "0/3", "0/3"]
    saved = json.loads((out / "floor.json").read_text())
    assert saved["scored"] == {} and saved["success_rate"] == dict.fromkeys(
        ["random", "noop", "hostile", "repeat"], 0.0
    )
    assert "| `Wordle-v0` | 0/3 | 0/3 | 0/3 | 0/3 |" in (out / "floor.md").read_text()


def test_a_policy_that_scores_is_listed_with_its_episodes(tmp_path, capsys):
    report = run_floor("test_check:GENEROUS", tasks=["guess-10"], episodes=3)
    assert report.cell("guess-10", "random").successes == report.cell("guess-10", "repeat").successes == 3
    assert report.cell("guess-10", "noop").successes == 0  # no guess, no pay
    wins = report.scored()["guess-10"]
    assert {e.policy for e in wins} >= {"random", "repeat"} and all(
        e.actions and e.reward == 1.0 for e in wins
    )
    assert any(
        line.strip().startswith("random seed 0, reward 1: guess(number=")
        for line in floor_text(report).splitlines()
    )
    assert "## Tasks where a policy scored" in floor_markdown(report)
    code = cli_main(
        [
            "check",
            "test_check:GENEROUS",
            "--floor",
            "--tasks",
            "guess-10",
            "--floor-max-success",
            "0.5",
            "--no-progress",
        ]
    )
    assert code == 1 and "FAIL  floor: " in capsys.readouterr().out


# -- the parts, without a server ------------------------------------------------------------
CLICK = tool_spec("click", "click", {"bid": {"type": "string"}, "button": {"type": "string"}}, ["bid"])
SCROLL = tool_spec(
    "scroll", "scroll", {"direction": {"type": "string", "enum": ["up", "down"]}}, ["direction"]
)
PAGE = [{"role": "user", "content": "Goal: click OK\n[12] button 'OK'\n[13] link 'Help'"}]


def test_random_arguments_come_from_the_schema_and_the_page():
    rng = random.Random(0)
    calls = [random_call([CLICK, SCROLL], PAGE, rng) for _ in range(60)]
    clicks = [c.args["bid"] for c in calls if c.name == "click"]
    assert {"12", "13"} <= set(clicks)  # the page's element ids
    assert all(c.args["direction"] in ("up", "down") for c in calls if c.name == "scroll")


def test_the_policies_moves():
    tools = [CLICK, SCROLL]
    assert NoopPolicy(random.Random(0))(PAGE, tools).tool_calls == []
    repeat = RepeatPolicy(random.Random(0))
    first = repeat(PAGE, tools).tool_calls[0]
    assert all(repeat(PAGE, tools).tool_calls[0] == first for _ in range(3))
    hostile = HostilePolicy(random.Random(0), parser=lambda text: [])
    moves = [hostile(PAGE, tools) for _ in range(4)]
    assert moves[0].tool_calls[0].name not in ("click", "scroll")  # an unknown tool
    assert any(not isinstance(v, str) for v in moves[1].tool_calls[0].args.values())  # wrong types
    assert max(len(str(v)) for v in moves[2].tool_calls[0].args.values()) >= 100_000  # enormous
    assert any(v in INJECTIONS for v in moves[3].tool_calls[0].args.values())  # code injection
    assert RandomPolicy(random.Random(1))(PAGE, tools).tool_calls[0].name in ("click", "scroll")


def test_clocks_and_episode_ids_are_not_compared():
    a = {"goal": "x", "elapsed_time": 0.1, "episode_id": "a", "info": {"timestamp": 1, "score": 2}}
    b = {"goal": "x", "elapsed_time": 0.2, "episode_id": "b", "info": {"timestamp": 9, "score": 2}}
    assert first_difference(stable(a), stable(b)) is None
    assert first_difference(stable(a), stable({**b, "goal": "y"})) == ".goal: 'x' vs 'y'"
    assert first_difference({"r": 0.9998}, {"r": 0.9999}, tol=0.01) is None


def test_two_player_games_are_checked_against_the_servers_player(capsys):
    """`check` on two-player games seats the environment's first server-played opponent (a
    legal random move): every contract check passes, the scripted player's games are tallied
    (strong play may lose a poker hand, never by an invalid move), and the floor plays every
    episode instead of crashing on an empty seat. Single-player games beside them are refused."""
    tasks = "KuhnPoker-v0,TicTacToe-v0"
    assert cli_main(["check", "textarena", "--tasks", tasks]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "against the server's random player" in printed
    assert "PASS  scripted_policy_wins: won " in printed and "game(s) against the opponent" in printed
    assert cli_main(["check", "textarena", "--floor", "--tasks", tasks, "--no-progress"]) == 0
    floor = capsys.readouterr().out
    assert "crashed" not in floor and "noop 0.0%" in floor and "hostile 0.0%" in floor, floor
    assert cli_main(["check", "textarena", "--tasks", "KuhnPoker-v0,Wordle-v0"]) == 2
    assert "check them in separate runs" in capsys.readouterr().err
