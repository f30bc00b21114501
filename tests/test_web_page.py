"""The /web page, played by hand in real Chromium: click-test to reward 1 on a fixed seed,
checking what a person sees; the page is off unless asked and honours the bearer token.
Set ENVHARNESS_WEB_SCREENSHOT=path to keep the screenshot (docs/web_page.png is made so)."""

from __future__ import annotations

import asyncio
import os
import shutil

import httpx
from conftest import health, wait_until
from playwright.async_api import async_playwright

from envharness.core.launchers import LocalServer, launch_local
from envharness.core.registry import make_factory
from envharness.core.server import create_app
from envharness.envs.browsergym.action_text import ACTION_TOOLS
from envharness.envs.browsergym.engine import CHROMIUM_ARGS, DEFAULT_CHROMIUM
from envharness.envs.browsergym.miniwob import all_tasks

SEED = 7


async def open_page(playwright, url: str):
    browser = await playwright.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=list(CHROMIUM_ARGS))
    page = await browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    await page.wait_for_selector("#conn.live")
    return browser, page, errors


def test_web_page_plays_click_test_to_reward_one(tmp_path):
    app = create_app(make_factory("browsergym"), name="browsergym", web=True)

    async def play(base_url: str) -> None:
        async with async_playwright() as p:
            browser, page, errors = await open_page(p, f"{base_url}/web")
            assert await page.title() == "envharness: browsergym"
            assert await page.locator("#task option").count() == len(all_tasks())
            assert await page.input_value("#task") == "click-test"
            actions = await page.text_content("#actions")
            assert "click(bid, button?, modifiers?)" in actions and "fill('12', 'hello')" in actions
            assert await page.locator("#actions .ex").count() == len(ACTION_TOOLS)
            assert await page.is_disabled("#action")  # nothing to act on before a reset

            await page.fill("#seed", str(SEED))
            await page.click("#reset")
            await page.wait_for_function("document.getElementById('goal').textContent !== ''")
            assert await page.text_content("#goal") == "Click the button."
            assert await page.text_content("#reward") == "0" and await page.text_content("#done") == "no"
            assert await page.evaluate("document.getElementById('screenshot').naturalWidth") > 100
            assert "button 'Click Me!'" in await page.text_content("#axtree")

            # a wrong action: the error is shown and recorded, the episode goes on
            await page.fill("#action", "click('999')")
            await page.press("#action", "Enter")
            await page.wait_for_function("document.getElementById('step-count').textContent === '1'")
            assert await page.text_content("#error") != ""
            assert await page.text_content("#steps tr:nth-child(1) td.err") != ""

            # the bid in the page text fills the action box; Step plays it
            await page.click("#axtree .bid[data-bid='13']")
            assert await page.input_value("#action") == "click('13')"
            await page.click("#step")
            await page.wait_for_function("document.getElementById('step-count').textContent === '2'")
            assert await page.text_content("#reward") == "1" and await page.text_content("#done") == "yes"
            assert await page.text_content("#error") == ""
            cells = await page.locator("#steps tr:nth-child(2) td").all_text_contents()
            assert cells == ["2", "click('13')", "1", "yes", ""]
            shot = tmp_path / "web_page.png"
            await page.screenshot(path=str(shot))
            assert not errors, errors
            await browser.close()
        if os.environ.get("ENVHARNESS_WEB_SCREENSHOT"):
            shutil.copy(shot, os.environ["ENVHARNESS_WEB_SCREENSHOT"])

    with LocalServer(app) as server:
        asyncio.run(play(server.base_url))
        wait_until(lambda: health(server)["active_sessions"] == 0)  # closing the page closed its session
    assert (tmp_path / "web_page.png").stat().st_size > 10_000


def test_web_page_is_off_unless_asked_and_needs_the_token():
    with LocalServer("echo") as server:
        assert httpx.get(f"{server.base_url}/web").status_code == 404
    served = launch_local("echo", server_args=["--web"])  # the CLI flag
    try:
        assert httpx.get(f"{served.base_url}/web").status_code == 200
        assert any(line.endswith(f"{served.base_url}/web") for line in served.output)
    finally:
        served.stop()
    app = create_app(make_factory("echo"), name="echo", token="s3cret", web=True)

    async def play(base_url: str) -> None:
        async with async_playwright() as p:
            browser, page, errors = await open_page(p, f"{base_url}/web?token=s3cret")
            assert await page.is_hidden("#task")  # not a browser env: the action is JSON
            await page.click("#reset")
            await page.wait_for_function(
                "document.getElementById('axtree').textContent.includes('echoed_message')"
            )
            await page.fill("#action", '{"message": "hi"}')
            await page.click("#step")
            await page.wait_for_function("document.getElementById('step-count').textContent === '1'")
            assert '"echoed_message": "hi"' in await page.text_content("#axtree")
            await page.fill("#action", "not json")
            await page.click("#step")
            assert "must be JSON" in await page.text_content("#error")
            assert not errors, errors
            await browser.close()

    with LocalServer(app) as server:
        assert httpx.get(f"{server.base_url}/web").status_code == 401
        asyncio.run(play(server.base_url))


def test_web_page_plays_a_two_player_game_against_the_servers_player_or_both_seats_by_hand():
    """TextArena on /web: the page offers the environment's reset options (opponent, seat); a
    person plays seat 0 of Tic-Tac-Toe against the scripted player, or both seats in turn."""
    app = create_app(make_factory("textarena"), name="textarena", web=True)

    async def play(base_url: str) -> None:
        async with async_playwright() as p:
            browser, page, errors = await open_page(p, f"{base_url}/web")
            await page.select_option("#task", "TicTacToe-v0")
            await page.select_option("#opt-opponent", "scripted")
            await page.select_option("#opt-seat", "0")
            await page.fill("#seed", "0")
            await page.click("#reset")
            await page.wait_for_function("document.getElementById('goal').textContent.includes('Player 0')")
            await page.fill("#action", "[4]")
            await page.press("#action", "Enter")
            await page.wait_for_function("document.getElementById('step-count').textContent === '1'")
            text = await page.text_content("#axtree")
            assert '"sender_id": 1' in text and " X |" in text  # the scripted player answered in seat 1
            assert await page.text_content("#error") == "" and await page.text_content("#done") == "no"
            assert "You are Player 1" not in await page.text_content("#goal")

            await page.select_option("#opt-opponent", "")  # nobody in the other seat: both by hand
            await page.select_option("#opt-seat", "")
            await page.click("#reset")
            await page.wait_for_function("document.getElementById('step-count').textContent === '0'")
            await page.wait_for_function("document.getElementById('goal').textContent.includes('Player 0')")
            await page.fill("#action", "[4]")
            await page.press("#action", "Enter")
            await page.wait_for_function("document.getElementById('goal').textContent.includes('Player 1')")
            assert await page.text_content("#error") == ""
            assert not errors, errors
            await browser.close()

    with LocalServer(app) as server:
        asyncio.run(play(server.base_url))
