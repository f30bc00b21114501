"""Browsers elsewhere: a browsergym server on Chromiums reached over CDP (`browser=cdp://...`).

The remote browsers are real browser nodes (`envharness browser`, other processes on loopback).
Sessions spread over them by load; a node that dies ends only the sessions it held (an
infrastructure error that says to reset, never a reward), their next reset lands on a live one,
and a node added to the list file is used. Isolation and allowed hosts in remote mode are
tests/test_browser_isolation.py's, run on both kinds of browser."""

from __future__ import annotations

import asyncio
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from envharness.core.client import EnvServerError
from envharness.core.launchers import LocalServer
from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction
from envharness.envs.browsergym.browser_node import start_browser_node
from envharness.envs.browsergym.environment import BrowserSessionLost
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.remote_browsers import RemoteBrowserUnavailable, _Remote, parse_addresses

NO_HANG_S = 60


def click_me(axtree: str) -> BrowserGymAction:
    bid = re.search(r"\[(\w+)\] button 'Click Me!'", axtree).group(1)
    return BrowserGymAction(action_str=f"click('{bid}')")


@pytest.fixture
def nodes():
    started = [start_browser_node(0) for _ in range(2)]
    yield started
    for node in started:
        node.stop()


def where(factory, env) -> str:
    """The address of the remote browser holding `env`'s context."""
    browser = env._context.browser
    return next(r.address for r in factory.engine._remotes.values() if r.browser is browser)


async def test_episodes_spread_over_two_remote_browsers_over_the_wire(nodes):
    with LocalServer(
        "browsergym", pruned_html=False, extra_properties=False, browser=",".join(n.address for n in nodes)
    ) as server:
        envs = [AsyncBrowserGymEnv(server.base_url) for _ in range(6)]
        try:
            results = await asyncio.gather(
                *(env.reset(task="click-test", seed=seed) for seed, env in enumerate(envs))
            )
            pages = [len(_pages(node.address)) for node in nodes]
            assert min(pages) >= 2 and sum(pages) >= 6, pages  # both browsers hold sessions' pages
            steps = await asyncio.gather(
                *(env.step(click_me(r.observation.axtree_txt)) for env, r in zip(envs, results))
            )
            assert [s.reward for s in steps] == [1.0] * 6
        finally:
            await asyncio.gather(*(env.close() for env in envs))


def _pages(address: str) -> list[dict]:
    import httpx

    return [
        t
        for t in httpx.get(address.replace("cdp://", "http://") + "/json/list", timeout=10).json()
        if t["type"] == "page"
    ]


async def test_a_dead_browser_ends_only_its_sessions_and_the_next_reset_lands_on_the_other(nodes):
    factory = make_environment_factory(
        browser=",".join(n.address for n in nodes), pruned_html=False, extra_properties=False
    )
    envs = [factory() for _ in range(4)]
    try:
        await asyncio.gather(*(env.reset_async(task="click-test", seed=i) for i, env in enumerate(envs)))
        held = [where(factory, env) for env in envs]
        assert set(held) == {n.address for n in nodes}, held  # spread by load
        victim = nodes[0]
        victim.kill()
        assert not Path(victim.scratch).exists()  # its Chromium profile goes with it
        results = await asyncio.wait_for(
            asyncio.gather(
                *(env.step_async(BrowserGymAction(action_str="noop()")) for env in envs),
                return_exceptions=True,
            ),
            NO_HANG_S,
        )
        for address, result in zip(held, results):
            if address == victim.address:
                assert isinstance(result, BrowserSessionLost) and "call reset" in str(result), result
            else:
                assert not isinstance(result, BaseException) and result.last_action_error == "", result
        firsts = await asyncio.gather(
            *(env.reset_async(task="click-test", seed=10 + i) for i, env in enumerate(envs))
        )
        assert {where(factory, env) for env in envs} == {nodes[1].address}
        rewards = [(await env.step_async(click_me(obs.axtree_txt))).reward for env, obs in zip(envs, firsts)]
        assert rewards == [1.0] * 4
        assert (
            factory.engine._remotes[victim.address].failures >= 1
        )  # tried again with backoff, not at every context
    finally:
        for env in envs:
            await env.close_async()
        await factory.aclose()


