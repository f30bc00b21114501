"""One thread per session: a sync environment's reset, step, state and close run on one thread,
so what `reset` makes (an in-memory sqlite connection, `tests/ledger_env.py`) works in `step`,
`state` and `close`, over a real server on loopback (WebSocket and HTTP); `check` passes such an
environment and, for one that opens its connection in `__init__`, names the checklist item."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import httpx
import pytest

from envharness.cli import main as cli_main
from envharness.core.launchers import LocalServer
from envharness.core.session_threads import MAX_IDLE

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """`ledger_env` importable here and in the servers started as child processes."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


def test_websocket_sessions_run_reset_step_state_and_close_on_one_thread():
    """Eight sessions at once, each: reset (opens sqlite), five steps and state (use it)."""

    async def one(base_url: str, k: int) -> tuple[int, int, str]:
        import ledger_env

        async with ledger_env.SPEC.client(base_url) as client:
            await client.reset(seed=k, task="ledger-50")
            for _ in range(5):
                result = await client.step(ledger_env.AddAction(amount=1))
            with pytest.raises(ValueError, match="an amount of 0"):  # refused: the session goes on
                await client.step(ledger_env.AddAction(amount=0))
            state = await client.state()
            return state.rows, state.thread, result.observation.text

    async def main(base_url: str) -> list[tuple[int, int, str]]:
        return await asyncio.gather(*(one(base_url, k) for k in range(8)))

    with LocalServer("ledger_env:SPEC") as server:
        answers = asyncio.run(main(server.base_url))
    for rows, threads, text in answers:
        assert rows == 5 and text.startswith("balance 5;")
        assert threads == 1  # reset, every step and state saw the same thread


def test_http_reset_and_step_share_the_thread_and_threads_are_reused():
    """HTTP /step resets and steps one fresh environment: both on its thread. Sessions give their
    thread back when they close, so many requests do not start a thread each."""

    async def main(base_url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            first = await http.post("/reset", json={"task": "ledger-10", "seed": 1})
            assert first.status_code == 200, first.text
            assert first.json()["observation"]["text"].startswith("balance 0;")
            steps = [http.post("/step", json={"action": {"amount": 2}}) for _ in range(24)]
            return [first, *await asyncio.gather(*steps)]

    with LocalServer("ledger_env:SPEC") as server:
        for _ in range(2):
            answers = asyncio.run(main(server.base_url))
            assert all(r.status_code == 200 for r in answers), [
                r.text for r in answers if r.status_code != 200
            ]
            assert all(r.json()["observation"]["text"].startswith("balance 2;") for r in answers[1:])
        session_threads = [t for t in threading.enumerate() if t.name.startswith("envharness-session")]
        assert 1 <= len(session_threads) <= MAX_IDLE  # 50 sessions, far fewer threads


def test_check_passes_it_and_names_the_thread_item_for_a_connection_made_in_init(capsys):
    assert cli_main(["check", "ledger_env:SPEC", "--episodes", "1", "--max-steps", "6"]) == 0, (
        capsys.readouterr().out
    )
    capsys.readouterr()
    assert cli_main(["check", "ledger_env:EAGER", "--episodes", "1", "--max-steps", "6"]) != 0
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert failed and all("[checklist: one thread," in line for line in failed), failed
    assert any(line.startswith("FAIL  server_api") for line in failed)
