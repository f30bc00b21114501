"""The observation builder on real Chromium pages: bids, AXTree text, HTML, properties, screenshot.

Equality with BrowserGym's own output on MiniWoB pages is tested in test_browser_fidelity.py.
"""

import base64
import io

import pytest
import pytest_asyncio
from PIL import Image

from envharness.envs.browsergym.engine import CHROMIUM_ARGS, DEFAULT_CHROMIUM
from envharness.envs.browsergym.observation import ObservationParts, extract_page_observation, mark_elements
from envharness.envs.browsergym.observation_text import drop_inline_text_boxes, flatten_axtree_to_str

pytestmark = pytest.mark.asyncio(loop_scope="module")

PAGE = """<html><head><title>T</title></head><body>
<button id="go" aria-description="keeps its own description" onclick="void 0">Go</button>
<label><input type="checkbox" id="box">Box</label>
<input type="text" id="name">
<div style="margin-top: 2000px"><button id="far">Far away</button></div>
</body></html>"""

FRAMED = """<html><body><button>Outside</button>
<iframe srcdoc="<button id='inner'>Inside</button><input id='field'>"></iframe></body></html>"""

TEXT_ONLY = ObservationParts(axtree=True, pruned_html=False, extra_properties=False)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=list(CHROMIUM_ARGS))
        yield b
        await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser):
    context = await browser.new_context(viewport={"width": 400, "height": 300})
    p = await context.new_page()
    await p.set_content(PAGE)
    yield p
    await context.close()


async def bid(page, selector: str, frame=None) -> str:
    return await (frame or page).get_attribute(selector, "bid")


async def test_every_element_gets_a_stable_bid_and_the_aria_copies_are_removed(page):
    obs = await extract_page_observation(page, ObservationParts())
    go = await bid(page, "#go")
    assert go and f"[{go}] button 'Go'" in obs["axtree_txt"]
    # A second observation keeps the same bids (the page keeps its `bid` attributes).
    again = await extract_page_observation(page, ObservationParts())
    assert again["axtree_txt"] == obs["axtree_txt"] and await bid(page, "#go") == go
    # The bid copies in ARIA attributes are gone; the page's own ARIA text is intact.
    assert await page.get_attribute("#go", "aria-description") == "keeps its own description"
    assert await page.evaluate("document.querySelectorAll('[aria-roledescription]').length") == 0
    assert "browsergym_id" not in obs["axtree_txt"] + obs["pruned_html"]


async def test_axtree_text_shows_state_and_no_inline_text_boxes(page):
    await page.check("#box")
    await page.fill("#name", "Ada")
    await page.focus("#name")
    obs = await extract_page_observation(page, TEXT_ONLY)
    box, name = await bid(page, "#box"), await bid(page, "#name")
    assert f"[{box}] checkbox 'Box', checked='true'" in obs["axtree_txt"]
    assert f"[{name}] textbox '' value='Ada', focused" in obs["axtree_txt"]
    assert "InlineTextBox" not in obs["axtree_txt"]
    assert obs["focused_element_bid"] == name
    # Text-only parts: no DOM snapshot work, nothing returned for it.
    assert obs["pruned_html"] == "" and obs["extra_element_properties"] == {} and obs["screenshot"] is None


async def test_pruned_html_carries_bids_and_live_values(page):
    await page.fill("#name", "Grace")
    obs = await extract_page_observation(page, ObservationParts(axtree=False))
    name = await bid(page, "#name")
    assert f'<input bid="{name}" id="name" type="text" value="Grace"/>' in obs["pruned_html"]
    assert "<title" in obs["pruned_html"] and "<body" not in obs["pruned_html"]
    assert obs["axtree_txt"] == ""


