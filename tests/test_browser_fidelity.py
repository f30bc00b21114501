"""Fidelity: the real BrowserGym (browsergym-miniwob 0.14.3) and our server, side by side.

Same tasks, same seeds, the same scripted actions on both; we assert equal goals, rewards and
done flags, the same AXTree text (the same bids on the same elements), the same pruned HTML,
focused element and element properties after reset.

The documented mapping between the two AXTree texts:
- BrowserGym on this machine's Chromium (newer than the one it was built for) prints each
  ``InlineTextBox`` under a ``StaticText`` as an extra line repeating the text; we drop those
  lines from BrowserGym's text, as our observation does;
- the page URL differs (BrowserGym: our loopback http.server; ours: ``http://miniwob.local``).

Each test plays two episodes of its task in one session on both sides: the first loads the page,
the second restarts it in place on our side while BrowserGym loads a fresh page again; both must
give BrowserGym's observations, bids included.

Wrong actions (`test_same_outcome_of_wrong_actions_as_browsergym`): bids of hidden, disabled and
covered elements, bids not on the page, malformed strings. BrowserGym waits 500 ms and reports
Playwright's time-out; we fail at once with the reason in words. Both must report an error, give
the same reward, done flag and AXTree, and then play on to the same end.

BrowserGym launches a new Chromium at every reset; here its launches share one browser process
(`keep_browsers`, as the BrowserGym engine's workers do). Each reset still gets a fresh context
and page, which is all its observations come from, and a launch is most of a BrowserGym reset's time.

BrowserGym runs with the action subsets ours covers (`REFERENCE_SUBSETS`: its default plus the
keyboard and mouse primitives) and with its fast settings (``slow_mo=0``, no pre-observation
delay), as ours does: MiniWoB computes rewards synchronously, so the delays change timing only.
A BrowserGym step whose own 500 ms element wait timed out (machine load) is repeated, see
`browsergym_step`.
"""

import functools
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

os.environ.setdefault(
    "PLAYWRIGHT_BROWSERS_PATH", os.path.join(os.path.dirname(__file__), "..", ".venv", "ms-playwright")
)

from envharness.envs.browsergym import (  # noqa: E402
    BrowserGymAction,
    BrowserGymEnv,
    miniwob,  # noqa: E402
)
from envharness.envs.browsergym.executor import send_keys  # noqa: E402
from envharness.envs.browsergym.gym_engine.kept_browsers import keep_browsers  # noqa: E402
from envharness.envs.browsergym.solutions import next_action  # noqa: E402

pytestmark = pytest.mark.slow

#: (task, seed of the first episode, seed of the second), seeds the scripted solutions can solve.
EPISODES = [
    ("click-test", 0, 100),
    ("click-button", 1, 101),
    ("click-dialog-2", 2, 102),
    ("click-checkboxes", 3, 103),
    ("click-option", 4, 104),
    ("focus-text-2", 5, 105),
    ("enter-text-2", 6, 106),
    ("enter-password", 7, 107),
    ("login-user", 8, 108),
    ("choose-list", 9, 109),  # typed into: keyboard_type and keyboard_press, BrowserGym's "coord" subset
    ("click-tab", 10, 110),
    ("click-widget", 12, 113),
    ("click-collapsible", 12, 112),
    ("click-button-sequence", 13, 113),
]
MAX_STEPS = 8
#: BrowserGym's action subsets that make up ours: its default (chat, infeas, bid, nav, tab) takes
#: no keyboard or mouse primitive, so the reference gets "coord" (keyboard_type, keyboard_press,
#: mouse_click, ...) as well.
REFERENCE_SUBSETS = ["chat", "infeas", "bid", "coord", "nav", "tab"]

