"""One session cannot see or touch another's page, cookies or storage; sessions run concurrently."""

import asyncio
import re

import pytest

from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction


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


async def test_sessions_do_not_share_pages_cookies_or_storage():
    factory = make_environment_factory()
    alice, bob = factory(), factory()
    try:
        await asyncio.gather(alice.reset_async(task="enter-text", seed=1), bob.reset_async(task="enter-text", seed=1))
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


async def test_concurrent_sessions_each_solve_their_own_episode():
    factory = make_environment_factory()
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


@pytest.mark.parametrize("host", ["example.com", "127.0.0.1", "localhost", "169.254.169.254"])
async def test_pages_cannot_fetch_other_hosts(host):
    """Requests a page makes itself (not only `goto`) are blocked outside the allowed hosts."""
    factory = make_environment_factory()
    env = factory()
    try:
        await env.reset_async(task="click-test", seed=0)
        result = await env._actx.page.evaluate(
            f"() => fetch('http://{host}/').then(r => 'fetched ' + r.status, e => 'blocked: ' + e.message)"
        )
        assert result.startswith("blocked"), result
    finally:
        await env.close_async()
        await factory.aclose()
