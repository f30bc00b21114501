"""MiniWoB's page files, as they reach the browser: served to a page load, or written in place.

A page load fetches the task's HTML and its scripts and style sheets from ``http://miniwob.local``,
which the browser context answers from the installed `miniwob` package (`serve_miniwob_request`).

A task change rewrites the page's document instead (`switch_document`): ``document.open`` /
``write`` / ``close`` with the task's HTML, its local scripts inlined. The files travel once per
page: the page keeps each task's HTML and each script's text (in a property of its window, which
``document.open`` keeps), so a later change to the same or another task sends the task's name only.
Sending the text every time cost more than the rewrite itself: ~40 ms of a 57 ms change went to
carrying 200 kB (d3 inlined) through Playwright.
"""

from __future__ import annotations

import importlib.util
import logging
import mimetypes
import posixpath
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def html_root() -> Path:
    """The ``html`` folder of the installed `miniwob` package (found without importing it)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the MiniWoB++ pages come from PyPI's `miniwob` package: pip install 'envharness[browser]'"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "html"


@lru_cache(maxsize=512)
def read_page_file(relative: str) -> tuple[bytes, str] | None:
    """(content, content type) of a file under `html_root()`, or None (absent, or outside it)."""
    root = html_root().resolve()
    path = (root / relative).resolve()
    if root not in path.parents or not path.is_file():
        return None
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return path.read_bytes(), content_type


async def serve_miniwob_request(route: Any) -> None:
    """Answer a request to ``http://miniwob.local/...`` from the package's files (404 if absent)."""
    path = urlsplit(route.request.url).path.lstrip("/")
    found = read_page_file(path)
    if found is None:
        await route.fulfill(status=404, body=f"not found: /{path}", content_type="text/plain")
    else:
        body, content_type = found
        await route.fulfill(status=200, body=body, content_type=content_type)


# -- writing a task's page in place -------------------------------------------------------------
_LOCAL_SCRIPT = re.compile(r'<script src="(\.\./[^"]+\.js)"></script>')
_IMAGE_FILE = re.compile(rb"\.(png|jpe?g|gif|svg)\b")
_WINDOWS_1252 = {
    b: bytes([b]).decode("cp1252") for b in range(0x80, 0xA0) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)
}


