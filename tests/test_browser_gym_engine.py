"""`--option engine=browsergym`: BrowserGym's own environments behind our server, one worker
process per session.

- differential: the same actions on both engines (our fast MiniWoB engine and BrowserGym's own
  code) give the same goals, AXTree text, rewards, done flags and errors;
- openended: any start URL and goal per reset, on a small site served on loopback;
- isolation: a session whose worker is killed gets a clear error, the other session and the
  server go on, and the next reset starts a new worker;
- refusals: unknown benchmarks, missing packages and missing variables, in one line, before
  any browser starts.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envharness.core.launchers import LocalServer
from envharness.core.lifecycle import descendants
from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction, BrowserGymEnv
from envharness.envs.browsergym.engine import DEFAULT_CHROMIUM
from envharness.envs.browsergym.gym_engine import benchmarks
from envharness.envs.browsergym.solutions import next_action

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: (task, seed): tasks whose scripted solutions cover clicks, typing, checkboxes and forms.
EPISODES = [
    ("click-test", 3),
    ("click-button", 1),
    ("enter-text", 6),
    ("click-checkboxes", 3),
    ("login-user", 8),
]
WRONG = ["click('999')", "click('13'", "press_button('13')", "__import__('os').system('true')", "noop()"]


@pytest.fixture(scope="module")
def servers(browser_server):
    with LocalServer("browsergym", engine="browsergym") as gym:
        yield browser_server, gym


def same_page(axtree: str) -> str:
    """The two engines serve MiniWoB from different origins; everything else must match."""
    return re.sub(r"url='[^']*'", "url=<page>", axtree)


def play(
    env: BrowserGymEnv, task: str, seed: int, actions: list[str] | None = None
) -> tuple[list, list[str]]:
    """(per-step (reward, done, error) , actions played): the scripted solution when `actions` is None."""
    result = env.reset(task=task, seed=seed)
    trace = [("reset", result.observation.goal, same_page(result.observation.axtree_txt))]
    played: list[str] = []
    for i in range(8):
        if actions is None:
            action = next_action(result.observation.goal, result.observation.axtree_txt, task=task)
            if action is None:
                break
        elif i < len(actions):
            action = actions[i]
        else:
            break
        played.append(action)
        result = env.step(BrowserGymAction(action_str=action))
        error = result.observation.last_action_error
        trace.append(
            (
                result.reward,
                result.done,
                error if error.startswith("ValueError: invalid action") else bool(error),
                same_page(result.observation.axtree_txt),
            )
        )
        if result.done:
            break
    return trace, played


@pytest.mark.parametrize("task, seed", EPISODES)
def test_both_engines_agree_on_the_scripted_episode(servers, task, seed):
    fast, gym = servers
    with BrowserGymEnv(fast.base_url) as ours, BrowserGymEnv(gym.base_url) as theirs:
        expected, actions = play(ours, task, seed)
        got, _ = play(theirs, task, seed, actions)
    assert expected[-1][:2] == (1.0, True), expected  # the solution solves it on our engine
    assert got == expected


def test_both_engines_agree_on_wrong_actions(servers):
    fast, gym = servers
    with BrowserGymEnv(fast.base_url) as ours, BrowserGymEnv(gym.base_url) as theirs:
        expected, _ = play(ours, "click-test", 0, WRONG + ["click('13')"])
        got, _ = play(theirs, "click-test", 0, WRONG + ["click('13')"])
    assert got == expected
    errors = [step[2] for step in got[1:]]
    assert errors[0] is True and errors[4] is False  # a missing bid fails in the page; noop() does not
    assert errors[1].startswith("ValueError: invalid action: not a valid action call")
    assert errors[2].startswith("ValueError: invalid action: unknown action 'press_button'")
    assert (
        errors[3]
        == "ValueError: invalid action: the action must be called by its bare name; got attribute access"
    )
    assert got[-1][:2] == (1.0, True)


def test_observation_fields_pass_through(servers):
    _, gym = servers
    with BrowserGymEnv(gym.base_url) as env:
        result = env.reset(task="click-test", seed=1, screenshot=True)
        obs = result.observation
        extras = obs.metadata["browsergym_obs"]
        assert obs.screenshot is not None and obs.screenshot.shape[2] == 3
        assert obs.pruned_html and "bid=" in obs.pruned_html
        assert extras["goal_object"] == [{"type": "text", "text": obs.goal}]
        assert [m["role"] for m in extras["chat_messages"]] == ["assistant", "user"]
        assert extras["extra_element_properties"] and obs.url.endswith("/miniwob/click-test.html")
        state = env.state()
        assert state.task_name == "click-test" and state.seed == 1 and state.benchmark == "miniwob"


# -- openended on a loopback site -------------------------------------------------------------
SITE = {
    "/": b"<html><head><title>Shop</title></head><body><h1>Shop</h1><a href='/search'>Search</a></body></html>",
    "/search": b"<html><head><title>Search</title></head><body><input id='q' aria-label='query'><button>Go</button></body></html>",
}


class _Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = SITE.get(self.path.split("?")[0])
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body or b"not found")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()


def _step_as_an_agent_would(env, action: str, tries: int = 3):
    """`action`, tried again while it fails on BrowserGym's own 500 ms action timeout (what a busy
    machine's element takes to become stable); any other error, or the third timeout, stands."""
    for _ in range(tries):
        result = env.step(BrowserGymAction(action_str=action))
        if not result.observation.last_action_error.startswith("TimeoutError: Locator."):
            return result
    return result