async def test_element_properties_visibility_bbox_clickable(page):
    obs = await extract_page_observation(page, ObservationParts(), scale_factor=1.5)
    props = obs["extra_element_properties"]
    go, far = props[await bid(page, "#go")], props[await bid(page, "#far")]
    assert go["visibility"] == 1.0 and go["clickable"] is True and go["set_of_marks"] is True
    assert far["visibility"] == 0.0 and far["clickable"] is False  # 2000 px below the viewport, no handler
    box = await page.locator("#go").bounding_box()
    assert go["bbox"] == pytest.approx(
        [box["x"] * 1.5, box["y"] * 1.5, box["width"] * 1.5, box["height"] * 1.5]
    )


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
async def test_screenshot_only_when_asked_as_base64_image(page, fmt):
    obs = await extract_page_observation(
        page,
        ObservationParts(
            axtree=False, pruned_html=False, extra_properties=False, screenshot=True, screenshot_format=fmt
        ),
        scale_factor=1.5,
    )
    image = Image.open(io.BytesIO(base64.b64decode(obs["screenshot"])))
    assert image.format == fmt.upper() and image.size == (600, 450)


async def test_frames_get_prefixed_bids_and_a_merged_tree(browser):
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.set_content(FRAMED)
        frame = page.frames[1]
        await frame.wait_for_selector("#inner")
        await frame.focus("#field")
        obs = await extract_page_observation(page, ObservationParts())
        iframe_bid = await bid(page, "iframe")
        inner = await bid(page, "#inner", frame)
        assert iframe_bid == "a" and inner.startswith("a") and inner[1:].isdigit()
        lines = obs["axtree_txt"].splitlines()
        iframe_line = next(
            i for i, line in enumerate(lines) if line.strip().startswith(f"[{iframe_bid}] Iframe")
        )
        assert any(f"[{inner}] button 'Inside'" in line for line in lines[iframe_line:])
        assert obs["focused_element_bid"] == await bid(page, "#field", frame)
        assert inner in obs["extra_element_properties"] and f'bid="{inner}"' in obs["pruned_html"]
    finally:
        await context.close()


async def test_mark_elements_alone_sets_bids_everywhere(page):
    await mark_elements(page)
    unmarked = await page.evaluate(
        "[...document.querySelectorAll('body *')].filter(e => !e.hasAttribute('bid')).length"
    )
    assert unmarked == 0


async def test_inline_text_boxes_are_dropped_with_their_links():
    nodes = [
        {"nodeId": "1", "role": {"value": "RootWebArea"}, "name": {"value": "R"}, "childIds": ["2"]},
        {"nodeId": "2", "role": {"value": "StaticText"}, "name": {"value": "hello"}, "childIds": ["3"]},
        {"nodeId": "3", "role": {"value": "InlineTextBox"}, "name": {"value": "hello"}, "childIds": []},
    ]
    assert flatten_axtree_to_str(nodes) == "RootWebArea 'R'\n\tStaticText 'hello'\n\t\tInlineTextBox 'hello'"
    assert flatten_axtree_to_str(drop_inline_text_boxes(nodes)) == "RootWebArea 'R'\n\tStaticText 'hello'"


SELECT_PAGE = """<html><body><select id="pick"><option>Kuwait</option><option>Reunion</option></select>
<script>window.seen = []; for (const t of ["keydown", "keyup", "blur", "resize"])
  addEventListener(t, () => seen.push(t), true);</script></body></html>"""


def combobox_line(obs: dict) -> str:
    return next(line.strip() for line in obs["axtree_txt"].splitlines() if "combobox" in line)


async def test_an_open_select_popup_is_closed_after_the_observation_as_in_browsergym(page):
    """BrowserGym's screenshot resizes the page for a moment, which closes a <select>'s popup: its
    observation shows the list expanded, the next action finds it closed (text typed then picks an
    option in the closed list). Ours closes it too, and the page sees no event of it."""
    await page.set_content(SELECT_PAGE)
    await page.click("#pick")  # focuses the list and opens its popup
    assert await page.evaluate("document.querySelector('select:open') !== null")
    obs = await extract_page_observation(page, TEXT_ONLY)
    assert "expanded=True" in combobox_line(obs) and "focused" in combobox_line(obs)
    assert await page.evaluate("document.querySelector('select:open')") is None
    assert await page.evaluate("seen") == []
    await page.keyboard.type("Reunion")
    obs = await extract_page_observation(page, TEXT_ONLY)
    assert "value='Reunion'" in combobox_line(obs) and "expanded=False" in combobox_line(obs)
    assert "focused" in combobox_line(obs)
