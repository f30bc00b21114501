"""Element actions fail fast and say why; clicks dispatch the same events as Playwright's.

In-process `BrowserGymEnvironment` on real Chromium. Test pages are built inside a real MiniWoB
page (click-test's ``#area``), then observed once so that every element has its bid.

The environment waits up to `action_timeout_ms` for an element that can still become
actionable. Here that is 10 minutes: a wrong action that waited instead of failing at once would
trip the test's hang guard, so "at once" is checked without timing anything.
"""

import pytest
import pytest_asyncio

from envharness.envs.browsergym.actionability import check_element
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction

pytestmark = pytest.mark.asyncio(loop_scope="module")

NEVER_MS = 600_000.0

FIXTURE_HTML = """
<button id="shown" onclick="window.log.push('shown')">Shown</button>
<button id="none" style="display:none" onclick="window.log.push('none')">None</button>
<div style="display:none"><button id="inside-none">Inside</button></div>
<button id="invisible" style="visibility:hidden">Invisible</button>
<div id="empty" style="width:0;height:0"></div>
<button id="disabled" disabled onclick="window.log.push('disabled')">Disabled</button>
<fieldset disabled><input id="in-fieldset"></fieldset>
<label id="label-of-disabled">Label <input id="disabled-input" disabled></label>
<div id="aria" role="button" aria-disabled="true" onclick="window.log.push('aria')">Aria</div>
<input id="readonly" readonly value="keep">
<div id="plain">plain text</div>
<div style="position:relative;width:80px;height:30px">
  <button id="under" style="position:absolute;left:0;top:0;width:80px;height:30px"
          onclick="window.log.push('under')">Under</button>
  <div id="cover" style="position:absolute;left:0;top:0;width:80px;height:30px;background:#ccc">Cover</div>
</div>
<button id="events">Events</button>
<button id="moving" style="position:relative" onclick="window.log.push('moving')">Moving</button>
<input type="checkbox" id="hidden-checked" checked style="display:none">
"""

SETUP_JS = """html => {
  window.log = [];
  const area = document.getElementById('area');
  area.innerHTML = html;
  area.style.height = 'auto';
  const record = e => window.log.push(`${e.type} button=${e.button ?? ''} detail=${e.detail ?? ''} shift=${e.shiftKey} key=${e.key ?? ''}`);
  const events = document.getElementById('events');
  for (const type of ['mousemove', 'mousedown', 'mouseup', 'click', 'dblclick', 'contextmenu'])
    events.addEventListener(type, e => { if (e.target === events) record(e); });
  if (!window.keysRecorded) {  // the page outlives this set-up (episodes restart in place)
    window.keysRecorded = true;
    document.addEventListener('keydown', record);
    document.addEventListener('keyup', record);
  }
}"""


def A(text: str) -> BrowserGymAction:
    return BrowserGymAction(action_str=text)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def factory():
    f = make_environment_factory(action_timeout_ms=NEVER_MS, viewport={"width": 500, "height": 900})
    yield f
    await f.aclose()


@pytest_asyncio.fixture(loop_scope="module")
async def env(factory):
    e = factory()
    yield e
    await e.close_async()


async def fixture_page(env, fast: bool = True, task: str = "click-test") -> dict[str, str]:
    """Build the test page in `task` and observe it; returns bid by element id."""
    await env.reset_async(task=task, seed=0)
    env._actx.fast_actions = fast
    page = env._actx.page
    await page.evaluate(SETUP_JS, FIXTURE_HTML)
    await env.step_async(A("noop()"))  # marks the new elements
    return await page.evaluate(
        "() => Object.fromEntries([...document.querySelectorAll('[id]')].map(e => [e.id, e.getAttribute('bid')]))"
    )


