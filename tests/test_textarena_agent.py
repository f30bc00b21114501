"""How agents play TextArena, without a server: the move parser, the scripted players (the
Wordle baseline on 32 seeds), the TRL-style shaped rewards, the task list and the prompt style."""

from __future__ import annotations

import pytest

from envharness.core.registry import env_harness, get_spec, load_target
from envharness.envs.textarena import rewards, wordle
from envharness.envs.textarena.environment import TextArenaConfig, TextArenaEnvironment
from envharness.envs.textarena.harness import HARNESS, RL_GAMES, task_list, web_info
from envharness.envs.textarena.models import TextArenaAction
from envharness.envs.textarena.parsing import parse_move
from envharness.envs.textarena.prompts import STYLES
from envharness.envs.textarena.scripted import NoScriptedMove, scripted_move

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize(
    "reply, move",
    [
        ("[crane]", "[crane]"),
        ("I think the answer is... [slate]. Final: [crane]", "[crane]"),
        ("guess: crane", "[crane]"),
        ("Move: A C", "[A C]"),
        ('{"name": "send", "arguments": {"message": "[1 2 3 4]"}}', "[1 2 3 4]"),
        ('<tool_call>{"name": "guess", "arguments": {"word": "crane"}}</tool_call>', "[crane]"),
        ("send(message='[A B]')", "[A B]"),
        ('guess("crane")', "[crane]"),
    ],
)
def test_parser_reads_moves(reply, move):
    call = parse_move(reply)
    assert call.name == "send" and call.args == {"message": move} and "parse_error" not in call.metadata


def test_parser_falls_back_to_the_last_line_and_ignores_empty_replies():
    call = parse_move("I am not sure.\ncrane")
    assert call.args == {"message": "crane"} and "parse_error" in call.metadata
    assert parse_move("") is None and parse_move("   \n") is None
    assert len(parse_move("x" * 5000).args["message"]) == 200


def test_wordle_feedback_rules():
    assert wordle.feedback("crane", "crane") == "GGGGG"
    assert wordle.feedback("speed", "abide") == "XXYXY"  # one 'e' in the secret: one yellow, the other grey
    assert wordle.feedback("eerie", "there") == "YXYXG"


def test_scripted_wordle_baseline_on_32_seeds():
    """The baseline the docs report: the solver wins every one of seeds 0-31, in <= 4 guesses."""
    env = TextArenaEnvironment(TextArenaConfig())
    wins, guesses = 0, []
    for seed in range(32):
        obs = env.reset(seed=seed)
        conv = [{"role": "user", "content": obs.prompt}]
        while not obs.done:
            move = scripted_move(conv)
            obs = env.step(TextArenaAction(message=move))
            conv += [
                {"role": "assistant", "content": move},
                {
                    "role": "tool",
                    "content": "\n".join(
                        m.content for m in obs.messages[obs.metadata["new_messages_from"] :]
                    ),
                },
            ]
        wins += obs.reward >= 1.0
        guesses.append(env.state.step_count)
    assert wins == 32 and max(guesses) <= 4


@pytest.mark.parametrize("env_id", RL_GAMES)
def test_scripted_players_win_the_rl_games(env_id):
    env = TextArenaEnvironment(TextArenaConfig(env_id=env_id))
    for seed in range(3):
        obs = env.reset(seed=seed)
        conv = [{"role": "user", "content": "\n".join(m.content for m in obs.messages)}]
        while not obs.done:
            move = scripted_move(conv)
            obs = env.step(TextArenaAction(message=move))
            conv += [
                {"role": "assistant", "content": move},
                {
                    "role": "user",
                    "content": "\n".join(
                        m.content for m in obs.messages[obs.metadata["new_messages_from"] :]
                    ),
                },
            ]
        assert obs.reward == 1.0, (env_id, seed, conv[-1])


def test_scripted_policy_refuses_games_it_does_not_know():
    with pytest.raises(NoScriptedMove, match="no scripted player"):
        scripted_move([{"role": "user", "content": "You are playing Sudoku."}])


