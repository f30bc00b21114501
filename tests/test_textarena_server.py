"""TextArena over the wire: `envharness serve textarena` on loopback, played to a win by the
scripted Wordle solver through our clients and through OpenEnv 0.10's generic client; replayable
seeds under concurrency; bad input keeps the session and the server alive; harness episodes
with the scripted policy; MCP tools playing a game."""

from __future__ import annotations

import asyncio

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openenv.core.generic_client import GenericEnvClient

from envharness.core.client import EnvServerError
from envharness.core.launchers import LocalServer
from envharness.envs.textarena.client import AsyncTextArenaEnv, TextArenaAction, TextArenaEnv
from envharness.envs.textarena.harness import HARNESS
from envharness.envs.textarena.scripted import scripted_move
from envharness.harness import BatchingModelStep, HarnessRunLimits, run_episodes
from envharness.models.scripted import ScriptedBackend

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def server():
    with LocalServer("textarena") as srv:
        yield srv


def conversation(observation) -> list[dict]:
    """The game's text as the scripted solver reads it: one user turn with every message."""
    messages = (
        observation["messages"]
        if isinstance(observation, dict)
        else [m.model_dump() for m in observation.messages]
    )
    return [{"role": "user", "content": "\n".join(m["content"] for m in messages)}]


def test_scripted_solver_wins_wordle_through_our_sync_client(server):
    with TextArenaEnv(server.base_url) as env:
        result = env.reset(seed=21)
        assert (
            "You are Playing Wordle" in result.observation.prompt and result.reward == 0.0 and not result.done
        )
        for _ in range(6):
            result = env.step(TextArenaAction(message=scripted_move(conversation(result.observation))))
            if result.done:
                break
        assert result.done and result.reward == 1.0 and result.observation.info["won"] is True
        state = env.state()
        assert state.won and state.seed == 21 and state.env_id == "Wordle-v0" and 1 <= state.step_count <= 6


def test_openenv_generic_client_plays_wordle_to_a_win(server):
    with GenericEnvClient(base_url=server.base_url).sync() as env:
        result = env.reset(seed=22)
        obs = result.observation
        assert set(obs) >= {"prompt", "messages", "current_player_id", "legal_players", "info"}
        assert obs["messages"][0]["category"] == "PROMPT" and obs["messages"][0]["sender_id"] == -1
        assert obs["legal_players"] == [0] and obs["current_player_id"] == 0
        for _ in range(6):
            result = env.step({"message": scripted_move(conversation(result.observation))})
            if result.done:
                break
        assert result.done is True and result.reward == 1.0
        assert env.state()["seed"] == 22
        with pytest.raises(RuntimeError, match="game is over"):
            env.step({"message": "[crane]"})
        assert env.reset(seed=22).observation["prompt"] == obs["prompt"]


async def test_same_seed_same_game_across_concurrent_sessions(server):
    async def episode(seed: int) -> list[str]:
        async with AsyncTextArenaEnv(server.base_url) as env:
            await env.reset(seed=seed, task="Mastermind-v0")
            out = []
            for move in ("[1 2 3 4]", "[2 3 4 5]", "[3 4 5 6]"):
                result = await env.step(TextArenaAction(message=move))
                out.append(result.observation.messages[-1].content)
            return out

    runs = await asyncio.gather(*(episode(s) for s in [5, 5, 6, 5, 6, 5, 5, 6]))
    assert len({tuple(r) for r, s in zip(runs, [5, 5, 6, 5, 6, 5, 5, 6]) if s == 5}) == 1
    assert runs[0] != runs[2]


def test_bad_input_keeps_the_session_and_the_server(server):
    with TextArenaEnv(server.base_url) as env:
        env.reset(seed=3)
        for message, error in (("", "empty move"), ("y" * 100_000, "100000 characters refused")):
            with pytest.raises(EnvServerError, match=error):
                env.step(TextArenaAction(message=message))
        result = env.step(TextArenaAction(message="[qzxwv]"))
        assert "'qzxwv' is not an English word" in result.observation.messages[-1].content and not result.done
        for task, error in (
            ("Nope-v0", "unknown TextArena game"),
            ("Chess-v0", "syntax error"),
            ("ReverseTicTacToe-v0", "syntax error"),
            ("TwentyQuestions-v0", "OpenRouter"),
        ):
            with pytest.raises(EnvServerError, match=error):
                env.reset(task=task)
        with pytest.raises(EnvServerError, match="does not take these arguments"):
            env.reset(task="Wordle-v0", bogus=1)
        assert env.reset(seed=3, task="GuessTheNumber-v0").observation.prompt.startswith("You are Player 0")
        assert env.step(TextArenaAction(message="[10]")).observation.messages[-1].category == "GAME_MESSAGE"
    with TextArenaEnv(server.base_url) as other:  # the server still serves new sessions
        assert other.reset(seed=1).observation.prompt


