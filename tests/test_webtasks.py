"""The user's own web tasks (examples/webtasks/formtasks.py) on the fast browser engine:
served with ``tasks=``, played to reward 1 through the client on two seeds, a wrong answer
scoring 0, listed for ``--tasks all``, evaluated with the scripted policy, trained for a GRPO
step, and every kind of bad input answered in words while the server lives."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import httpx
import pytest

from envharness.cli import main as cli_main
from envharness.core.launchers import LocalServer
from envharness.core.registry import env_harness
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv, make_environment_factory
from envharness.envs.browsergym.tasks import load_task_set
from envharness.harness import read_records

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASKS = "webtasks.formtasks"
pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TEXT_ONLY = {"pruned_html": False, "extra_properties": False}


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The example package on the path here and in servers started as child processes."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(EXAMPLES), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


@pytest.fixture(scope="module")
def server():
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        with LocalServer("browsergym", tasks=TASKS, **TEXT_ONLY) as running:
            yield running
    finally:
        sys.path.remove(str(EXAMPLES))


def play(env: BrowserGymEnv, task: str, seed: int, max_steps: int = 6) -> tuple[str, float, bool]:
    """(goal, last reward, done) of the task's scripted solution played through the client."""
    solve = load_task_set(TASKS).solve
    result = env.reset(task=task, seed=seed)
    goal = result.observation.goal
    for _ in range(max_steps):
        action = solve(goal, result.observation.axtree_txt)
        result = env.step(BrowserGymAction(action_str=action))
        assert result.observation.last_action_error == ""
        if result.done:
            break
    return goal, result.reward, result.done


@pytest.mark.parametrize("task", ["fill-form", "find-item", "tick-boxes"])
def test_each_task_is_won_on_two_seeds_with_seeded_targets(server, task):
    with BrowserGymEnv(base_url=server.base_url) as env:
        goal_1, reward_1, done_1 = play(env, task, seed=1)
        goal_2, reward_2, done_2 = play(env, task, seed=2)
        assert (reward_1, done_1, reward_2, done_2) == (1.0, True, 1.0, True)
        assert goal_1 != goal_2  # the seed picks the target
        assert env.reset(task=task, seed=1).observation.goal == goal_1  # the same seed, the same episode
        assert "seed=1" in env.reset(task=task, seed=1).observation.url  # the variation reaches the page


def test_a_wrong_answer_scores_zero_and_ends_the_episode(server):
    with BrowserGymEnv(base_url=server.base_url) as env:
        obs = env.reset(task="fill-form", seed=1).observation  # Grace Hopper, Oslo
        tree = obs.axtree_txt

        def bid(role: str, name: str = "") -> str:
            return next(
                line.split("]")[0].strip("\t [") for line in tree.splitlines() if f"] {role} '{name}" in line
            )

        env.step(BrowserGymAction(action_str=f"fill('{bid('textbox')}', 'Alan Turing')"))
        env.step(BrowserGymAction(action_str=f"click('{bid('radio', 'Oslo')}')"))
        result = env.step(BrowserGymAction(action_str=f"click('{bid('button', 'Submit')}')"))
        assert (result.reward, result.done) == (0.0, True)

        obs = env.reset(task="find-item", seed=1).observation  # the JS check: Easel is wanted
        wrong = next(line for line in obs.axtree_txt.splitlines() if "button" in line and "Easel" not in line)
        result = env.step(BrowserGymAction(action_str=f"click('{wrong.split(']')[0].strip(chr(9) + ' [')}')"))
        assert (result.reward, result.done) == (0.0, True)

        obs = env.reset(task="tick-boxes", seed=1).observation  # saving with nothing ticked
        save = next(line for line in obs.axtree_txt.splitlines() if "button 'Save'" in line)
        result = env.step(BrowserGymAction(action_str=f"click('{save.split(']')[0].strip(chr(9) + ' [')}')"))
        assert (result.reward, result.done) == (0.0, True)


def test_the_task_list_follows_the_tasks_option():
    harness = env_harness("browsergym", {"tasks": TASKS})
    listing = harness.task_list()
    assert listing.tasks == ("fill-form", "find-item", "tick-boxes")
    assert listing.expand(["all"], harness.check_task) == list(listing.tasks)
    assert listing.expand(["forms"], harness.check_task) == ["fill-form", "tick-boxes"]
    with pytest.raises(ValueError, match="unknown task 'click-test'.*fill-form"):
        harness.check_task("click-test")
    assert "click-test" in env_harness("browsergym").task_list().tasks  # MiniWoB without the option


def test_eval_over_all_tasks_with_the_scripted_policy(tmp_path, capsys):
    out = tmp_path / "eval"
    code = cli_main(
        [
            "eval",
            "--env",
            "browsergym",
            "--env-option",
            f"tasks={TASKS}",
            "--model",
            "scripted",
            "--tasks",
            "all",
            "--episodes",
            "2",
            "--max-turns",
            "6",
            "--out",
            str(out),
            "--no-progress",
            "--no-screenshots",
        ]
    )
    assert code == 0, capsys.readouterr().err
    rates = {t["task"]: t["success_rate"] for t in json.loads((out / "summary.json").read_text())["tasks"]}
    assert rates == {"fill-form": 1.0, "find-item": 1.0, "tick-boxes": 1.0, "all": 1.0}


