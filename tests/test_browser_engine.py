"""The shared Chromium: it reaches no outside host, and when it dies, sessions get a clear error.

A dead browser is simulated the hard way: SIGKILL to the real Chromium process, while a step is
in flight. The sessions that lost their page get `BrowserSessionLost` (over the wire: an error
frame with code EXECUTION_ERROR that says to reset), never a hang; resets and new sessions work
on a relaunched browser.
"""

import asyncio
import json
import os
import re
import signal
from pathlib import Path

import pytest

from envharness.core.client import EnvServerError
from envharness.core.launchers import LocalServer
from envharness.envs.browsergym import AsyncBrowserGymEnv, BrowserGymAction
from envharness.envs.browsergym.engine import (
    CHROMIUM,
    CHROMIUM_ARGS,
    HEADLESS_SHELL,
    BrowserEngine,
    host_resolver_rules,
    main_browser_pids,
)
from envharness.envs.browsergym.environment import BrowserSessionLost
from envharness.envs.browsergym.factory import make_environment_factory

#: Generous bound on how long a session may take to notice a dead browser: a hang fails the test.
NO_HANG_S = 60


def A(text: str) -> BrowserGymAction:
    return BrowserGymAction(action_str=text)


def click_me(axtree: str) -> BrowserGymAction:
    bid = re.search(r"\[(\w+)\] button 'Click Me!'", axtree).group(1)
    return A(f"click('{bid}')")


def our_browser_pids() -> list[int]:
    """Main Chromium processes started by this test process's engines (other jobs on the machine
    run browsers too: only those under our own process tree are ours to kill)."""
    return [pid for pid in main_browser_pids() if _descends_from(pid, os.getpid())]


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


async def kill_browser(engine) -> int:
    (pid,) = engine.browser_pids()
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if not engine.connected:
            break
        await asyncio.sleep(0.05)
    return pid


def test_resolver_rules_keep_loopback_and_allowed_hosts():
    assert "--no-proxy-server" in CHROMIUM_ARGS
    assert "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1" in CHROMIUM_ARGS
    assert (
        host_resolver_rules(["Example.org", "127.0.0.1"])
        == "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE example.org"
    )
    factory = make_environment_factory(allowed_hosts="localhost")
    assert (
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost" in factory.engine.args
    )


def test_a_headless_engine_takes_the_headless_shell(monkeypatch):
    """The shell where installed (less CPU a launch and a page); the full Chromium for a window;
    ``ENVHARNESS_CHROMIUM`` over both."""
    monkeypatch.delenv("ENVHARNESS_CHROMIUM", raising=False)
    shell = Path(HEADLESS_SHELL).exists()
    assert BrowserEngine().executable_path == (HEADLESS_SHELL if shell else CHROMIUM)
    assert BrowserEngine(headless=False).executable_path == CHROMIUM
    monkeypatch.setenv("ENVHARNESS_CHROMIUM", "/opt/my/chrome")
    assert (
        BrowserEngine().executable_path == BrowserEngine(headless=False).executable_path == "/opt/my/chrome"
    )


#: The full Chromium, and the headless shell headless engines take where it is installed.
BUILDS = [CHROMIUM, *([HEADLESS_SHELL] if Path(HEADLESS_SHELL).exists() else [])]


@pytest.mark.parametrize("chromium", BUILDS, ids=lambda path: Path(path).name)
async def test_browser_resolves_no_outside_host(tmp_path, chromium):
    """Chromium's own background calls (update, time, account checks on Google's hosts) and the
    favicon request (which Playwright cannot route) never reach DNS, and the page loads cleanly.
    The headless shell makes neither: it looks up nothing at all."""
    netlog = tmp_path / "netlog.json"
    factory = make_environment_factory(chromium_path=chromium)
    factory.engine.args.append(f"--log-net-log={netlog}")
    env = factory()
    try:
        obs = await env.reset_async(task="click-test", seed=0)
        obs = await env.step_async(click_me(obs.axtree_txt))
        assert obs.reward == 1.0 and obs.last_action_error == ""
        await env.step_async(A("noop(1500)"))  # let the browser's start-up calls and the favicon go out
    finally:
        await env.close_async()
        await factory.aclose()  # the net log is written when the browser exits
    log = json.loads(netlog.read_text())
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    resolved = {
        e["params"]["host"]
        for e in log["events"]
        if names[e["type"]] == "HOST_RESOLVER_MANAGER_REQUEST" and "host" in e.get("params", {})
    }
    looked_up = {re.sub(r"^\w+://", "", h).rsplit(":", 1)[0] for h in resolved}
    assert looked_up <= {"~notfound", "127.0.0.1"}, looked_up
    requested = {
        e["params"]["url"]
        for e in log["events"]
        if names[e["type"]] == "REQUEST_ALIVE" and "url" in e.get("params", {})
    }
    if chromium == CHROMIUM:  # the full browser's calls went out and were sent nowhere: the flags at work
        assert "http://miniwob.local/favicon.ico" in requested  # the favicon was asked for, and failed fast
        assert "~notfound" in looked_up
    assert not [e for e in log["events"] if names[e["type"]] == "TCP_CONNECT"]