def test_from_local_takes_openenvs_variables():
    env_vars = {
        "TEXTARENA_ENV_ID": "Mastermind-v0",
        "TEXTARENA_NUM_PLAYERS": "1",
        "TEXTARENA_KW_code_length": "3",
    }
    with TextArenaEnv.from_local(env_vars=env_vars) as env:
        result = env.reset(seed=2)
        assert "3 digits long" in result.observation.prompt
        for _ in range(20):
            result = env.step(TextArenaAction(message=scripted_move(conversation(result.observation))))
            if result.done:
                break
        assert result.reward == 1.0


async def test_harness_plays_the_rl_games_with_the_scripted_policy(server):
    backend = ScriptedBackend(env="textarena")
    batcher = BatchingModelStep(
        backend, tool_call_parser=HARNESS.tool_call_parser, send_tools=False, max_wait_s=0.5
    )
    factory = HARNESS.session_factory(client_factory=lambda: AsyncTextArenaEnv(base_url=server.base_url))
    tasks = ["Wordle-v0", "Mastermind-v0", "GuessTheNumber-v0", "TowerOfHanoi-v0"]
    results = await run_episodes(
        factory,
        tasks,
        backend=batcher,
        max_concurrency=4,
        seeds=[0, 1, 2, 3],
        limits=HarnessRunLimits(max_turns=25),
    )
    assert [(r.error, r.env_reward, r.verify.metrics["won"]) for r in results] == [(None, 1.0, True)] * 4
    assert [r.verify.metrics["task_name"] for r in results] == tasks
    wordle = results[0]
    assert wordle.messages[0]["role"] == "user" and "You are Playing Wordle" in wordle.messages[0]["content"]
    assert [m["role"] for m in wordle.messages[1:3]] == ["assistant", "tool"]
    assert "Feedback:" in wordle.messages[2]["content"] and wordle.messages[-1]["content"].startswith(
        "Congratulations"
    )
    hanoi = results[3]
    assert len(hanoi.turns) == 7  # the optimal 2**3 - 1 moves


async def test_mcp_tools_play_a_game(server):
    async with (
        streamable_http_client(f"{server.base_url}/mcp") as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"reset", "send", "observation"}
        before = await session.call_tool("send", {"message": "[1]"})
        assert before.isError and "call reset first" in before.content[0].text
        first = await session.call_tool("reset", {"task": "GuessTheNumber-v0", "seed": 4})
        assert not first.isError and first.structuredContent["env_id"] == "GuessTheNumber-v0"
        assert first.structuredContent["seed"] == 4 and "Guess The Number" in first.content[0].text
        conv = [{"role": "user", "content": first.content[0].text}]
        for _ in range(10):
            move = scripted_move(conv)
            result = await session.call_tool("send", {"message": move})
            assert not result.isError
            conv += [
                {"role": "assistant", "content": move},
                {"role": "user", "content": result.content[0].text},
            ]
            if result.structuredContent["done"]:
                break
        assert result.structuredContent["won"] is True and result.structuredContent["reward"] == 1.0
        empty = await session.call_tool("send", {"message": ""})
        assert empty.isError
        whole = await session.call_tool("observation", {})
        assert "The target number is" in whole.content[0].text and whole.structuredContent["done"] is True


async def test_mcp_tools_play_a_two_player_game_against_the_servers_player(server):
    """MCP's reset takes `opponent` and `seat`: an MCP client plays its seat of Tic-Tac-Toe
    against the scripted player (the strong move read from the conversation, as `--model scripted`
    plays), seeing only its own view; minimax against minimax draws."""
    async with (
        streamable_http_client(f"{server.base_url}/mcp") as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        first = await session.call_tool(
            "reset", {"task": "TicTacToe-v0", "seed": 3, "opponent": "scripted", "seat": "1"}
        )
        assert not first.isError and "You are Player 1" in first.content[0].text
        conv = [{"role": "user", "content": first.content[0].text}]
        for _ in range(9):
            move = scripted_move(conv)
            result = await session.call_tool("send", {"message": move})
            assert not result.isError and "Player 0 attempted an invalid move" not in result.content[0].text
            conv += [
                {"role": "assistant", "content": move},
                {"role": "user", "content": result.content[0].text},
            ]
            if result.structuredContent["done"]:
                break
        assert result.structuredContent["done"] and result.structuredContent["reward"] == 0.0  # a draw
        refused = await session.call_tool("reset", {"task": "TicTacToe-v0", "opponent": "gpt"})
        assert refused.isError
