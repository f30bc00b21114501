"""An environment whose `reset`, `step` or `state` raises SystemExit or KeyboardInterrupt has a
bug like any other: the session hears EXECUTION_ERROR and the server keeps serving (both used
to stop the whole server). Played against a real `envharness serve` process on loopback."""

from __future__ import annotations

import json
import textwrap

import httpx
import pytest
from websockets.sync.client import connect

from envharness.core.launchers import ServerProcess

pytestmark = pytest.mark.timeout(600)

ENVIRONMENT = textwrap.dedent(
    '''
    """Raises what its action (or its reset's task) names; `calm` plays normally."""
    import sys

    from pydantic import Field

    from envharness import Action, Environment, Observation, State, define_environment


    class Raise(Action):
        what: str = Field(..., description="calm, exit, interrupt, exit-0 or state-exit")


    class Said(Observation):
        text: str = ""


    def _raise(what):
        if what == "exit":
            sys.exit("an environment's own exit")
        if what == "exit-0":
            raise SystemExit(0)
        if what == "interrupt":
            raise KeyboardInterrupt


    class RaisingEnvironment(Environment[Raise, Said]):
        action_type, observation_type = Raise, Said

        def reset(self, seed=None, episode_id=None, task="calm", **options):
            _raise(task)
            self._state, self.on_state = State(episode_id=episode_id, step_count=0), "calm"
            return Said(text="ready")

        def step(self, action):
            self._state.step_count += 1
            if action.what == "state-exit":
                self.on_state = "exit"
            _raise(action.what)
            return Said(text=f"survived {action.what}", reward=1.0, done=False)

        @property
        def state(self):
            _raise(self.on_state)
            return self._state


    SPEC = define_environment(RaisingEnvironment, tasks=["calm", "exit", "interrupt", "exit-0"])
    '''
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raising")
    (folder / "raising_env.py").write_text(ENVIRONMENT)
    process = ServerProcess("raising_env:SPEC", env_vars={"PYTHONPATH": str(folder)}, startup_timeout_s=300)
    yield process
    process.stop()


def _send(ws, kind: str, data: dict) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=120))


def _still_serving(server: ServerProcess) -> None:
    assert server.process.poll() is None, server._tail()
    assert httpx.get(f"{server.base_url}/health", timeout=60).json()["status"] in ("healthy", "ok")
    with connect(server.base_url.replace("http://", "ws://") + "/ws", open_timeout=60) as ws:
        assert _send(ws, "reset", {"task": "calm"})["type"] == "observation"
        step = _send(ws, "step", {"what": "calm"})
        assert step["data"]["observation"]["text"] == "survived calm", step


def test_an_exit_or_interrupt_in_step_is_the_environments_error(server):
    url = server.base_url.replace("http://", "ws://") + "/ws"
    for what in ("exit", "interrupt", "exit-0"):
        with connect(url, open_timeout=60) as ws:
            assert _send(ws, "reset", {"task": "calm"})["type"] == "observation"
            reply = _send(ws, "step", {"what": what})
            assert reply["type"] == "error" and reply["data"]["code"] == "EXECUTION_ERROR", (what, reply)
            assert ("SystemExit" if what != "interrupt" else "KeyboardInterrupt") in reply["data"]["message"]
            # the session goes on, as after any environment error
            assert _send(ws, "step", {"what": "calm"})["type"] == "observation"
        _still_serving(server)


def test_an_exit_or_interrupt_in_reset_or_state_is_the_environments_error(server):
    url = server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url, open_timeout=60) as ws:
        for task in ("exit", "interrupt"):
            reply = _send(ws, "reset", {"task": task})
            assert reply["type"] == "error" and reply["data"]["code"] == "EXECUTION_ERROR", (task, reply)
        assert _send(ws, "reset", {"task": "calm"})["type"] == "observation"
        assert _send(ws, "step", {"what": "state-exit"})["type"] == "observation"
        reply = _send(ws, "state", {})
        assert reply["type"] == "error" and reply["data"]["code"] == "EXECUTION_ERROR", reply
    for path, body in (("/reset", {"task": "exit"}), ("/reset", {"task": "interrupt"})):
        reply = httpx.post(server.base_url + path, json=body, timeout=120)
        assert reply.status_code == 500 and reply.json()["detail"]["code"] == "EXECUTION_ERROR", reply.text
    _still_serving(server)