async def test_the_dead_browser_over_the_wire_is_an_error_frame_never_a_reward(nodes):
    with LocalServer(
        "browsergym", pruned_html=False, extra_properties=False, browser=nodes[0].address
    ) as server:
        async with AsyncBrowserGymEnv(server.base_url) as env:
            result = await env.reset(task="click-test", seed=0)
            nodes[0].kill()
            with pytest.raises(EnvServerError, match="call reset") as lost:
                await asyncio.wait_for(env.step(click_me(result.observation.axtree_txt)), NO_HANG_S)
            with pytest.raises(EnvServerError, match="no remote browser answers") as unavailable:
                await asyncio.wait_for(env.reset(task="click-test", seed=1), NO_HANG_S)
    from envharness.harness.failures import is_infrastructure_error

    assert is_infrastructure_error(lost.value) and is_infrastructure_error(
        unavailable.value
    )  # counted apart, never a reward


async def test_a_browser_added_to_the_list_file_is_used(nodes, tmp_path):
    listing = tmp_path / "browsers.txt"
    listing.write_text(f"# browser nodes\n{nodes[0].address}\n")
    # no warm pool: a context it opens on node 0 after the resets would serve the third reset
    # (it did, in a full run on a busy machine, while a blocking sleep here hid it when idle)
    factory = make_environment_factory(
        browser=f"@{listing}", pruned_html=False, extra_properties=False, warm_sessions=0, warm_sessions_max=0
    )
    envs = [factory() for _ in range(3)]
    try:
        await asyncio.gather(*(env.reset_async(task="click-test", seed=i) for i, env in enumerate(envs[:2])))
        assert {where(factory, env) for env in envs[:2]} == {nodes[0].address}
        listing.write_text(f"{nodes[0].address}\n{nodes[1].address}\n")
        await asyncio.sleep(1.1)  # the list is read again at most once a second (the loop runs meanwhile)
        await envs[2].reset_async(task="click-test", seed=2)
        added = factory.engine._remotes.get(nodes[1].address)
        # the new, empty browser is the least loaded (the message says why, if it was not reached)
        assert where(factory, envs[2]) == nodes[1].address, added and added.last_error
    finally:
        for env in envs:
            await env.close_async()
        await factory.aclose()


async def test_no_browser_answering_is_refused_in_words():
    factory = make_environment_factory(browser="cdp://127.0.0.1:9")  # nothing listens on the discard port
    env = factory()
    try:
        with pytest.raises(RemoteBrowserUnavailable, match=r"cdp://127.0.0.1:9: .*ECONNREFUSED"):
            await env.reset_async(task="click-test", seed=0)
    finally:
        await env.close_async()
        await factory.aclose()


def test_addresses_are_checked_and_retries_back_off():
    assert parse_addresses("cdp://a:1, cdp://b:2") == ["cdp://a:1", "cdp://b:2"]
    with pytest.raises(ValueError, match="use cdp://HOST:PORT"):
        make_environment_factory(browser="cdp://nohostport")
    with pytest.raises(ValueError, match="envharness engine"):
        make_environment_factory(engine="browsergym", browser="cdp://127.0.0.1:9222")
    remote = _Remote("cdp://a:1")
    for expected in [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]:
        before = time.monotonic()  # the delay is counted from a moment between these two
        remote.failed(ConnectionRefusedError("refused"))
        after = time.monotonic()
        assert remote.retry_at - after <= expected <= remote.retry_at - before + 1e-9, expected


def test_envharness_browser_prints_its_address_and_stops_on_sigterm():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from envharness.cli import main; sys.exit(main())",
            "browser",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: queue.Queue[str] = queue.Queue()  # its first line, waited for with a bound (never a hang)
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        line = lines.get(timeout=120)
        address = re.search(r"listening on (cdp://127\.0\.0\.1:\d+)", line).group(1)
        import httpx

        version = httpx.get(address.replace("cdp://", "http://") + "/json/version", timeout=10).json()
        assert version["webSocketDebuggerUrl"].startswith("ws://127.0.0.1:")  # a CDP endpoint that answers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0 and "stopped" in proc.stdout.read()
    finally:
        proc.kill()


async def test_a_dns_name_stands_for_every_browser_it_resolves_to(nodes):
    """`dns://NAME:PORT` (a Kubernetes headless Service) is every address NAME resolves to: here
    `localhost` on one node's port, resolved again as the list is."""
    port = nodes[0].address.rsplit(":", 1)[1]
    factory = make_environment_factory(
        browser=f"dns://localhost:{port}", pruned_html=False, extra_properties=False
    )
    env = factory()
    try:
        obs = await env.reset_async(task="click-test", seed=0)
        assert (await env.step_async(click_me(obs.axtree_txt))).reward == 1.0
        assert f"cdp://127.0.0.1:{port}" in factory.engine.addresses
    finally:
        await env.close_async()
        await factory.aclose()
