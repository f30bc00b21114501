"""Warm contexts (`warm_pool.py`): a new session starts on a context that is already open, with
its task's page loaded, and sees exactly what a session that opened its own would see."""

import asyncio
import os
import re
import signal
from types import SimpleNamespace

import pytest
from conftest import wait_until_async

from envharness.envs.browsergym import BrowserGymAction
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.warm_pool import PARALLEL_OPENS, WarmPage, WarmPool

TEXT = {"axtree": True, "pruned_html": True, "extra_properties": False}


async def _first_observations(factory, tasks_seeds):
    out = []
    for task, seed in tasks_seeds:
        env = factory()
        try:
            obs = await env.reset_async(task=task, seed=seed)
            out.append((obs.goal, obs.axtree_txt, obs.pruned_html, obs.url, obs.focused_element_bid))
            if factory.pool.size:
                await factory.pool.wait_filled()
        finally:
            await env.close_async()
    return out


async def test_warm_sessions_see_what_cold_sessions_see():
    """Same task as the pool prepared, another task, and back: observations equal a cold start's."""
    plan = [
        ("click-test", 0),
        ("click-test", 1),
        ("enter-text", 2),
        ("enter-text", 3),
        ("click-checkboxes", 4),
    ]
    cold, warm = (
        make_environment_factory(warm_sessions=0, **TEXT),
        make_environment_factory(warm_sessions=2, **TEXT),
    )
    try:
        assert await _first_observations(warm, plan) == await _first_observations(cold, plan)
        # The pool's two at least (with the contexts finished sessions gave back, until demand is
        # gone); none without a pool.
        assert warm.pool.ready >= 2 and cold.pool.ready == 0
    finally:
        await cold.aclose()
        await warm.aclose()


async def test_a_new_session_takes_a_warm_context_of_its_own():
    factory = make_environment_factory(warm_sessions=2)
    first, second, third = factory(), factory(), factory()
    try:
        await first.reset_async(task="click-test", seed=0)  # the pool fills with click-test pages
        await factory.pool.wait_filled()
        assert factory.pool.ready == 2
        pooled = {id(w.context) for w in factory.pool._ready}
        await second.reset_async(task="click-test", seed=1)
        assert id(second._context) in pooled and factory.pool.ready == 1
        await third.reset_async(task="click-test", seed=2)
        assert id(third._context) in pooled and third._context is not second._context
        # Each plays its own episode: solving one does not touch the other.
        obs = await second.step_async(BrowserGymAction(action_str="click('13')"))
        assert obs.reward == 1.0 and obs.done
        obs = await third.step_async(BrowserGymAction(action_str="noop()"))
        assert obs.reward == 0.0 and not obs.done
    finally:
        for env in (first, second, third):
            await env.close_async()
        await factory.aclose()


async def test_contexts_of_a_dead_browser_are_not_handed_out():
    factory = make_environment_factory(warm_sessions=2)
    env = factory()
    try:
        await env.reset_async(task="click-test", seed=0)
        await factory.pool.wait_filled()
        (pid,) = factory.engine.browser_pids()
        os.kill(pid, signal.SIGKILL)
        for _ in range(200):
            if not factory.engine.connected:
                break
            await asyncio.sleep(0.05)
        fresh = factory()
        obs = await fresh.reset_async(task="click-test", seed=5)  # on the relaunched browser
        assert obs.goal and fresh._generation == factory.engine.generation == 2
        obs = await fresh.step_async(BrowserGymAction(action_str="click('13')"))
        assert obs.reward == 1.0
        await fresh.close_async()
    finally:
        await env.close_async()
        await factory.aclose()


async def test_closing_the_factory_closes_the_warm_contexts():
    factory = make_environment_factory(warm_sessions=3)
    env = factory()
    await env.reset_async(task="click-test", seed=0)
    await env.close_async()
    browser = factory.engine._browser
    await factory.aclose()
    assert factory.pool.ready == 0 and not browser.is_connected()
    assert factory.pool.take("click-test") is None


