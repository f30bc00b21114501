"""Fidelity: the real BrowserGym (browsergym-miniwob 0.14.3) and our server, side by side.

Same tasks, same seeds, the same scripted actions on both; we assert equal goals, rewards and
done flags, the same AXTree text (the same bids on the same elements), the same pruned HTML,
focused element and element properties after reset.

The documented mapping between the two AXTree texts:
- BrowserGym on this machine's Chromium (newer than the one it was built for) prints each
  ``InlineTextBox`` under a ``StaticText`` as an extra line repeating the text; we drop those
  lines from BrowserGym's text, as our observation does;
- the page URL differs (BrowserGym: our loopback http.server; ours: ``http://miniwob.local``).

Each episode is the first of its session on our side, as every BrowserGym reset is a fresh page
(a later reset of the same task restarts the episode in place, which keeps the page's bids).

BrowserGym runs with its fast settings (``slow_mo=0``, no pre-observation delay), as ours does:
MiniWoB computes rewards synchronously, so the delays change timing only.
"""

import functools
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

os.environ.setdefault("PLAYWRIGHT_BROWSERS_PATH", os.path.join(os.path.dirname(__file__), "..", ".venv", "ms-playwright"))

from envharness.core.launchers import LocalServer  # noqa: E402
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv  # noqa: E402
from envharness.envs.browsergym import miniwob  # noqa: E402
from envharness.envs.browsergym.solutions import next_action  # noqa: E402

pytestmark = pytest.mark.slow

EPISODES = [
    ("click-test", 0), ("click-button", 1), ("click-dialog-2", 2), ("click-checkboxes", 3),
    ("click-option", 4), ("focus-text-2", 5), ("enter-text-2", 6), ("enter-password", 7),
    ("login-user", 8), ("choose-list", 9), ("click-tab", 10), ("click-widget", 12),
    ("click-collapsible", 12), ("click-button-sequence", 13),
]
MAX_STEPS = 8


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browsergym_make():
    """`gym.make` for BrowserGym's MiniWoB tasks, with MINIWOB_URL on a loopback http.server."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(miniwob.html_root())))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    old = os.environ.get("MINIWOB_URL")
    os.environ["MINIWOB_URL"] = f"http://127.0.0.1:{httpd.server_port}/miniwob/"
    import gymnasium as gym

    import browsergym.miniwob  # noqa: F401  (registers the tasks)

    yield lambda task: gym.make(f"browsergym/miniwob.{task}", slow_mo=0, pre_observation_delay=0.0)
    httpd.shutdown()
    httpd.server_close()
    if old is None:
        os.environ.pop("MINIWOB_URL", None)
    else:
        os.environ["MINIWOB_URL"] = old


@pytest.fixture(scope="module")
def server():
    with LocalServer("browsergym") as srv:
        yield srv


def browsergym_texts(obs: dict) -> dict:
    from browsergym.utils.obs import flatten_axtree_to_str, flatten_dom_to_str, prune_html

    return {"axtree": normalize(flatten_axtree_to_str(obs["axtree_object"])),
            "html": prune_html(flatten_dom_to_str(obs["dom_object"]))}


def normalize(axtree_txt: str) -> str:
    """The documented mapping: no InlineTextBox lines, no page URL."""
    lines = [line for line in axtree_txt.splitlines() if not line.lstrip("\t").startswith("InlineTextBox ")]
    return re.sub(r"url='[^']*'", "url=<page>", "\n".join(lines))


@pytest.mark.parametrize(("task", "seed"), EPISODES)
def test_same_episode_as_browsergym(browsergym_make, server, task, seed):
    bg = browsergym_make(task)
    ours = BrowserGymEnv(server.base_url)
    try:
        bg_obs, _ = bg.reset(seed=seed)
        result = ours.reset(task=task, seed=seed)
        obs = result.observation
        assert obs.goal == bg_obs["goal"]
        texts = browsergym_texts(bg_obs)
        assert normalize(obs.axtree_txt) == texts["axtree"]
        assert obs.pruned_html == texts["html"]
        assert obs.focused_element_bid == bg_obs["focused_element_bid"]
        assert obs.metadata["browsergym_obs"]["extra_element_properties"] == bg_obs["extra_element_properties"]
        done, steps = False, 0
        while not done:
            steps += 1
            assert steps <= MAX_STEPS, f"{task} seed {seed} not solved in {MAX_STEPS} steps"
            action = next_action(obs.goal, obs.axtree_txt, task=task)
            bg_obs, bg_reward, bg_terminated, bg_truncated, _ = bg.step(action)
            result = ours.step(BrowserGymAction(action_str=action))
            obs = result.observation
            assert (result.reward, result.done) == (bg_reward, bg_terminated or bg_truncated), action
            assert obs.last_action_error == bg_obs["last_action_error"] == ""
            assert normalize(obs.axtree_txt) == browsergym_texts(bg_obs)["axtree"], action
            done = result.done
        assert result.reward == 1.0
    finally:
        ours.close()
        bg.close()