def test_one_grpo_step_trains_on_a_web_task(tmp_path, capsys):
    out = tmp_path / "train"
    code = cli_main(
        [
            "train",
            "--env-option",
            f"tasks={TASKS}",
            "--tasks",
            "tick-boxes",
            "--model",
            "tiny",
            "--steps",
            "1",
            "--max-turns",
            "2",
            "--num-generations",
            "2",
            "--groups-per-step",
            "1",
            "--max-new-tokens",
            "6",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    records = read_records(out / "episodes.jsonl")
    assert len(records) == 2 and all(r.task == "tick-boxes" and r.error is None for r in records)
    assert json.loads((out / "train_config.json").read_text())["env_options"] == {"tasks": TASKS}
    capsys.readouterr()  # replayed on a server started as train's was (its train_server_options and the tasks)
    assert cli_main(["replay", str(out)]) == 0
    assert "2/2 episodes identical, 0 different, 0 skipped (browsergym, train run)" in capsys.readouterr().out


# -- bad input: clear errors, the session goes on, the server lives ----------------------------------
def test_a_task_set_that_cannot_be_imported(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_tasks.py").write_text("raise RuntimeError('the task module is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="cannot import 'broken_tasks'.*the task module is broken"):
        make_environment_factory(tasks="broken_tasks")
    with pytest.raises(ValueError, match="cannot import 'no_such_tasks_module'"):
        make_environment_factory(tasks="no_such_tasks_module")
    (tmp_path / "empty_tasks.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="has no TASKS"):
        make_environment_factory(tasks="empty_tasks")
    assert cli_main(["serve", "browsergym", "--option", "tasks=no_such_tasks_module"]) == 2
    assert "cannot import 'no_such_tasks_module'" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "eval",
                "--env-option",
                "tasks=no_such_tasks_module",
                "--model",
                "scripted",
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 2
    )
    assert "cannot import 'no_such_tasks_module'" in capsys.readouterr().err


def test_a_task_module_in_the_current_folder_loads(tmp_path, monkeypatch):
    """The `envharness` script's path lacks the current folder; `tasks=` finds modules there too."""
    (tmp_path / "page.html").write_text("<button>Press</button>")
    (tmp_path / "here_tasks.py").write_text(
        "from envharness.envs.browsergym.webtasks import WebTask\n"
        "TASKS = [WebTask(name='press', page='page.html', goal='Press.', js_check='0')]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    assert load_task_set("here_tasks:TASKS").all_tasks() == ("press",)


BAD_TASKS = """
from envharness.envs.browsergym.webtasks import WebTask

def raises(state):
    return state.params["missing"]

TASKS = [
    WebTask(name="ok", page="page.html", goal="Press the button.", js_check="window.WEBTASK_STATE ? 1 : 0"),
    WebTask(name="bad-reward", page="page.html", goal="Press the button.", reward=raises),
    WebTask(name="bad-check", page="page.html", goal="Press the button.", js_check="undefinedName.x"),
    WebTask(name="never-loads", page="http://127.0.0.1:{port}/", goal="Wait.", js_check="0", load_timeout_s=1),
]
"""


@pytest.fixture
def silent_port():
    """A loopback port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


def test_bad_rewards_and_pages_give_clear_errors_and_the_server_lives(tmp_path, monkeypatch, silent_port):
    (tmp_path / "page.html").write_text("<button onclick='window.WEBTASK_STATE = 1'>Press</button>")
    (tmp_path / "bad_tasks.py").write_text(textwrap.dedent(BAD_TASKS).replace("{port}", str(silent_port)))
    monkeypatch.syspath_prepend(str(tmp_path))
    with (
        LocalServer("browsergym", tasks="bad_tasks", **TEXT_ONLY) as running,
        BrowserGymEnv(base_url=running.base_url) as env,
    ):
        with pytest.raises(
            Exception, match="unknown task 'nope' in web tasks bad_tasks; choose from ok, bad-reward"
        ):
            env.reset(task="nope")
        env.reset(task="bad-reward", seed=0)
        with pytest.raises(
            Exception, match=r"task 'bad-reward': its reward function raised KeyError: 'missing'"
        ):
            env.step(BrowserGymAction(action_str="noop()"))
        assert env.step(BrowserGymAction(action_str="noop()")).done  # that episode is over
        env.reset(task="bad-check", seed=0)
        with pytest.raises(Exception, match="task 'bad-check': its JS check raised .*undefinedName"):
            env.step(BrowserGymAction(action_str="noop()"))
        with pytest.raises(
            Exception,
            match=r"task 'never-loads': its page http://127.0.0.1:\d+/\?seed=0 did not load within 1 s",
        ):
            env.reset(task="never-loads", seed=0)
        result = env.reset(task="ok", seed=0)  # the session goes on
        button = next(line for line in result.observation.axtree_txt.splitlines() if "button" in line)
        result = env.step(
            BrowserGymAction(action_str=f"click('{button.split(']')[0].strip(chr(9) + ' [')}')")
        )
        assert (result.reward, result.done) == (1.0, True)
        assert httpx.get(f"{running.base_url}/health").status_code == 200