@pytest.mark.parametrize("size", [-1, 1.5, True])
def test_warm_sessions_must_be_a_count(size):
    with pytest.raises(ValueError, match="warm_sessions"):
        make_environment_factory(warm_sessions=size)


async def test_next_task_is_prepared_and_taken_by_the_task_change():
    """`next_task` opens that task's page while the episode runs, when the page cannot be switched
    to it in place (a task whose page shows images); the reset that changes to it takes that page
    and sees what a page load gives. A task it can switch to is not prepared: switching costs less."""
    factory, cold = (
        make_environment_factory(warm_sessions=0, **TEXT),
        make_environment_factory(warm_sessions=0, **TEXT),
    )
    env, reference = factory(), cold()
    try:
        await env.reset_async(task="click-test", seed=0, next_task="enter-text")
        await factory.pool.wait_filled()
        assert factory.pool.ready == 0
        await env.reset_async(task="click-test", seed=0, next_task="tic-tac-toe")
        await factory.pool.wait_filled()
        assert [w.task for w in factory.pool._ready] == ["tic-tac-toe"]
        before = env._context
        obs = await env.reset_async(task="tic-tac-toe", seed=7)
        assert env._context is not before and factory.pool.ready == 0
        await reference.reset_async(task="click-test", seed=0)
        expected = await reference.reset_async(task="tic-tac-toe", seed=7)
        assert (obs.goal, obs.axtree_txt, obs.pruned_html, obs.url) == (
            expected.goal,
            expected.axtree_txt,
            expected.pruned_html,
            expected.url,
        )
        # Without a prepared page the task change happens in the session's own context.
        same = env._context
        await env.reset_async(task="click-button", seed=1)
        assert env._context is same and env._loaded_task == "click-button"
    finally:
        for e in (env, reference):
            await e.close_async()
        await factory.aclose()
        await cold.aclose()


async def test_an_unknown_next_task_is_refused():
    factory = make_environment_factory()
    env = factory()
    try:
        with pytest.raises(ValueError, match="unknown MiniWoB task"):
            await env.reset_async(task="click-test", seed=0, next_task="no-such-task")
    finally:
        await env.close_async()
        await factory.aclose()


async def test_in_place_restarts_after_task_changes_answer():
    """Task changes, then a restart in place with every observation part: each reset answers.
    (With Chromium's RenderDocument turned off, a tempting speed-up, the first such restart
    hung in `Accessibility.enable`: the feature stays on.)"""
    factory = make_environment_factory(axtree=True, pruned_html=True, extra_properties=True)
    env = factory()
    try:
        for seed in range(6):
            for task in ("click-test", "click-checkboxes"):
                await asyncio.wait_for(env.reset_async(task=task, seed=seed), 60)
            obs = await asyncio.wait_for(env.reset_async(task="click-checkboxes", seed=seed), 60)
            assert obs.goal.startswith("Select")
    finally:
        await env.close_async()
        await factory.aclose()


_PROBE_STORAGE = """() => ({cookie: document.cookie, local: localStorage.getItem('who'),
                           session: sessionStorage.getItem('who'), history: history.length,
                           typed: [...document.querySelectorAll('input, textarea')].filter(e => ['text', 'textarea'].includes(e.type)).map(e => e.value)})"""


def _observed(obs):
    return (obs.goal, obs.url, obs.axtree_txt, obs.pruned_html, obs.focused_element_bid, obs.open_pages_urls)


