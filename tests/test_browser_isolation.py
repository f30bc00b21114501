"""One session cannot see or touch another's page, cookies or storage; sessions run concurrently,
each with the task it chose at its own reset. Every test runs twice: on the server's own
Chromium, and on two remote browser nodes reached over CDP (`browser=cdp://...`)."""

import asyncio
import re

import pytest

from envharness.core.launchers import LocalServer
from envharness.envs.browsergym import AsyncBrowserGymEnv
from envharness.envs.browsergym.browser_node import start_browser_node
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction
from envharness.envs.browsergym.solutions import next_action

#: Scripted tasks the many-sessions test rotates through (each session starts at another one).
ROTATION = ("enter-text", "click-test", "login-user", "click-checkboxes", "focus-text", "click-button")
SESSIONS = 8
ROUNDS = 3


@pytest.fixture(scope="module", params=["local", "remote"])
def browser(request):
    """The `browser` option: local, or two browser nodes (other processes, loopback CDP)."""
    if request.param == "local":
        yield "local"
        return
    nodes = [start_browser_node(0) for _ in range(2)]
    try:
        yield ",".join(node.address for node in nodes)
    finally:
        for node in nodes:
            node.stop()


def A(text: str) -> BrowserGymAction:
    return BrowserGymAction(action_str=text)


def textbox_bid(axtree: str) -> str:
    return re.search(r"\[(\w+)\] (?:textbox|input)", axtree).group(1)


async def _storage(env) -> dict:
    # Read through the session's own page, as a test probe (not an agent action).
    page = env._actx.page
    return await page.evaluate(
        "() => ({cookie: document.cookie, local: localStorage.getItem('who'), session: sessionStorage.getItem('who')})"
    )


async def test_sessions_do_not_share_pages_cookies_or_storage(browser):
    factory = make_environment_factory(browser=browser)
    alice, bob = factory(), factory()
    try:
        await asyncio.gather(
            alice.reset_async(task="enter-text", seed=1), bob.reset_async(task="enter-text", seed=1)
        )
        await alice._actx.page.evaluate(
            "() => { document.cookie = 'who=alice; path=/'; localStorage.setItem('who', 'alice');"
            " sessionStorage.setItem('who', 'alice'); }"
        )
        assert await _storage(alice) == {"cookie": "who=alice", "local": "alice", "session": "alice"}
        assert await _storage(bob) == {"cookie": "", "local": None, "session": None}

        # Alice types into her text box; Bob's identical page is untouched.
        obs_a = await alice.step_async(A("noop()"))
        obs_a = await alice.step_async(A(f"fill('{textbox_bid(obs_a.axtree_txt)}', 'alice was here')"))
        assert obs_a.last_action_error == ""
        bob_value = await bob._actx.page.evaluate("() => document.querySelector('input').value")
        assert bob_value == ""

        # A new session of the same server starts clean, too.
        carol = factory()
        await carol.reset_async(task="enter-text", seed=1)
        assert await _storage(carol) == {"cookie": "", "local": None, "session": None}
        await carol.close_async()

        # Closing one session leaves the other working.
        await alice.close_async()
        obs_b = await bob.step_async(A("noop()"))
        assert obs_b.last_action_error == "" and obs_b.goal
    finally:
        await alice.close_async()
        await bob.close_async()
        await factory.aclose()


async def test_concurrent_sessions_each_solve_their_own_episode(browser):
    factory = make_environment_factory(browser=browser)
    envs = [factory() for _ in range(6)]

    async def solve(env, seed):
        obs = await env.reset_async(task="click-test", seed=seed)
        bid = re.search(r"\[(\w+)\] button 'Click Me!'", obs.axtree_txt).group(1)
        obs = await env.step_async(A(f"click('{bid}')"))
        assert obs.last_action_error == "", obs.last_action_error
        return obs.reward, obs.done, env.state.seed

    try:
        results = await asyncio.gather(*(solve(env, seed) for seed, env in enumerate(envs)))
    finally:
        for env in envs:
            await env.close_async()
        await factory.aclose()
    assert results == [(1.0, True, seed) for seed in range(len(envs))]


async def test_pages_cannot_fetch_other_hosts(browser):
    """Requests a page makes itself (not only `goto`) are blocked outside the allowed hosts."""
    factory = make_environment_factory(browser=browser)
    env = factory()
    try:
        await env.reset_async(task="click-test", seed=0)
        for host in ("example.com", "127.0.0.1", "localhost", "169.254.169.254", "[::1]"):
            result = await env._actx.page.evaluate(
                f"() => fetch('http://{host}/').then(r => 'fetched ' + r.status, e => 'blocked: ' + e.message)"
            )
            assert result.startswith("blocked"), (host, result)
    finally:
        await env.close_async()
        await factory.aclose()


async def test_many_sessions_over_the_wire_each_get_the_task_they_chose(browser):
    """8 clients on one server (one Chromium, or two remote ones): every reset picks its own task and
    seed, the episodes run interleaved, and each one is the instance a lone session gets for that task and seed."""
    with LocalServer("browsergym", pruned_html=False, extra_properties=False, browser=browser) as server:

        async def play(i: int) -> list[tuple[str, int, str, float]]:
            played = []
            async with AsyncBrowserGymEnv(server.base_url) as env:
                for r in range(ROUNDS):
                    task, seed = ROTATION[(i + r) % len(ROTATION)], 100 * i + r
                    result = await env.reset(task=task, seed=seed)
                    goal = result.observation.goal
                    assert result.observation.url.endswith(f"/{task}.html")
                    assert (await env.state()).task_name == task
                    for _ in range(8):
                        obs = result.observation
                        result = await env.step(
                            BrowserGymAction(action_str=next_action(obs.goal, obs.axtree_txt, task=task))
                        )
                        assert result.observation.last_action_error == "", (
                            task,
                            seed,
                            result.observation.last_action_error,
                        )
                        if result.done:
                            break
                    played.append((task, seed, goal, result.reward))
            return played

        results = await asyncio.gather(*(play(i) for i in range(SESSIONS)))
        # The same tasks and seeds in one lone session give the same goals.
        async with AsyncBrowserGymEnv(server.base_url) as lone:
            for played in results:
                for task, seed, goal, reward in played:
                    assert reward == 1.0, (task, seed)
                    assert (await lone.reset(task=task, seed=seed)).observation.goal == goal, (task, seed)


async def test_text_typed_in_one_session_shows_only_there(browser):
    """All sessions on the same task and seed type at once; each page holds its own text only."""
    factory = make_environment_factory(pruned_html=False, extra_properties=False, browser=browser)
    envs = [factory() for _ in range(SESSIONS)]
    try:
        firsts = await asyncio.gather(*(env.reset_async(task="enter-text", seed=5) for env in envs))
        assert len({obs.axtree_txt for obs in firsts}) == 1  # identical pages, identical bids
        box = textbox_bid(firsts[0].axtree_txt)
        typed = await asyncio.gather(
            *(env.step_async(A(f"fill('{box}', 'typed by session {i}')")) for i, env in enumerate(envs))
        )
        for i, obs in enumerate(typed):
            assert f"value='typed by session {i}'" in obs.axtree_txt
            assert set(re.findall(r"typed by session (\d)", obs.axtree_txt)) == {str(i)}
    finally:
        for env in envs:
            await env.close_async()
        await factory.aclose()