#: task -> (seed, [(wrong action, words our error must contain)]), played one after another in
#: one episode. The bids are those the pages give (the same on both sides: the AXTree comparison
#: after reset checks them).
WRONG_ACTIONS = {
    "click-test": (
        0,
        [
            ("click('999')", 'ValueError: Could not find element with bid "999"'),
            ("click('1')", "ElementNotActionable: element 1 is not visible (display: none)"),
            ("fill('2', 'x')", "ElementNotActionable: element 2 is not visible (display: none)"),
            ("dblclick('2')", "element 2 is not visible"),
            ("click('13'", "ValueError: invalid action: not a valid action call"),
            ("press_button('13')", "ValueError: invalid action: unknown action 'press_button'"),
        ],
    ),
    "click-collapsible": (3, [("click('18')", "element 18 is not visible (display: none)")]),
    "click-dialog": (
        3,
        [
            ("click('14')", "element 14 is covered by element "),
            ("hover('16')", "element 16 is covered by element "),
        ],
    ),
    "sign-agreement": (
        3,
        [
            ("click('18')", "ElementNotActionable: element 18 is disabled"),
            ("fill('16', 'x')", "ElementNotActionable: element 16 is disabled"),
        ],
    ),
    "enter-text-2": (6, [("fill('13', 'x')", "is not an <input>, <textarea> or [contenteditable] element")]),
}


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _stop_browsergym_playwright() -> None:
    """Stop BrowserGym's global sync Playwright.

    Its dispatcher greenlet sits inside `loop.run_until_complete`, so while it lives this thread
    reports a running event loop and every later asyncio test fails to start its own.
    """
    import browsergym.core

    if browsergym.core._PLAYWRIGHT is not None:
        browsergym.core._PLAYWRIGHT.stop()
        browsergym.core._set_global_playwright(None)


@pytest.fixture(scope="module")
def browsergym_make():
    """`gym.make` for BrowserGym's MiniWoB tasks, with MINIWOB_URL on a loopback http.server."""
    httpd = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(miniwob.html_root()))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    old = os.environ.get("MINIWOB_URL")
    os.environ["MINIWOB_URL"] = f"http://127.0.0.1:{httpd.server_port}/miniwob/"
    import browsergym.miniwob  # noqa: F401  (registers the tasks)
    import gymnasium as gym
    from browsergym.core.action.highlevel import HighLevelActionSet

    close_browsers = keep_browsers()
    actions = HighLevelActionSet(subsets=REFERENCE_SUBSETS)
    yield lambda task, **kwargs: gym.make(
        f"browsergym/miniwob.{task}",
        **{"slow_mo": 0, "pre_observation_delay": 0.0, "action_mapping": actions.to_python_code, **kwargs},
    )
    close_browsers()
    _stop_browsergym_playwright()
    httpd.shutdown()
    httpd.server_close()
    if old is None:
        os.environ.pop("MINIWOB_URL", None)
    else:
        os.environ["MINIWOB_URL"] = old


@pytest.fixture(scope="module")
def server(browser_server):
    return browser_server


def browsergym_texts(obs: dict) -> dict:
    from browsergym.utils.obs import flatten_axtree_to_str, flatten_dom_to_str, prune_html

    return {
        "axtree": normalize(flatten_axtree_to_str(obs["axtree_object"])),
        "html": prune_html(flatten_dom_to_str(obs["dom_object"])),
    }


def normalize(axtree_txt: str) -> str:
    """The documented mapping: no InlineTextBox lines, no page URL."""
    lines = [line for line in axtree_txt.splitlines() if not line.lstrip("\t").startswith("InlineTextBox ")]
    return re.sub(r"url='[^']*'", "url=<page>", "\n".join(lines))


def browsergym_action(action: str) -> str:
    """The BrowserGym primitive our shorthand `send_keys(text)` stands for (BrowserGym has no
    shorthands); any other action is sent as it is."""
    match = re.fullmatch(r"send_keys\(([\"'])(.*)\1\)", action)
    return str(send_keys(match.group(2))) if match else action


