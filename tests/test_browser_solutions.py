"""Scripted MiniWoB solutions reach reward 1 through the client and a real server (real Chromium)."""

import numpy as np
import pytest
from PIL import Image

from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction, BrowserGymEnv
from envharness.envs.browsergym.action_text import (
    DEFAULT_TOOL_NAMES,
    build_browsergym_action_str,
    build_browsergym_action_tool_call,
)
from envharness.envs.browsergym.solutions import (
    SOLVED_TASKS,
    UnsolvableTask,
    next_action,
    parse_axtree,
    solve,
)

SEEDS = (0, 1, 2)
MAX_STEPS = 8


@pytest.fixture(scope="module")
def server(training_browser_server):
    return training_browser_server


def as_one_default_tool_call(action: str) -> str:
    """`action` as the harness runs a reply: one tool call, of the session's default tools (the
    scripted model and `check` play through them); the action must survive it whole."""
    call = build_browsergym_action_tool_call(action)
    assert call.name in DEFAULT_TOOL_NAMES, f"{action!r} is not one of the default tools {DEFAULT_TOOL_NAMES}"
    assert build_browsergym_action_str(call.name, call.args) == action, (
        f"{action!r} is not exactly one tool call"
    )
    return action


async def run_episode(
    env: AsyncBrowserGymEnv, task: str, seed: int, hint: bool
) -> tuple[float, bool, list[str]]:
    """One episode driven by the scripted solution, as a text agent sees it: (reward, done, actions)."""
    result = await env.reset(task=task, seed=seed)
    actions: list[str] = []
    while not result.done and len(actions) < MAX_STEPS:
        obs = result.observation
        actions.append(
            as_one_default_tool_call(next_action(obs.goal, obs.axtree_txt, task=task if hint else None))
        )
        result = await env.step(BrowserGymAction(action_str=actions[-1]))
        assert result.observation.last_action_error == "", (actions, result.observation.last_action_error)
    return result.reward, result.done, actions


def test_at_least_twelve_tasks_are_scripted():
    assert len(SOLVED_TASKS) >= 12


@pytest.mark.parametrize("task", SOLVED_TASKS)
async def test_solution_reaches_reward_one(server, task):
    # One session per task, its episodes one after another (the page restarts in place);
    # odd seeds name the task, even ones leave it to be recognised from the goal.
    async with AsyncBrowserGymEnv(server.base_url) as env:
        for seed in SEEDS:
            reward, done, actions = await run_episode(env, task, seed, hint=seed % 2 == 1)
            assert (reward, done) == (1.0, True), (
                f"{task} seed {seed}: reward {reward}, done {done} after {actions}"
            )


def test_clients_can_decode_screenshots_into_arrays(server):
    """The wire carries base64 PNG; clients hand over the array that code written for OpenEnv's
    screenshots reads with ``np.array(observation.screenshot, dtype=np.uint8)`` (the default),
    or with `screenshot_array=False` the base64 string; both keep the encoded bytes."""
    with (
        BrowserGymEnv(server.base_url, screenshot_array=False) as plain,
        BrowserGymEnv(server.base_url) as decoding,
    ):
        encoded = plain.reset(task="click-test", seed=0, screenshot=True).observation
        assert isinstance(encoded.screenshot, str) and encoded.screenshot_format == "png"
        result = decoding.reset(task="click-test", seed=0, screenshot=True)
        image = Image.fromarray(np.array(result.observation.screenshot, dtype=np.uint8))
        assert image.size == (498, 321)  # MiniWoB's 332x214 viewport at BrowserGym's scale 1.5
        assert (result.observation.screenshot == encoded.screenshot_array()).all()
        assert result.observation.screenshot_bytes == encoded.screenshot_bytes  # not re-encoded
        assert (
            result.observation.model_dump(mode="json")["screenshot"] == encoded.screenshot
        )  # compact again,
        assert (
            result.observation.model_dump()["screenshot"] == encoded.screenshot
        )  # in records and tool results too
        result.observation.screenshot = None  # dropped (as eval does once it is stored): gone everywhere
        assert (
            result.observation.screenshot_bytes is None
            and result.observation.model_dump()["screenshot"] is None
        )
        assert result.observation.goal == "Click the button." and "Click Me!" in result.observation.axtree_txt
        assert decoding.reset(task="click-test", seed=0).observation.screenshot is None  # not asked for


# -- reading the AXTree, without a browser ----------------------------------------------------------
AXTREE = """RootWebArea 'Enter Password Task', focused, url='http://miniwob.local/miniwob/enter-password.html'
\t[14] paragraph ''
\t\t[16] textbox '' value='\u2022\u2022', focused
\t\t\tStaticText '\u2022\u2022'
\t\t[19] textbox ''
\t[20] button 'Submit'"""


def test_parse_axtree_reads_bids_roles_names_and_values():
    nodes = parse_axtree(AXTREE)
    assert [(n.bid, n.role, n.name) for n in nodes][1:3] == [("14", "paragraph", ""), ("16", "textbox", "")]
    assert nodes[2].prop("value") == "\u2022\u2022" and nodes[4].prop("value") is None
    assert nodes[0].bid is None and nodes[0].prop("url").endswith("enter-password.html")


def test_multi_step_solution_reads_the_page_state():
    goal = 'Enter the password "ab" into both text fields and press submit.'
    # The first field shows two bullets (filled), the second is empty: fill it next.
    assert solve(goal, AXTREE) == "fill('19', 'ab')"
    filled = AXTREE.replace("[19] textbox ''", "[19] textbox '' value='\u2022\u2022'")
    assert solve(goal, filled) == "click('20')"


def test_unknown_goal_or_task_is_a_clear_error():
    assert solve("Draw a circle.", AXTREE) is None
    with pytest.raises(UnsolvableTask, match="no scripted solution for the goal"):
        next_action("Draw a circle.", AXTREE)
    with pytest.raises(UnsolvableTask, match="no scripted solution for task 'draw-circle'"):
        next_action("Click the button.", AXTREE, task="draw-circle")
    login = 'Enter the username "a" and the password "b" into the text fields and press login.'
    with pytest.raises(UnsolvableTask, match="no button 'Login'"):
        next_action(login, AXTREE, task="miniwob.login-user")
    assert solve(login, AXTREE) is None