async def test_browser_killed_mid_step_gives_a_clear_error_and_a_relaunch():
    factory = make_environment_factory(pruned_html=False, extra_properties=False)
    busy, idle, fresh = factory(), factory(), factory()
    try:
        await asyncio.gather(
            busy.reset_async(task="click-test", seed=0), idle.reset_async(task="enter-text", seed=1)
        )
        in_flight = asyncio.create_task(busy.step_async(A("noop(20000)")))
        await asyncio.sleep(0.5)
        dead = await kill_browser(factory.engine)
        with pytest.raises(BrowserSessionLost, match="call reset"):
            await asyncio.wait_for(in_flight, NO_HANG_S)  # the step in flight ends now, not in 20 s
        with pytest.raises(BrowserSessionLost, match="call reset"):  # a session between steps
            await asyncio.wait_for(idle.step_async(A("noop()")), NO_HANG_S)
        with pytest.raises(BrowserSessionLost):  # still lost until it resets
            await busy.step_async(A("noop()"))
        # A new session and the resets of the old ones get a relaunched browser, concurrently.
        first, _, _ = await asyncio.gather(
            busy.reset_async(task="click-test", seed=0),
            idle.reset_async(task="enter-text", seed=1),
            fresh.reset_async(task="click-test", seed=2),
        )
        assert factory.engine.browser_pids() not in ([], [dead]) and factory.engine.generation == 2
        obs = await busy.step_async(click_me(first.axtree_txt))
        assert (obs.reward, obs.done, obs.last_action_error) == (1.0, True, "")
    finally:
        for env in (busy, idle, fresh):
            await env.close_async()
        await factory.aclose()


async def test_dead_browser_over_the_wire_is_an_error_frame_then_reset_works():
    others = set(our_browser_pids())  # this test process's other servers (the shared ones, conftest.py)
    with LocalServer("browsergym", pruned_html=False, extra_properties=False) as server:
        async with (
            AsyncBrowserGymEnv(server.base_url, message_timeout_s=NO_HANG_S) as lost,
            AsyncBrowserGymEnv(server.base_url, message_timeout_s=NO_HANG_S) as later,
        ):
            await lost.reset(task="click-test", seed=0)
            (pid,) = set(our_browser_pids()) - others
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(EnvServerError) as info:
                for _ in range(100):  # the next step after the browser is seen dead
                    await lost.step(A("noop(50)"))
            assert info.value.code == "EXECUTION_ERROR"
            assert "BrowserSessionLost" in str(info.value) and "call reset()" in str(info.value)
            result = await later.reset(task="click-test", seed=3)  # a session that had no page yet
            assert result.observation.goal == "Click the button."
            result = await lost.reset(task="click-test", seed=0)  # the same connection goes on
            result = await lost.step(click_me(result.observation.axtree_txt))
            assert result.reward == 1.0 and result.done
            relaunched = set(our_browser_pids()) - others
            assert relaunched and pid not in relaunched


