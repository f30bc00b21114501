"""One BrowserGym environment in its own process: `python -m ...gym_engine.worker`.

BrowserGym's sync Playwright API allows one environment per thread of control, and a hung or
crashed one cannot be stopped from inside its thread. A process can: the server kills the
worker's process tree and the other sessions never notice. The worker reads one JSON command
per line on stdin and answers one JSON line on the protocol pipe (the original stdout; anything
BrowserGym or Playwright prints goes to stderr instead).

Commands: ``{"cmd": "reset", "gym_id", "make_kwargs", "seed", "task_kwargs", "parts"}``,
``{"cmd": "step", "action"}``, ``{"cmd": "close"}``. Answers: ``{"ok": true, ...}`` or
``{"ok": false, "error": "Type: message"}``.

Action strings reach BrowserGym only after our grammar (`actions.parse_actions`) accepted them
and re-rendered each call from its literal arguments: BrowserGym turns actions into Python code
and runs it with `exec`, so text from the wire is never what it runs.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from envharness.envs.browsergym.actions import ParsedAction, parse_actions


def canonical_action(text: str) -> str:
    """The action string re-rendered from its parsed calls (positional literals, BrowserGym's
    order); ValueError("invalid action: ...") when our grammar refuses it."""
    try:
        calls = parse_actions(text)
    except ValueError as exc:
        raise ValueError(f"invalid action: {exc}") from None
    return "\n".join(_render(call) for call in calls)


def _render(call: ParsedAction) -> str:
    values = [list(v) if isinstance(v, tuple) else v for v in call.args.values()]
    while values and values[-1] is None:  # noop(): BrowserGym's own default wait
        values.pop()
    return f"{call.name}({', '.join(repr(v) for v in values)})"


def action_mapping() -> Callable[[str], str]:
    """BrowserGym's `action_mapping` over every action our grammar accepts."""
    from browsergym.core.action import functions
    from browsergym.core.action.highlevel import HighLevelActionSet

    action_set = HighLevelActionSet(
        subsets=["chat", "infeas", "bid", "coord", "nav", "tab", "custom"],
        custom_actions=[functions.check, functions.uncheck],
        multiaction=True,
    )
    return lambda action: action_set.to_python_code(canonical_action(action))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def serve_miniwob() -> str:
    """MiniWoB's pages on a loopback port of this worker (BrowserGym reads MINIWOB_URL)."""
    from envharness.envs.browsergym import miniwob

    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(miniwob.html_root()))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{httpd.server_port}/miniwob/"


class Worker:
    """Owns the gym environment; makes a new one when the task or its settings change. Its
    resets run on kept browsers (`kept_browsers`): BrowserGym would launch two each time."""

    def __init__(self) -> None:
        self.env: Any = None
        self.key: str | None = None
        self.parts: dict[str, Any] = {}
        self._close_browsers: Callable[[], None] | None = None

    def reset(
        self,
        gym_id: str,
        make_kwargs: dict[str, Any],
        seed: int | None,
        task_kwargs: dict[str, Any],
        parts: dict[str, Any],
    ) -> dict[str, Any]:
        import gymnasium as gym

        from envharness.envs.browsergym import playwright_replies, playwright_stacks

        playwright_stacks.install()  # BrowserGym's sync calls each took two source-reading stacks
        playwright_replies.install()
        if self._close_browsers is None:
            from envharness.envs.browsergym.engine import NO_SPARE_RENDERER
            from envharness.envs.browsergym.gym_engine.kept_browsers import keep_browsers

            # as the fast engine's Chromium: no spare renderer, which no reset takes
            self._close_browsers = keep_browsers(disable_features=[NO_SPARE_RENDERER])
        if gym_id.startswith("browsergym/miniwob.") and not os.environ.get("MINIWOB_URL"):
            os.environ["MINIWOB_URL"] = serve_miniwob()
        _register(gym_id)
        key = json.dumps([gym_id, make_kwargs, task_kwargs], sort_keys=True, default=str)
        if (
            key != self.key
        ):  # openended's start URL and goal are task arguments: a new env each time they change
            self.close()
            self.env = gym.make(
                gym_id, action_mapping=action_mapping(), task_kwargs=task_kwargs, **make_kwargs
            )
            self.key = key
        self.parts = parts
        obs, info = self.env.reset(seed=seed)
        return {"obs": _convert(obs, parts), "info": _plain(info)}

    def step(self, action: str) -> dict[str, Any]:
        if self.env is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        return {
            "obs": _convert(obs, self.parts),
            "reward": float(reward),
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": _plain(info),
        }

    def close(self) -> None:
        env, self.env, self.key = self.env, None, None
        if env is not None:
            env.close()

    def shutdown(self) -> None:
        """The environment and the kept browsers: the worker's end."""
        self.close()
        if self._close_browsers is not None:
            self._close_browsers()


def _register(gym_id: str) -> None:
    """Import the benchmark package that registers `gym_id`."""
    import importlib

    benchmark = gym_id.removeprefix("browsergym/").split(".", 1)[0]
    importlib.import_module("browsergym.core" if benchmark == "openended" else f"browsergym.{benchmark}")


def _convert(obs: dict[str, Any], parts: dict[str, Any]) -> dict[str, Any]:
    from envharness.envs.browsergym.gym_engine.observation import convert_observation

    return convert_observation(obs, **parts)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


def main() -> int:
    from envharness.core.lifecycle import exit_with_parent, set_parent_death_signal

    set_parent_death_signal()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # BrowserGym's and Playwright's prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    worker = Worker()
    exit_with_parent(os.getppid(), lambda: os._exit(0), name="browsergym-worker")
    for line in sys.stdin:
        try:
            request = json.loads(line)
            cmd = request.pop("cmd")
            if cmd == "close":
                worker.shutdown()
                protocol.write(json.dumps({"ok": True}) + "\n")
                return 0
            answer = getattr(worker, {"reset": "reset", "step": "step"}[cmd])(**request)
            reply = {"ok": True, **answer}
        except Exception as exc:  # the session hears why; the worker goes on
            reply = {
                "ok": False,
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[
                    :2000
                ],
            }
        protocol.write(json.dumps(reply) + "\n")
    worker.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