async def page_log(env) -> list[str]:
    return await env._actx.page.evaluate("() => window.log.splice(0)")


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("click('{none}')", "ElementNotActionable: element {none} is not visible (display: none)"),
        (
            "click('{inside-none}')",
            "ElementNotActionable: element {inside-none} is not visible (display: none on element ",
        ),
        (
            "click('{invisible}')",
            "ElementNotActionable: element {invisible} is not visible (visibility: hidden)",
        ),
        ("hover('{empty}')", "ElementNotActionable: element {empty} is not visible (it has zero size)"),
        ("fill('{none}', 'x')", "ElementNotActionable: element {none} is not visible"),
        ("click('{disabled}')", "ElementNotActionable: element {disabled} is disabled"),
        ("dblclick('{disabled}')", "ElementNotActionable: element {disabled} is disabled"),
        ("fill('{in-fieldset}', 'x')", "ElementNotActionable: element {in-fieldset} is disabled"),
        (
            "click('{label-of-disabled}')",
            "ElementNotActionable: element {label-of-disabled} is disabled (its control element {disabled-input} is)",
        ),
        ("click('{aria}')", "ElementNotActionable: element {aria} is disabled"),
        ("fill('{readonly}', 'x')", "ElementNotActionable: element {readonly} is read-only"),
        ("clear('{readonly}')", "ElementNotActionable: element {readonly} is read-only"),
        ("check('{plain}')", "ElementNotActionable: element {plain} is not a checkbox or radio button"),
        ("click('{under}')", "ElementNotActionable: element {under} is covered by element {cover}"),
        ("hover('{under}')", "ElementNotActionable: element {under} is covered by element {cover}"),
        ("drag_and_drop('{shown}', '{none}')", "ElementNotActionable: element {none} is not visible"),
        ("click('99999')", 'ValueError: Could not find element with bid "99999"'),
        ("select_option('{none}', 'a')", "ElementNotActionable: element {none} is not visible"),
    ],
)
async def test_wrong_element_actions_fail_at_once_with_the_reason(env, action, error):
    bids = await fixture_page(env)
    obs = await env.step_async(A(action.format_map(bids)))
    assert obs.last_action_error.startswith(error.format_map(bids)), obs.last_action_error
    assert (obs.reward, obs.done) == (0.0, False)
    log = await page_log(env)
    assert not [entry for entry in log if not entry.startswith(("mousemove", "key"))]  # no handler ran


async def test_good_actions_run_and_checks_do_not_change_what_a_click_does(env):
    recorded = {}
    for fast in (True, False):
        bids = await fixture_page(env, fast=fast)
        steps = [
            f"click('{bids['shown']}')",
            f"dblclick('{bids['events']}')",
            f"click('{bids['events']}', button='right')",
            f"click('{bids['events']}', modifiers=['Shift'])",
            f"hover('{bids['events']}')",
            f"check('{bids['hidden-checked']}')",
        ]  # already checked: nothing to do
        for action in steps:
            obs = await env.step_async(A(action))
            assert obs.last_action_error == "", (fast, action, obs.last_action_error)
        recorded[fast] = [entry for entry in await page_log(env) if not entry.startswith("mousemove")]
    assert recorded[True] == recorded[False]
    assert recorded[True][:8] == [
        "shown",
        "mousedown button=0 detail=1 shift=false key=",
        "mouseup button=0 detail=1 shift=false key=",
        "click button=0 detail=1 shift=false key=",
        "mousedown button=0 detail=2 shift=false key=",
        "mouseup button=0 detail=2 shift=false key=",
        "click button=0 detail=2 shift=false key=",
        "dblclick button=0 detail=2 shift=false key=",
    ]
    assert "click button=0 detail=1 shift=true key=" in recorded[True]
    assert "contextmenu button=2 detail=0 shift=false key=" in recorded[True]