def test_openended_start_url_and_goal_per_reset(site):
    with LocalServer("browsergym", benchmark="openended") as server, BrowserGymEnv(server.base_url) as env:
        result = env.reset(start_url=f"{site}/", goal="Find the search page")
        obs = result.observation
        assert obs.goal == "Find the search page" and obs.url == f"{site}/"
        link = re.search(r"\[(\w+)\] link 'Search'", obs.axtree_txt).group(1)
        result = _step_as_an_agent_would(env, f"click('{link}')")
        assert result.observation.url == f"{site}/search" and result.observation.last_action_error == ""
        box = re.search(r"\[(\w+)\] textbox 'query'", result.observation.axtree_txt).group(1)
        result = _step_as_an_agent_would(env, f"fill('{box}', 'shoes')")
        assert "value='shoes'" in result.observation.axtree_txt and result.reward == 0.0 and not result.done
        result = env.step(BrowserGymAction(action_str="send_msg_to_user('found it')"))
        assert result.observation.metadata["browsergym_obs"]["chat_messages"][-1] == {
            **result.observation.metadata["browsergym_obs"]["chat_messages"][-1],
            "role": "assistant",
            "message": "found it",
        }
        # a second reset takes another start page and goal
        result = env.reset(start_url=f"{site}/search", goal="Search for hats")
        assert result.observation.goal == "Search for hats" and result.observation.url == f"{site}/search"
        with pytest.raises(Exception, match="openended needs a start page"):
            BrowserGymEnv(server.base_url).reset()


# -- isolation ---------------------------------------------------------------------------------
async def test_a_killed_worker_ends_its_session_only(servers):
    _, gym = servers
    async with AsyncBrowserGymEnv(gym.base_url) as a, AsyncBrowserGymEnv(gym.base_url) as b:
        before = set(_workers())
        await a.reset(task="click-test", seed=1)
        (worker_a,) = set(_workers()) - before
        await b.reset(task="click-test", seed=2)
        for pid in descendants(worker_a) + [worker_a]:  # the worker and its browsers, as a crash would
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        lost, kept = await asyncio.gather(
            a.step(BrowserGymAction(action_str="click('13')")),
            b.step(BrowserGymAction(action_str="click('13')")),
            return_exceptions=True,
        )
        assert isinstance(lost, Exception) and "BrowserGym worker" in str(lost), lost
        assert kept.reward == 1.0 and kept.done
        await a.reset(task="click-test", seed=3)  # a new worker for the same session
        assert (await a.step(BrowserGymAction(action_str="click('13')"))).reward == 1.0


def test_resets_keep_the_workers_browsers(servers):
    """BrowserGym launches two Chromiums (the task's, the chat window's) at every reset and closes
    the old ones; the worker keeps one, which the chat window shares, across seeds and a change
    of task, and each episode still plays to its reward."""
    _, gym = servers
    with BrowserGymEnv(gym.base_url) as env:
        before = set(_workers())
        env.reset(task="click-test", seed=1)
        (worker,) = set(_workers()) - before
        browsers = _browsers(worker)
        assert len(browsers) == 1, browsers
        # the --disable-features Chromium reads (the last): BrowserGym's own, plus no spare renderer
        (cmdline,) = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in browsers]
        last = re.findall(rb"--disable-features=([\w,]*)", cmdline)[-1].split(b",")
        assert {b"OverlayScrollbars", b"ExtendedOverlayScrollbars", b"SpareRendererForSitePerProcess"} <= set(
            last
        ), last
        for task, seed in [("click-test", 2), ("click-button", 1), ("login-user", 8)]:
            trace, _ = play(env, task, seed)
            assert trace[-1][0] == 1.0 and trace[-1][1], (task, trace[-1][:3])
            assert _browsers(worker) == browsers


def test_features_join_the_last_disable_features_flag():
    """Chromium reads only the last `--disable-features=`: the engine's features join that one."""
    from envharness.envs.browsergym.gym_engine.kept_browsers import with_features_disabled

    args = ["--disable-features=A", "--window-size=1,2", "--disable-features=B"]
    assert with_features_disabled(args, ["C"]) == [
        "--disable-features=A",
        "--window-size=1,2",
        "--disable-features=B,C",
    ]
    assert with_features_disabled(["--x"], ["C", "D"]) == ["--x", "--disable-features=C,D"]
    assert with_features_disabled(args, []) == args