async def test_a_new_context_on_a_browser_that_died_unheard_launches_a_new_one():
    """The browser is dead but Playwright has not heard yet (its event loop has not run since):
    a new session's context comes from a relaunched browser, not an error."""
    import time

    from envharness.envs.browsergym import miniwob
    from envharness.envs.browsergym.engine import BrowserEngine, HostGuard

    engine = BrowserEngine()
    try:
        await engine.start()
        (pid,) = engine.browser_pids()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + NO_HANG_S
        while engine.browser_pids() and time.monotonic() < deadline:
            time.sleep(0.01)  # blocks the loop on purpose: Playwright cannot see the disconnect
        assert not engine.browser_pids()
        context = await engine.new_context(viewport=miniwob.MINIWOB_VIEWPORT, guard=HostGuard())
        page = await context.new_page()
        assert await page.evaluate("1 + 1") == 2
        assert engine.generation == 2 and engine.browser_pids() not in ([], [pid])
    finally:
        await engine.aclose()


async def test_a_dead_playwright_driver_is_replaced_and_the_engine_closes_cleanly():
    """Playwright's Node driver can die with the browser (an unhandled rejection in its own
    code, seen under load): the next context comes from a new driver and browser."""
    from envharness.envs.browsergym import miniwob
    from envharness.envs.browsergym.engine import BrowserEngine, HostGuard, _driver_process

    engine = BrowserEngine()
    try:
        await engine.start()
        driver = _driver_process(engine._playwright)
        os.kill(driver.pid, signal.SIGKILL)
        await asyncio.wait_for(driver.wait(), NO_HANG_S)
        context = await asyncio.wait_for(
            engine.new_context(viewport=miniwob.MINIWOB_VIEWPORT, guard=HostGuard()), NO_HANG_S
        )
        page = await context.new_page()
        assert await page.evaluate("1 + 1") == 2
        assert _driver_process(engine._playwright).pid != driver.pid
    finally:
        await engine.aclose()


async def test_a_driver_whose_pipe_closed_counts_as_dead_before_its_exit_status_arrives():
    """A crashing driver closes its pipe a moment before it exits: from then on the engine
    treats it as dead (and starts a new one), instead of raising the launch's error."""
    from envharness.envs.browsergym.engine import BrowserEngine, _driver_process, _driver_transport

    engine = BrowserEngine()
    try:
        await engine.start()
        assert engine._driver_alive()
        transport = _driver_transport(engine._playwright)
        os.kill(_driver_process(engine._playwright).pid, signal.SIGKILL)
        await asyncio.wait_for(asyncio.wait([transport.on_error_future]), NO_HANG_S)
        assert not engine._driver_alive()
    finally:
        await engine.aclose()


async def test_closing_a_browser_that_stopped_answering_kills_it_instead_of_hanging(monkeypatch):
    """Shutdown is bounded: a browser that does not answer `close` (SIGSTOPped here) is killed
    after `CLOSE_TIMEOUT_S`, and neither it nor the driver is left running. (Playwright's own
    close of it takes 30 s; the bound here is 10x the 2 s set.)"""
    from envharness.envs.browsergym import engine as engine_module

    monkeypatch.setattr(engine_module, "CLOSE_TIMEOUT_S", 2.0)
    engine = engine_module.BrowserEngine()
    await engine.start()
    (pid,) = engine.browser_pids()
    driver = engine_module._driver_process(engine._playwright)
    os.kill(pid, signal.SIGSTOP)
    try:
        await asyncio.wait_for(engine.aclose(), 20)
        await asyncio.wait_for(driver.wait(), NO_HANG_S)
        assert not engine.browser_pids()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_child_forked_with_its_parents_command_line_is_not_a_second_browser():
    """Chromium forks its helpers before they exec: for a moment a child has the browser's own
    command line. Only the process whose parent does not match is the browser."""
    import subprocess
    import sys
    import time
    import uuid

    from envharness.envs.browsergym.engine import ENGINE_MARKER, main_browser_pids

    marker = f"{ENGINE_MARKER}{uuid.uuid4().hex}"
    code = "import os, sys, time\nif os.fork() == 0:\n    time.sleep(30)\n    sys.exit(0)\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code, marker])
    try:
        deadline = time.monotonic() + 10
        children: list[str] = []
        while time.monotonic() < deadline:
            children = subprocess.run(
                ["pgrep", "-P", str(parent.pid)], capture_output=True, text=True
            ).stdout.split()
            if children:
                break
            time.sleep(0.05)
        assert children, "the child was not forked"
        assert main_browser_pids(marker) == [parent.pid]
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)])
        parent.kill()
        parent.wait()
