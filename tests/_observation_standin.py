"""TEMPORARY stand-in for H3's envs/browsergym/observation.py, used only until it exists."""
import dataclasses
import importlib.util
import sys
import types


@dataclasses.dataclass
class ObservationParts:
    axtree: bool = True
    pruned_html: bool = True
    extra_properties: bool = True
    screenshot: bool = False
    screenshot_format: str = "png"


_JS = """() => {
  let n = window.__bidn || 0;
  for (const el of document.querySelectorAll('*')) { if (!el.hasAttribute('bid')) el.setAttribute('bid', String(n++)); }
  window.__bidn = n;
  const lines = [];
  for (const el of document.body.querySelectorAll('*')) {
    const t = (el.childNodes.length === 1 && el.firstChild.nodeType === 3) ? el.textContent.trim() : '';
    lines.push(`[${el.getAttribute('bid')}] ${el.tagName.toLowerCase()} '${t}'`);
  }
  const f = document.activeElement;
  return {axtree_txt: lines.join('\\n'), focused: f ? f.getAttribute('bid') : ''};
}"""


async def mark_elements(page):
    await page.evaluate(_JS)


async def extract_page_observation(page, parts):
    r = await page.evaluate(_JS)
    shot = None
    if parts.screenshot:
        import base64
        shot = base64.b64encode(await page.screenshot(type=parts.screenshot_format)).decode()
    return {"axtree_txt": r["axtree_txt"] if parts.axtree else "", "pruned_html": "", "focused_element_bid": r["focused"],
            "extra_element_properties": {}, "screenshot": shot}


def install() -> None:
    name = "envharness.envs.browsergym.observation"
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        mod = types.ModuleType("envharness.envs.browsergym.observation")
        mod.ObservationParts, mod.mark_elements, mod.extract_page_observation = ObservationParts, mark_elements, extract_page_observation
        sys.modules[mod.__name__] = mod