WON = (
    "You submitted [heart].\nFeedback:\nH E A R T\nX Y X Y X\nYou have 5 guesses left.\n"
    "You attempted an invalid move. Reason: You have already guessed 'heart' before. Please try a different word.\n"
    "Congratulations! You guessed the word correctly!"
)
LOST = (
    "You submitted [heart].\nFeedback:\nH E A R T\nG Y X X X\nYou have 5 guesses left.\n"
    "You attempted an invalid move. Reason: 'qqqqq' is not an English word.\n"
    "You submitted [house].\nFeedback:\nH O U S E\nG G X Y X\nYou have 4 guesses left."
)


def test_shaped_rewards_from_the_episode_text():
    completions = [WON, LOST]
    assert rewards.reward_correct(completions) == [1.0, 0.0]
    assert rewards.reward_greens(completions) == [1.0, pytest.approx(0.4)]
    assert rewards.reward_yellows(completions) == [pytest.approx(0.4), pytest.approx(0.2)]
    assert rewards.reward_repetition(completions) == [pytest.approx(0.5), 1.0]
    assert rewards.reward_format(completions) == [1.0, pytest.approx(2 / 3)]
    as_messages = [[{"role": "assistant", "content": "[heart]"}, {"role": "tool", "content": LOST}]]
    assert rewards.reward_greens(as_messages) == [pytest.approx(0.4)]


def test_shaped_rewards_prefer_the_rollouts_own_keys():
    assert rewards.reward_greens(["x", "y"], green_reward=[0.2, 0.6]) == [0.2, 0.6]
    assert rewards.reward_correct(["x", "y"], env_reward=[1.0, 0.3]) == [1.0, 0.0]
    assert rewards.reward_yellows(["?"], messages=[[{"role": "tool", "content": LOST}]]) == [
        pytest.approx(0.2)
    ]


def test_the_registry_finds_every_part():
    spec = get_spec("textarena")
    assert env_harness("textarena") is HARNESS
    assert (
        spec.load("client").__name__ == "AsyncTextArenaEnv"
        and spec.load("mcp_toolset").__name__ == "TextArenaToolset"
    )
    info = spec.load("web_info")()
    assert info == web_info() and "Wordle-v0" in info["tasks"] and info["actions"][0]["example"] == "[crane]"
    assert set(load_target(HARNESS.reward_functions)) == {
        "correct",
        "greens",
        "yellows",
        "repetition",
        "format",
    }
    assert set(load_target(HARNESS.prompt_styles)) == {"default"}


def test_task_list_and_check_task():
    tasks = task_list()
    assert (
        tasks.num_tasks == 204
        and tasks.splits["rl"] == RL_GAMES
        and tasks.splits["default"] == ("Wordle-v0",)
    )
    assert tasks.expand(["rl", "Hangman-v0", "wordle"], HARNESS.check_task)[:5] == [*RL_GAMES, "Hangman-v0"]
    assert "Wordle-v0-long" in tasks.splits["wordle"]
    with pytest.raises(ValueError, match="syntax error"):
        HARNESS.check_task("Chess-v0")
    assert HARNESS.check_task("TicTacToe-v0") == "TicTacToe-v0"  # played against the server's opponent


def test_default_prompt_style_is_the_games_own_text():
    env = TextArenaEnvironment(TextArenaConfig(env_id="TowerOfHanoi-v0"))
    first = env.reset(seed=0)
    style = STYLES["default"]
    opening = style.opening(first, "TowerOfHanoi-v0", ["send"])
    assert len(opening) == 1 and opening[0]["role"] == "user"
    assert "Tower of Hanoi" in opening[0]["content"] and "A: [3, 2, 1]" in opening[0]["content"]
    after = env.step(TextArenaAction(message="[A C]"))
    text = style.observation_text(after)
    assert (
        text.startswith("You moved disk 1 from A to C.")
        and "C: [1]" in text
        and "[A C]" not in text.splitlines()[0][:5]
    )