def _browsers(worker: int) -> set[int]:
    """The Chromium browser processes (not their renderers and helpers) under `worker`."""
    found = set()
    for pid in descendants(worker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()  # Chromium rewrites its own: one string
        except OSError:
            continue
        if cmdline.startswith(DEFAULT_CHROMIUM.encode()) and b"--type=" not in cmdline:
            found.add(pid)
    return found


def _workers() -> list[int]:
    me = os.getpid()
    found = []
    for pid in descendants(me):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"gym_engine.worker" in cmdline:
            found.append(pid)
    return found


# -- refusals ----------------------------------------------------------------------------------
def test_unknown_benchmark_and_missing_package_refuse_in_one_line():
    from envharness.envs.browsergym.factory import make_environment_factory

    with pytest.raises(
        ValueError, match=r"^unknown BrowserGym benchmark 'webshop'; known: miniwob, openended"
    ):
        make_environment_factory(benchmark="webshop")
    for name in ("webarena", "visualwebarena", "workarena", "assistantbench"):
        with pytest.raises(ValueError) as refused:
            make_environment_factory(benchmark=name, environ={})
        message = str(refused.value)
        assert "\n" not in message and f"pip install 'envharness[{name}]'" in message


@pytest.mark.parametrize(
    "name, environ, missing",
    [
        (
            "webarena",
            {"WA_SHOPPING": "http://127.0.0.1:7770"},
            "WA_SHOPPING_ADMIN, WA_REDDIT, WA_GITLAB, WA_WIKIPEDIA, WA_MAP, WA_HOMEPAGE",
        ),
        (
            "visualwebarena",
            {},
            "VWA_CLASSIFIEDS, VWA_CLASSIFIEDS_RESET_TOKEN, VWA_SHOPPING, VWA_REDDIT, VWA_WIKIPEDIA, VWA_HOMEPAGE",
        ),
        (
            "workarena",
            {"SNOW_INSTANCE_URL": "https://x"},
            "SNOW_INSTANCE_URL+SNOW_INSTANCE_UNAME+SNOW_INSTANCE_PWD or HUGGING_FACE_HUB_TOKEN",
        ),
    ],
)
def test_missing_variables_are_named_when_the_package_is_there(monkeypatch, name, environ, missing):
    """The benchmark packages cannot be installed beside this project's pins (they pull
    transformers 4.57); the check of their variables runs as if the package were present."""
    monkeypatch.setattr(benchmarks, "_missing_module", lambda module: False)
    monkeypatch.setattr(benchmarks.importlib.util, "find_spec", lambda name: object())
    with pytest.raises(benchmarks.BenchmarkUnavailable) as refused:
        benchmarks.check_benchmark(name, environ)
    assert missing in str(refused.value) and "\n" not in str(refused.value)
    full = {
        **{v: "http://127.0.0.1:9" for v in benchmarks.BENCHMARKS[name].variables},
        **{v: "x" for group in benchmarks.BENCHMARKS[name].alternatives[:1] for v in group},
    }
    assert benchmarks.check_benchmark(name, full).name == name


def test_bad_reset_options_are_clear_and_the_session_goes_on(servers):
    _, gym = servers
    with BrowserGymEnv(gym.base_url) as env:
        with pytest.raises(Exception, match="start_url and goal are openended's reset options"):
            env.reset(task="click-test", start_url="http://127.0.0.1:9/")
        with pytest.raises(Exception, match="unknown reset option"):
            env.reset(task="click-test", colour="red")
        with pytest.raises(Exception, match="No registered env with id|not found|NameNotFound"):
            env.reset(task="no-such-task")
        result = env.reset(task="click-test", seed=0)
        assert env.step(BrowserGymAction(action_str="click('13')")).reward == 1.0 and result.observation.goal


def test_openended_runs_through_eval(site, tmp_path, capsys):
    """`envharness eval` on a loopback site: the server options pick the benchmark, start page and goal."""
    import json

    from envharness.cli import main as cli_main

    out = tmp_path / "eval"
    code = cli_main(
        [
            "eval",
            "--env",
            "browsergym",
            "--env-option",
            "benchmark=openended",
            "--env-option",
            f"start_url={site}/",
            "--env-option",
            "goal=Open the search page",
            "--model",
            "scripted",
            "--tasks",
            "openended",
            "--episodes",
            "1",
            "--max-turns",
            "2",
            "--no-screenshots",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    (record,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert record["task"] == "openended" and record["error"] is None and record["env_reward"] == 0.0
    assert record["steps"][0]["url"] == f"{site}/" and "Open the search page" in json.dumps(
        record["steps"][0]["prompt"]
    )
    capsys.readouterr()
    assert (
        cli_main(
            [
                "eval",
                "--env",
                "browsergym",
                "--env-option",
                "benchmark=openended",
                "--tasks",
                "click-test",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "unknown openended task 'click-test'" in capsys.readouterr().err