async def test_a_finished_session_gives_its_context_back_cleared():
    """The next session reuses the context: nothing of the last session's is left in it (cookies,
    storage, history, typed text, tabs), and its first observation is a page load's. The same
    probe first sees alice's traces in her session, so each of its checks can fail."""
    factory = make_environment_factory(warm_sessions=1, **TEXT)
    loading, alice, bob = factory(), factory(), factory()
    loading.config.fast_reset = False  # every reset loads the page: the reference
    try:
        obs = await alice.reset_async(task="enter-text", seed=1)
        context = alice._context
        await alice._actx.page.evaluate(
            "() => { document.cookie = 'who=alice; path=/'; localStorage.setItem('who', 'alice');"
            " sessionStorage.setItem('who', 'alice'); history.pushState(null, '', location.href);"
            " history.pushState(null, '', location.href); }"  # two history entries, the same URL
        )
        textbox = re.search(r"\[(\w+)\] textbox", obs.axtree_txt).group(1)
        obs = await alice.step_async(BrowserGymAction(action_str=f"fill('{textbox}', 'alice was here')"))
        assert not obs.last_action_error
        traces = await alice._actx.page.evaluate(_PROBE_STORAGE)
        assert traces.pop("history") >= 3  # her two entries on top of the page's own
        assert traces == {
            "cookie": "who=alice",
            "local": "alice",
            "session": "alice",
            "typed": ["alice was here"],
        }
        await alice.close_async()  # on the page she typed into

        first = await bob.reset_async(task="enter-text", seed=1)  # the same task and seed: a fast reset
        assert bob._context is context, "the finished session's context was not reused"
        assert await bob._actx.page.evaluate(_PROBE_STORAGE) == {
            "cookie": "",
            "local": None,
            "session": None,
            "history": 1,  # Page.resetNavigationHistory: the switch alone keeps alice's entries
            "typed": [""],
        }
        assert "alice was here" not in first.pruned_html + first.axtree_txt
        assert _observed(first) == _observed(await loading.reset_async(task="enter-text", seed=1))
        # and a task change in it, too
        changed = await bob.reset_async(task="click-checkboxes", seed=1)
        assert _observed(changed) == _observed(await loading.reset_async(task="click-checkboxes", seed=1))
    finally:
        for env in (loading, alice, bob):
            await env.close_async()
        await factory.aclose()


async def test_a_session_that_left_the_task_pages_does_not_give_its_context_back():
    factory = make_environment_factory(warm_sessions=1, **TEXT)
    env = factory()
    try:
        await env.reset_async(task="click-test", seed=0)
        await factory.pool.wait_filled()
        context = env._context
        obs = await env.step_async(BrowserGymAction(action_str="new_tab()"))
        assert not obs.last_action_error
        await env.close_async()
        assert context not in [w.context for w in factory.pool._ready]
        assert factory.pool.ready == 1
    finally:
        await factory.aclose()


async def test_the_pool_follows_demand_up_to_its_budget(monkeypatch):
    """Taken faster than it refills, the pool keeps more contexts ready (as many as were taken in
    the last second, at most `max_size`), opening `PARALLEL_OPENS` at a time; once demand is gone
    it shrinks back to its size."""
    from envharness.envs.browsergym import warm_pool

    monkeypatch.setattr(warm_pool, "DEMAND_WINDOW_S", 0.3)
    monkeypatch.setattr(warm_pool, "SHRINK_AFTER_S", 0.5)
    opening, most = 0, 0

    async def open_context(task):
        nonlocal opening, most
        opening += 1
        most = max(most, opening)
        await asyncio.sleep(0.02)
        opening -= 1
        return WarmPage(SimpleNamespace(close=lambda: asyncio.sleep(0)), SimpleNamespace(), task, 1)

    pool = WarmPool(open_context, alive=lambda warm: True, size=1, max_size=4)
    pool.refill()
    await pool.wait_filled()
    assert pool.ready == 1 and pool.target == 1
    for _ in range(6):  # six sessions back to back
        pool.take("click-test")
        pool.refill()
    assert pool.target == 4
    await pool.wait_filled()
    assert pool.ready == 4 and most == PARALLEL_OPENS
    pool.give_back(WarmPage(SimpleNamespace(close=lambda: asyncio.sleep(0)), SimpleNamespace(), "x", 1))
    assert pool.ready == 4  # full: the context is closed, not kept
    # no take since: once the demand window and the shrink delay pass, the spare contexts close
    await wait_until_async(lambda: pool.ready == 1 and pool.target == 1)
    await pool.aclose()