async def test_a_moving_element_is_clicked_once_it_stops(env):
    bids = await fixture_page(env)
    await env._actx.page.evaluate("""() => document.getElementById('moving').animate(
        [{left: '0px'}, {left: '60px'}], {duration: 400, fill: 'forwards'})""")
    obs = await env.step_async(A(f"click('{bids['moving']}')"))
    assert obs.last_action_error == ""
    assert await page_log(env) == ["moving"]


@pytest.mark.parametrize("animation", ["web", "jquery"])
async def test_an_element_pushed_by_another_elements_animation_is_clicked_where_it_ends(env, animation):
    """click-collapsible's Submit moves while the section above it slides open: the button is
    not animating, its sibling is. The click waits for the page's animation to end, so it hits
    the button on a busy machine too (before, it landed where the button had been)."""
    bids = await fixture_page(env, task="click-collapsible")  # a page with jQuery
    grow = {
        "web": """spacer.animate([{height: '0px'}, {height: '3000px'}], {duration: 900, fill: 'forwards'})""",
        "jquery": """jQuery(spacer).animate({height: '3000px'}, 900, 'linear')""",
    }[animation]
    await env._actx.page.evaluate(
        f"""() => {{
        const spacer = document.createElement('div');
        spacer.style.height = '0px';
        const shown = document.getElementById('shown');
        shown.parentNode.insertBefore(spacer, shown);
        {grow};
        // under way and moving fast (3 px per ms) when the click is asked for
        return new Promise(done => {{
            const wait = () => spacer.offsetHeight > 100 ? done() : requestAnimationFrame(wait);
            wait();
        }});
    }}"""
    )
    obs = await env.step_async(A(f"click('{bids['shown']}')"))
    assert obs.last_action_error == ""
    assert await page_log(env) == ["shown"]


async def test_the_check_answers_once_the_accordion_above_the_button_has_opened(env):
    """click-collapsible's own jQuery UI accordion, slowed to 2 s so that the check surely starts
    while the section opens: the check answers only once the animation has ended, with a point
    inside the button where it stays. Before, it answered at once, with the point where the
    button was at that moment (a click there a round trip later missed it on a busy machine)."""
    await env.reset_async(task="click-collapsible", seed=0)
    page = env._actx.page
    submit = await page.evaluate(
        """() => {
        $('#area').accordion('option', 'animate', 2000).accordion('option', 'active', 0);
        return document.getElementById('subbtn').getAttribute('bid');
    }"""
    )
    result = await check_element(page, submit, "click", NEVER_MS)
    assert result is not None and result.ok, result
    assert await page.evaluate("jQuery.timers.length") == 0  # the accordion had finished opening
    box = await page.evaluate("() => document.getElementById('subbtn').getBoundingClientRect().toJSON()")
    assert box["left"] < result.x < box["right"] and box["top"] < result.y < box["bottom"], (result, box)


async def test_an_element_appearing_by_animation_is_waited_for(env):
    """click-collapsible: the section's content slides open (a jQuery effect) after its header
    is clicked; a click on the content in the same step waits for it, as Playwright would."""
    obs = await env.reset_async(task="click-collapsible", seed=3)
    assert "[18] tabpanel" not in obs.axtree_txt
    obs = await env.step_async(A("click('18')"))
    assert obs.last_action_error == "ElementNotActionable: element 18 is not visible (display: none)"
    obs = await env.step_async(A("click('16')\nclick('18')"))
    assert obs.last_action_error == ""
    assert "[18] tabpanel 'Section #1'" in obs.axtree_txt


async def test_old_playwright_path_reports_timeouts(factory):
    """``fast_actions=False`` keeps Playwright's polling checks (and their time-out text)."""
    e = factory()
    try:
        await e.reset_async(task="click-test", seed=0)
        e._actx.fast_actions = False
        e._actx.element_timeout_ms = 200.0
        obs = await e.step_async(A("click('1')"))
        assert obs.last_action_error.startswith("TimeoutError: Locator.click: Timeout 200ms exceeded.")
    finally:
        await e.close_async()