def decode_as_browser(data: bytes) -> str:
    """Text as Chromium reads these files: UTF-8 after a byte-order mark; otherwise, as no charset
    is declared, windows-1252 as WHATWG defines it (cp1252, the five bytes it leaves undefined
    kept as C1 controls)."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    return data.decode("latin-1").translate(_WINDOWS_1252)


@cache
def shows_images(task: str) -> bool:
    """Whether the task's page uses image files (19 tasks): in a rewritten document they arrive
    after the load event, so a first observation could miss one that a loaded page shows."""
    found = read_page_file(f"miniwob/{task}.html")
    return found is None or _IMAGE_FILE.search(found[0]) is not None


@cache
def page_parts(task: str) -> dict[str, str]:
    """What a page needs to write `task` in place: its HTML (key ``page:<task>``) and the text of
    each local script it names (key: the ``src`` as written, e.g. ``../core/core.js``)."""
    found = read_page_file(f"miniwob/{task}.html")
    if found is None:
        raise ValueError(f"no page for MiniWoB task {task!r}")
    html = decode_as_browser(found[0])
    parts = {f"page:{task}": html}
    for src in _LOCAL_SCRIPT.findall(html):
        script = read_page_file(posixpath.normpath(f"miniwob/{src}"))
        if script is not None:  # an absent file stays a <script src>: a 404, as in a page load
            parts[src] = re.sub("</script", "<\\/script", decode_as_browser(script[0]), flags=re.IGNORECASE)
    return parts


# The page composes the task's HTML from what it keeps (`sent` adds to it; what is missing comes
# back, and is sent on a second call), stops what a page load would end (timers, animation frames;
# `document.open` removes the document's and window's listeners), forgets the old page's globals
# (`document.open` keeps the window: a library that sets itself up once, as jscolor's
# `window.jscolor || ...`, would leave the new page's inputs alone; a global a `var` made cannot be
# deleted, so it becomes undefined; the built-in names are read from a fresh frame's window),
# gives the document the task's URL (replaced in history before `document.open`, which takes it),
# writes it, and waits for the load event: a task of its own, after the images, that runs the
# page's `onload` first. Then each inlined script becomes what a loaded page holds, an empty element
# with its `src` (a script that has run never runs or loads again): its text would stay in the DOM,
# and every DOM snapshot (pruned HTML, element properties) would carry all the scripts' text,
# ~850 kB, at every step.
SWITCH_DOCUMENT_JS = r"""async ([task, url, sent]) => {
  const kept = window.__envharnessPageParts || (window.__envharnessPageParts = Object.create(null));
  Object.assign(kept, sent);
  const page = kept['page:' + task];
  if (page === undefined) return ['page:' + task];
  const missing = [];
  const html = page.replace(/<script src="(\.\.\/[^"]+\.js)"><\/script>/g, (tag, src) => {
    if (kept[src] === undefined) { missing.push(src); return tag; }
    return '<script data-envharness-src="' + src + '">' + kept[src] + '</script>';
  });
  if (missing.length) return missing;
  const builtins = window.__envharnessBuiltins || (window.__envharnessBuiltins = (() => {
    const frame = document.createElement('iframe');
    document.documentElement.appendChild(frame);
    const names = new Set(Object.getOwnPropertyNames(frame.contentWindow));
    frame.remove();
    return names;
  })());
  for (const name of Object.getOwnPropertyNames(window)) {
    if (builtins.has(name) || name.startsWith('__envharness')) continue;
    try { if (!Reflect.deleteProperty(window, name)) window[name] = undefined; } catch (e) {}
  }
  const lastTimer = setTimeout(() => {}, 0);
  for (let id = window.__envharnessClearedTimers || 0; id <= lastTimer; id++) clearTimeout(id);
  window.__envharnessClearedTimers = lastTimer + 1;
  const lastFrame = requestAnimationFrame(() => {});
  for (let id = window.__envharnessClearedFrames || 0; id <= lastFrame; id++) cancelAnimationFrame(id);
  window.__envharnessClearedFrames = lastFrame + 1;
  history.replaceState(null, '', url);
  document.open();
  document.write(html);
  let guard;
  const loaded = new Promise((resolve, reject) => {
    window.addEventListener('load', resolve, {once: true});
    guard = setTimeout(() => reject(new Error('no load event within 10 s')), 10000);
  });
  document.close();
  document.documentElement.getBoundingClientRect();  // lay out now: the images it needs hold the load event back
  try { await loaded; } finally { clearTimeout(guard); }
  for (const script of document.querySelectorAll('script[data-envharness-src]')) {
    const src = script.getAttribute('data-envharness-src');
    script.removeAttribute('data-envharness-src');
    script.textContent = '';
    script.setAttribute('src', src);
  }
  return [];
}"""


async def switch_document(page: Any, task: str, url: str) -> bool:
    """Make `page` (a MiniWoB document) show `task`'s page at `url` without loading it; False
    when it would not (the page is not what the caller took it for), so the caller loads it."""
    try:
        sent: dict[str, str] = {}
        for _ in range(3):  # nothing sent; then the parts it lacks (the page, then its scripts)
            missing = await page.evaluate(SWITCH_DOCUMENT_JS, [task, url, sent])
            if not missing:
                return page.url == url
            parts = page_parts(task)
            sent = {key: parts[key] for key in missing if key in parts}
            if missing[0].startswith("page:"):  # a page that never held this task: all its scripts too
                sent = parts
        return False
    except Exception as e:
        if page.is_closed():
            raise
        logger.warning("switching to %s in place failed (%s); loading the page", task, e)
        return False
