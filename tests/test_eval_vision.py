"""`envharness eval --vision` end to end: real browser server, real Chromium, the OpenAI-compatible
backend against a stub server on loopback that checks it received the page's screenshot in
the latest user turn, and a report that shows the image the model was shown."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
from _models_fixtures import serve
from fastapi import FastAPI, Request
from PIL import Image

from envharness.cli import main
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.prompts.screenshot import add_screenshot, resize_screenshot

pytestmark = pytest.mark.timeout(300)
MAX_SIDE = 256


class SeeingStub:
    """A chat-completions server whose 'model' needs the screenshot: it refuses a request
    without exactly one image (in the last user message), then clicks the button the text names."""

    def __init__(self) -> None:
        self.images: list[Image.Image] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.complete)

    async def complete(self, request: Request):
        body = await request.json()
        messages = body["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        images = [
            (i, p)
            for i, m in enumerate(messages)
            if isinstance(m["content"], list)
            for p in m["content"]
            if p["type"] == "image_url"
        ]
        assert [i for i, _ in images] == [users[-1]], "one screenshot, in the latest user turn"
        header, _, data = images[0][1]["image_url"]["url"].partition(",")
        assert header == "data:image/png;base64"
        self.images.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
        text = "".join(p.get("text", "") for p in messages[users[-1]]["content"] if p["type"] == "text")
        bid = re.search(r"\[(\w+)\] button", text)
        action = f"click('{bid.group(1)}')" if bid else "noop()"
        return {
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": action}}
            ]
        }


def test_eval_runs_a_vision_policy_and_reports_what_it_saw(tmp_path, capsys):
    stub = SeeingStub()
    out = tmp_path / "vision"
    with serve(stub.app) as url:
        code = main(
            [
                "eval",
                "--no-progress",
                "--model",
                f"openai:stub-vl@{url}/v1",
                "--vision",
                "--screenshot-max-side",
                str(MAX_SIDE),
                "--tasks",
                "click-test",
                "--episodes",
                "2",
                "--max-steps",
                "2",
                "--out",
                str(out),
            ]
        )
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["task"], r["success_rate"]) for r in summary["tasks"]] == [("click-test", 1.0)]

    # every model call carried the page, shrunk to MAX_SIDE on its longer side (498x321 -> 256x165)
    assert len(stub.images) == 2 and all(image.size == (256, 165) for image in stub.images)
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    shown = []
    for record in records:
        [step] = record["steps"]
        user = step["prompt"][-1]
        assert user["role"] == "user" and user["content"][0]["type"] == "image"
        path = out / user["content"][0]["image"]  # the image as sent, kept in the run folder
        with Image.open(path) as image:
            shown.append(np.asarray(image.convert("RGB")))
        with Image.open(out / step["screenshot"]) as page:
            assert page.size == (498, 321) and page.format == "PNG"  # the page itself, exact pixels
    received = [np.asarray(image) for image in stub.images]
    assert sorted(a.tobytes() for a in shown) == sorted(
        a.tobytes() for a in received
    )  # same pixels, both episodes

    html = (out / "report.html").read_text()
    assert html.count("image in the prompt") == 2 and "in the prompt, as sent" in html
    assert "[image: screenshots/" in html  # where the image sits in the prompt text


def test_add_screenshot_puts_the_image_in_the_latest_user_turn():
    image = Image.new("RGB", (498, 321), (10, 20, 30))
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "example"},
        {"role": "assistant", "content": "click('1')"},
        {"role": "user", "content": "Goal: x"},
    ]
    out = add_screenshot(messages, image)
    assert out[:3] == messages[:3] and messages[3] == {
        "role": "user",
        "content": "Goal: x",
    }  # input untouched
    assert out[3]["content"] == [{"type": "image", "image": image}, {"type": "text", "text": "Goal: x"}]
    assert add_screenshot(messages, image, max_side=100)[3]["content"][0]["image"].size == (100, 64)
    assert resize_screenshot(image, 1000) is image
    with pytest.raises(ValueError, match="no user message"):
        add_screenshot([{"role": "system", "content": "S"}], image)


def test_vision_needs_screenshots():
    with pytest.raises(EvalSetupError, match="drop --no-screenshots"):
        EvalConfig(out="x", vision=True, screenshots=False).check()
    with pytest.raises(EvalSetupError, match="--screenshot-max-side"):
        EvalConfig(out="x", screenshot_max_side=4).check()


def test_vision_is_on_for_backends_that_see_unless_told_otherwise():
    from types import SimpleNamespace

    from envharness.eval.runner import uses_vision
    from envharness.models.scripted import ScriptedBackend

    config = EvalConfig(out="x")
    local_vlm = SimpleNamespace(processor=SimpleNamespace(image_processor=object(), tokenizer=object()))
    assert uses_vision(config, local_vlm) and uses_vision(config, SimpleNamespace(vision=True))
    assert not uses_vision(config, ScriptedBackend()) and not uses_vision(
        config, SimpleNamespace(processor=object())
    )
    assert not uses_vision(EvalConfig(out="x", vision=False), local_vlm)
    assert uses_vision(EvalConfig(out="x", vision=True), ScriptedBackend())


def test_eval_plays_the_vision_conversation_train_trains_on(tmp_path, capsys):
    """`eval --prompt vision` runs the conversation `train --model <VLM>` plays: the opening
    shows the first screenshot and every tool result the next one, each recorded by file."""
    out = tmp_path / "vlm"
    code = main(
        [
            "eval",
            "--no-progress",
            "--model",
            "tiny-vlm",
            "--prompt",
            "vision",
            "--tasks",
            "click-test",
            "--episodes",
            "1",
            "--max-steps",
            "2",
            "--max-new-tokens",
            "4",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    record = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert not record["error"], record["error"]
    for step in record["steps"]:
        images = [
            p["image"]
            for m in step["prompt"]
            if isinstance(m["content"], list)
            for p in m["content"]
            if p["type"] == "image"
        ]
        assert len(images) == step["index"], "one screenshot per observation so far, in order"
        assert all((out / image).is_file() for image in images)
        assert step["prompt"][-1]["role"] == ("user" if step["index"] == 1 else "tool")


def test_text_conversations_and_vision_flags_must_agree(tmp_path):
    with pytest.raises(EvalSetupError, match="does not show screenshots"):
        from envharness.eval.runner import vision_for
        from envharness.prompts import get_prompt_style

        vision_for(get_prompt_style("compact"), EvalConfig(out=str(tmp_path), vision=True), backend=None)
