"""The server says which tasks it serves, in OpenEnv 0.10's Task API shape (core/task_api.py):
splits, task names, counts, one task or a range, and `reset(split=..., index=...)`; the
listing follows the server's options; a server whose environment lists none answers 501."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from envharness.core.launchers import LocalServer
from envharness.envs.textarena import TextArenaEnv

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def games():
    with LocalServer("textarena", web=True) as server:
        yield server.base_url


def test_splits_counts_and_tasks(games):
    assert httpx.get(f"{games}/list_environments").json() == ["textarena"]
    splits = {s["name"]: s for s in httpx.get(f"{games}/textarena/splits").json()}
    assert splits["all"]["num_tasks"] > 200 and splits["rl"]["num_tasks"] == 4
    assert httpx.post(f"{games}/textarena/num_tasks", json={"split": "rl"}).json() == {"num_tasks": 4}
    listed = httpx.post(f"{games}/textarena/tasks", json={"split": "rl"}).json()
    assert [t["id"] for t in listed["tasks"]] == [
        "Wordle-v0",
        "Mastermind-v0",
        "GuessTheNumber-v0",
        "TowerOfHanoi-v0",
    ]
    assert listed["env_name"] == "textarena" and listed["tasks"][2]["index"] == 2
    assert (
        httpx.post(f"{games}/textarena/task", json={"split": "rl", "index": 3}).json()["task"]["id"]
        == "TowerOfHanoi-v0"
    )
    window = httpx.post(f"{games}/textarena/task_range", json={"split": "rl", "start": 1, "stop": 3}).json()[
        "tasks"
    ]
    assert [t["id"] for t in window] == ["Mastermind-v0", "GuessTheNumber-v0"]
    # the multi-player games are listed too, with their player counts as splits
    by_players = httpx.post(f"{games}/textarena/tasks", json={"split": "players-2"}).json()["tasks"]
    assert {"KuhnPoker-v0", "TicTacToe-v0", "ConnectFour-v0"} <= {t["id"] for t in by_players}
    # 420: docs/textarena.md's count, TextArena's registry's (test_textarena_multiplayer.py)
    assert splits["multiplayer"]["num_tasks"] == 420 and "players-3" in splits


def test_bad_task_requests_are_clear(games):
    assert httpx.post(f"{games}/textarena/task", json={"split": "rl", "index": 4}).status_code == 400
    reply = httpx.post(f"{games}/textarena/tasks", json={"split": "nope"})
    assert reply.status_code == 400 and "unknown split 'nope'" in reply.json()["detail"]
    assert httpx.post(f"{games}/textarena/task", json={"split": "rl", "index": -1}).status_code == 422
    assert httpx.get(f"{games}/browsergym/splits").status_code == 404


def test_reset_by_split_and_index(games):
    with TextArenaEnv(games) as env:
        result = env.reset(split="rl", index=1, seed=3)
        assert result.observation.metadata["env_id"] == "Mastermind-v0"
        with pytest.raises(Exception, match="index 9 is out of range: split 'rl' has 4 task"):
            env.reset(split="rl", index=9)
        assert (
            env.reset(task="Wordle-v0", seed=1).observation.metadata["env_id"] == "Wordle-v0"
        )  # the session goes on
    reply = httpx.post(f"{games}/reset", json={"split": "rl", "index": 2})
    assert (
        reply.status_code == 200 and reply.json()["observation"]["metadata"]["env_id"] == "GuessTheNumber-v0"
    )
    bad = httpx.post(f"{games}/reset", json={"task": "NoSuchGame-v0"})  # the client's mistake, as JSON
    assert bad.status_code == 422 and bad.json()["detail"]["code"] == "VALIDATION_ERROR"
    assert "NoSuchGame-v0" in bad.json()["detail"]["message"]


def test_the_listing_follows_the_servers_options(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with LocalServer("browsergym", web=True) as miniwob:
        assert httpx.post(f"{miniwob.base_url}/browsergym/num_tasks", json={"split": ""}).json() == {
            "num_tasks": 125
        }
    with LocalServer("browsergym", tasks="webtasks.formtasks", web=True) as web:
        tasks = httpx.post(f"{web.base_url}/browsergym/tasks", json={"split": ""}).json()["tasks"]
        assert [t["id"] for t in tasks] == ["fill-form", "find-item", "tick-boxes"]
        info = httpx.get(f"{web.base_url}/web/info").json()  # the /web picker lists them too
        assert (
            info["tasks"] == ["fill-form", "find-item", "tick-boxes"]
            and info["default_task"] in info["tasks"]
        )


def test_an_environment_without_a_listing_answers_501():
    with LocalServer("echo") as server:
        reply = httpx.post(f"{server.base_url}/echo/tasks", json={"split": ""})
        assert reply.status_code == 501 and "lists no tasks" in reply.json()["detail"]
        bad = httpx.post(f"{server.base_url}/reset", json={"split": "train", "index": 0})
        assert "lists no tasks" in bad.json()["detail"]["message"]
