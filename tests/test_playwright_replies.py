"""Playwright's replies without a Playwright object in them pass uncopied (`playwright_replies`);
replies with one still give the object."""

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.engine import BrowserEngine, HostGuard


async def test_plain_replies_pass_uncopied_and_objects_still_arrive(monkeypatch):
    from playwright._impl import _connection

    engine = BrowserEngine()
    try:
        context = await engine.new_context(viewport=miniwob.MINIWOB_VIEWPORT, guard=HostGuard())
        page = await context.new_page()  # a reply holding a guid: a Page comes back
        assert type(page).__name__ == "Page"
        await page.goto(miniwob.task_url("click-test"))

        walked = []
        original = _connection.Connection._replace_guids_with_channels

        def spy(self, payload):
            walked.append(payload)
            return original(self, payload)

        monkeypatch.setattr(_connection.Connection, "_replace_guids_with_channels", spy)
        cdp = await context.new_cdp_session(page)
        tree = await cdp.send("Accessibility.getFullAXTree")
        assert any(node.get("role", {}).get("value") == "button" for node in tree["nodes"])
        # The AXTree reply reached the walk wrapped (known to hold no object) and was handed on.
        plain = [p.value for p in walked if type(p).__name__ == "_Plain"]
        assert {"result": tree} in plain
        assert await page.evaluate("() => document.title") == "Click Test Task"
        assert (await context.new_page()).url == "about:blank"  # objects still arrive
    finally:
        await engine.aclose()