def browsergym_step(bg, action: str, tries: int = 3) -> tuple:
    """`bg.step(action)`, repeated when BrowserGym's own element wait timed out.

    BrowserGym's actions wait at most 500 ms (hard-coded) for their element to become actionable,
    which a busy 2-core machine exceeds now and then; such a step did nothing (Playwright acts only
    once the element is ready), so the reference simply tries again. Our environment is not retried.
    """
    for _ in range(tries):
        obs, reward, terminated, truncated, _ = bg.step(action)
        if not re.match(r"TimeoutError: \w+\.\w+: Timeout 500ms exceeded", obs["last_action_error"]):
            break
    return obs, reward, terminated, truncated


def reset_both(bg, ours, task: str, seed: int):
    """Reset both to `task`/`seed` and compare the observations; returns ours."""
    bg_obs, _ = bg.reset(seed=seed)
    obs = ours.reset(task=task, seed=seed).observation
    assert obs.goal == bg_obs["goal"]
    texts = browsergym_texts(bg_obs)
    assert normalize(obs.axtree_txt) == texts["axtree"]
    assert obs.pruned_html == texts["html"]
    assert obs.focused_element_bid == bg_obs["focused_element_bid"]
    assert obs.metadata["browsergym_obs"]["extra_element_properties"] == bg_obs["extra_element_properties"]
    return obs


def solve_both(bg, ours, task: str, seed: int, obs) -> None:
    """Step both with the scripted solution to the end, comparing every step."""
    done, steps = False, 0
    while not done:
        steps += 1
        assert steps <= MAX_STEPS, f"{task} seed {seed} not solved in {MAX_STEPS} steps"
        action = next_action(obs.goal, obs.axtree_txt, task=task)
        bg_obs, bg_reward, bg_terminated, bg_truncated = browsergym_step(bg, browsergym_action(action))
        result = ours.step(BrowserGymAction(action_str=action))
        obs = result.observation
        assert obs.last_action_error == "", (action, obs.last_action_error)
        assert bg_obs["last_action_error"] == "", (action, bg_obs["last_action_error"])
        assert (result.reward, result.done) == (bg_reward, bg_terminated or bg_truncated), action
        assert normalize(obs.axtree_txt) == browsergym_texts(bg_obs)["axtree"], action
        done = result.done
    assert result.reward == 1.0


def play_episode(bg, ours, task: str, seed: int) -> None:
    """Reset both to `task`/`seed`, compare, then step both with the scripted solution to the end."""
    solve_both(bg, ours, task, seed, reset_both(bg, ours, task, seed))


@pytest.mark.parametrize(("task", "seed", "second_seed"), EPISODES)
def test_same_episodes_as_browsergym(browsergym_make, server, task, seed, second_seed):
    bg = browsergym_make(task)
    ours = BrowserGymEnv(server.base_url)
    try:
        play_episode(bg, ours, task, seed)  # our page is loaded
        play_episode(bg, ours, task, second_seed)  # our page restarts in place
    finally:
        ours.close()
        bg.close()


@pytest.mark.parametrize("task", list(WRONG_ACTIONS))
def test_same_outcome_of_wrong_actions_as_browsergym(browsergym_make, server, task):
    """Wrong actions fail on both sides without touching the page, and the episode plays on."""
    from envharness.envs.browsergym.solutions import SOLVED_TASKS

    seed, wrong = WRONG_ACTIONS[task]
    bg = browsergym_make(task)
    ours = BrowserGymEnv(server.base_url)
    try:
        obs = reset_both(bg, ours, task, seed)
        for action, reason in wrong:
            bg_obs, bg_reward, bg_terminated, bg_truncated, _ = bg.step(action)
            result = ours.step(BrowserGymAction(action_str=action))
            obs = result.observation
            assert reason in obs.last_action_error, action
            assert bg_obs["last_action_error"], action
            assert (result.reward, result.done) == (bg_reward, bg_terminated or bg_truncated), action
            assert (result.reward, result.done) == (0.0, False), action
            assert normalize(obs.axtree_txt) == browsergym_texts(bg_obs)["axtree"], action
            assert obs.focused_element_bid == bg_obs["focused_element_bid"], action
        if task in SOLVED_TASKS:
            solve_both(bg, ours, task, seed, obs)
    finally:
        ours.close()
        bg.close()
