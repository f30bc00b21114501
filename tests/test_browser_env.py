"""BrowserGymEnvironment in-process on real Chromium and real MiniWoB++ pages."""

import base64
import http.server
import re
import threading

import numpy as np
import pytest
import pytest_asyncio

from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction

pytestmark = pytest.mark.asyncio(loop_scope="module")


def A(text: str) -> BrowserGymAction:
    return BrowserGymAction(action_str=text)


def bid_of(axtree: str, role: str, name: str) -> str:
    match = re.search(rf"\[(\w+)\] {role} '{re.escape(name)}'", axtree)
    assert match, f"no {role} {name!r} in:\n{axtree}"
    return match.group(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def factory():
    f = make_environment_factory()
    yield f
    await f.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def env(factory):
    e = factory()
    yield e
    await e.close_async()


async def test_reset_gives_goal_url_and_text(env):
    obs = await env.reset_async(task="click-test", seed=3)
    assert obs.goal == "Click the button."
    assert obs.url == "http://miniwob.local/miniwob/click-test.html"
    assert obs.text == obs.axtree_txt and "Click Me!" in obs.text
    assert obs.reward == 0.0 and obs.done is False and obs.last_action_error == ""
    assert obs.screenshot is None
    assert obs.metadata["browsergym_obs"]["goal_object"] == [{"type": "text", "text": "Click the button."}]
    state = await env.state_async()
    assert (state.task_name, state.seed, state.step_count) == ("click-test", 3, 0)


async def test_click_solves_click_test_and_episode_ends(env):
    obs = await env.reset_async(task="click-test", seed=0)
    obs = await env.step_async(A(f"click('{bid_of(obs.axtree_txt, 'button', 'Click Me!')}')"))
    assert (obs.reward, obs.done, obs.last_action_error) == (1.0, True, "")
    assert obs.metadata["browsergym_info"]["task_info"]["RAW_REWARD_GLOBAL"] == 1
    again = await env.step_async(A("noop()"))
    assert again.done and again.reward == 0.0 and "call reset()" in again.last_action_error
    state = env.state
    assert state.cum_reward == 1.0 and state.step_count == 1


async def test_same_seed_same_instance_whether_reloaded_or_restarted_in_place(env):
    first = await env.reset_async(task="book-flight", seed=11)  # loads the page
    other = await env.reset_async(task="book-flight", seed=12)  # restarts in place
    again = await env.reset_async(task="book-flight", seed=11)  # restarts in place
    assert first.goal == again.goal != other.goal
    await env.reset_async(task="click-test", seed=1)
    reloaded = await env.reset_async(task="book-flight", seed=11)  # task changed: page reloaded
    assert reloaded.goal == first.goal


async def test_in_place_restart_observes_like_a_page_load(env):
    """Bids, focus, hover and the accessibility tree after a restart in place are a fresh page's."""
    loaded = await env.reset_async(task="click-checkboxes", seed=3)
    box = re.search(r"\[(\w+)\] checkbox", loaded.axtree_txt).group(1)
    clicked = await env.step_async(A(f"click('{box}')"))  # focus, hover, a checked box, marks
    assert "focused" in clicked.axtree_txt and "checked='true'" in clicked.axtree_txt
    again = await env.reset_async(task="click-checkboxes", seed=3)
    assert again.axtree_txt == loaded.axtree_txt
    assert again.pruned_html == loaded.pruned_html
    assert (
        again.metadata["browsergym_obs"]["extra_element_properties"]
        == loaded.metadata["browsergym_obs"]["extra_element_properties"]
    )
    assert again.focused_element_bid == loaded.focused_element_bid


# The page's own record of past episodes, as a page load leaves it: the count of episodes done
# and the reward display that shows it and the rewards (out of the page between starts).
PAST_EPISODES_JS = """() => {
  bringBackDisplay();
  const display = document.getElementById('reward-display').outerHTML;
  removeDisplay();
  return [WOB_EPISODE_ID, core.wob_scores || null, display];
}"""


async def test_a_restart_after_finished_episodes_starts_from_what_a_page_load_gives(factory, env):
    """MiniWoB counts the episodes done in the page (BrowserGym's ``task_info.EPISODE_ID``) and
    shows past rewards; a restart in place starts them from zero, as BrowserGym's fresh page."""
    for _ in range(2):  # two episodes played to the end in this page (Submit, nothing ticked)
        obs = await env.reset_async(task="click-checkboxes", seed=1)
        await env.step_async(A(f"click('{bid_of(obs.axtree_txt, 'button', 'Submit')}')"))
    fresh = factory()
    try:
        played = []
        for e in (env, fresh):  # `env` restarts in place, `fresh` loads the page
            obs = await e.reset_async(task="click-checkboxes", seed=1)
            page_state = await e._main_page.evaluate(PAST_EPISODES_JS)
            step = await e.step_async(A(f"click('{bid_of(obs.axtree_txt, 'checkbox', 'Jc')}')"))
            played.append((obs.axtree_txt, page_state, step.metadata["browsergym_info"]["task_info"]))
        restarted, loaded = played
        assert loaded[1][0] == loaded[2]["EPISODE_ID"] == 0
        assert restarted == loaded
    finally:
        await fresh.close_async()


async def test_task_changes_happen_in_place_without_a_page_load(env):
    """After the first load, task changes rewrite the document and same-task resets restart it:
    the browser fetches no document (a page load would, through the context's route), and the
    session's `episode_starts` says so. A switch that fell back to a page load fails here."""
    await env.reset_async(task="click-test", seed=0)  # a page load, or a warm page's restart
    page, before = env._main_page, env.episode_starts.copy()
    documents: list[str] = []
    page.on("request", lambda r: documents.append(r.url) if r.resource_type == "document" else None)
    tasks = ["click-button", "enter-text", "enter-text", "stock-market", "stock-market", "click-checkboxes"]
    for task in tasks:  # stock-market (reloaded on reset) is switched into itself
        obs = await env.reset_async(task=task, seed=1)
        assert obs.url.endswith(f"/{task}.html") and obs.goal
    assert env._main_page is page
    assert documents == []  # the browser's word
    assert env.episode_starts - before == {"switch": 5, "restart": 1}  # the session's


async def test_task_chosen_per_reset_and_task_name_alias(env):
    obs = await env.reset_async(task_name="enter-text", seed=2)
    assert obs.url.endswith("/enter-text.html") and env.state.task_name == "enter-text"
    obs = await env.reset_async(seed=2)  # keeps the last task
    assert obs.url.endswith("/enter-text.html")
    obs = await env.reset_async(task="miniwob.click-test")  # BrowserGym's id prefix is accepted
    assert obs.url.endswith("/click-test.html")


async def test_goal_overrides_match_browsergym(env):
    obs = await env.reset_async(task="click-menu-2", seed=0)
    assert obs.goal.startswith('Click the "Menu" button, and then find and click on the item')
    obs = await env.reset_async(task="use-colorwheel-2", seed=0)
    assert re.search(r"#[0-9a-f]{6}", obs.goal)


async def test_fill_and_press_solve_enter_text(env):
    obs = await env.reset_async(task="enter-text", seed=4)
    word = re.search(r'"(.+)"', obs.goal).group(1)
    textbox = re.search(r"\[(\w+)\] (?:textbox|input)", obs.axtree_txt).group(1)
    submit = bid_of(obs.axtree_txt, "button", "Submit")
    obs = await env.step_async(A(f"fill('{textbox}', {word!r})\nclick('{submit}')"))
    assert (obs.reward, obs.done, obs.last_action_error) == (1.0, True, "")


async def test_bad_actions_give_reasons_and_cost_a_step(env, tmp_path):
    await env.reset_async(task="click-test", seed=0)
    pwned = tmp_path / "pwned"
    cases = {
        "click('9999')": 'Could not find element with bid "9999"',
        f"__import__('os').system('touch {pwned}')": "invalid action",
        f"click(__import__('os').system('touch {pwned}'))": "arguments must be literals",
        "click(page)": "literals",
        "fill('1', '" + "x" * 50_000 + "')": "characters long",
        "goto('http://example.com/')": "host 'example.com' is blocked",
        "goto('file:///etc/passwd')": "only http(s) URLs",
        "upload_file('1', '/etc/passwd')": "server's disk",
    }
    for action, reason in cases.items():
        obs = await env.step_async(A(action))
        assert reason in obs.last_action_error, (action, obs.last_action_error)
        assert obs.error == obs.last_action_error
        assert obs.done is False and obs.reward == 0.0
    assert env.state.step_count == len(cases)
    assert obs.url.endswith("/click-test.html")
    assert not pwned.exists()


async def test_bad_reset_input_is_refused_and_env_still_works(env):
    with pytest.raises(ValueError, match="unknown MiniWoB task 'no-such-task'"):
        await env.reset_async(task="no-such-task")
    with pytest.raises(ValueError, match="unknown reset option"):
        await env.reset_async(task="click-test", colour="blue")
    with pytest.raises(ValueError, match="max_steps"):
        await env.reset_async(task="click-test", max_steps=0)
    with pytest.raises(ValueError, match="seed must be an integer"):
        await env.reset_async(task="click-test", seed="7")
    obs = await env.reset_async(task="click-test", seed=0)
    assert obs.goal == "Click the button."


async def test_step_before_reset_is_an_error(env):
    with pytest.raises(RuntimeError, match="reset"):
        await env.step_async(A("noop()"))


async def test_step_limit_truncates(env):
    await env.reset_async(task="click-test", seed=0, max_steps=2)
    first = await env.step_async(A("noop()"))
    second = await env.step_async(A("noop()"))
    assert not first.done and second.done and second.truncated and second.reward == 0.0
    assert second.metadata["browsergym_info"]["truncated"] is True


async def test_time_limit_truncates(env):
    await env.reset_async(task="click-test", seed=0, time_limit_s=0.05)
    obs = await env.step_async(A("noop(100)"))
    assert obs.done and obs.truncated


async def test_screenshot_only_when_asked_png_and_jpeg(env):
    obs = await env.reset_async(task="click-test", seed=0, screenshot=True)
    assert base64.b64decode(obs.screenshot)[:8] == b"\x89PNG\r\n\x1a\n"
    image = obs.screenshot_array()
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    obs = await env.reset_async(task="click-test", seed=0, screenshot=True, screenshot_format="jpeg")
    assert base64.b64decode(obs.screenshot)[:2] == b"\xff\xd8" and obs.screenshot_format == "jpeg"
    obs = await env.reset_async(task="click-test", seed=0)
    assert obs.screenshot is None and obs.screenshot_array() is None


async def test_tabs_end_the_episode_and_reset_recovers(env):
    await env.reset_async(task="click-test", seed=0)
    obs = await env.step_async(A("new_tab()"))
    assert obs.open_pages_urls == ["http://miniwob.local/miniwob/click-test.html", "about:blank"]
    assert obs.active_page_index == 1 and obs.done and obs.reward == 0.0  # BrowserGym: invalid page
    obs = await env.reset_async(task="click-test", seed=0)
    assert len(obs.open_pages_urls) == 1 and obs.goal == "Click the button."
    obs = await env.step_async(A(f"click('{bid_of(obs.axtree_txt, 'button', 'Click Me!')}')"))
    assert obs.reward == 1.0


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"<html><body><button>outside</button></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


async def test_allowed_hosts_can_be_opened():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    factory = make_environment_factory(allowed_hosts="127.0.0.1")
    env = factory()
    try:
        await env.reset_async(task="click-test", seed=0)
        obs = await env.step_async(A("goto('http://localhost:1/')"))
        assert "host 'localhost' is blocked" in obs.last_action_error and not obs.done
        url = f"http://127.0.0.1:{server.server_port}/page.html"
        obs = await env.step_async(A(f"goto('{url}')"))
        assert obs.last_action_error == "" and obs.url == url and "outside" in obs.text
        assert obs.done and obs.reward == 0.0  # left the task page: BrowserGym ends the episode
    finally:
        await env.close_async()
        await factory.aclose()
        server.shutdown()
