"""The vision prompt: the current screenshot in the newest message, sized and counted as asked."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from envharness.envs.browsergym.models import BrowserGymObservation
from envharness.envs.browsergym.vision_text import BROWSER_VISION_TEXT
from envharness.harness.adapter import tool_message_content
from envharness.harness.types import ToolResult
from envharness.models.images import messages_images
from envharness.prompts.vision import (
    OMITTED,
    VisionPromptConfig,
    fit_image,
    limit_screenshots,
    to_image,
    vision_messages,
    vision_prompt,
    vision_step_parts,
)


def browser(**knobs) -> VisionPromptConfig:
    """The vision prompt in the browser's words (its "vision" style supplies them)."""
    return VisionPromptConfig(text=BROWSER_VISION_TEXT, **knobs)


TREE = "RootWebArea 'Click Test', focused\n\t[13] button 'Click Me!'\n\tStaticText 'hello'"


def png_b64(color, size=(160, 210)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def observation(color, **fields) -> BrowserGymObservation:
    return BrowserGymObservation(
        goal="Click the button.",
        axtree_txt=TREE,
        screenshot=png_b64(color),
        screenshot_format="png",
        **fields,
    )


def test_screenshot_forms_all_become_the_same_image():
    b64 = png_b64((10, 20, 30))
    ref = to_image(b64)
    assert ref.size == (160, 210) and ref.getpixel((0, 0)) == (10, 20, 30)
    array = np.asarray(ref)
    for form in (
        base64.b64decode(b64),
        array,
        array.tolist(),
        ref,
        np.concatenate([array, np.full(array.shape[:2] + (1,), 255, np.uint8)], -1),
    ):
        assert np.array_equal(np.asarray(to_image(form)), array)
    assert to_image(None) is None
    with pytest.raises(ValueError, match="H×W×3"):
        to_image(np.zeros((4, 4)))


def test_first_prompt_has_goal_elements_and_the_screenshot_last():
    messages = vision_prompt(observation((200, 0, 0)), "click-test", ["click", "noop"], browser(max_side=100))
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]  # a worked example first
    assert [
        m["role"] for m in vision_prompt(observation((0, 0, 0)), "t", ["click"], browser(example=False))
    ] == ["system", "user"]
    parts = messages[-1]["content"]
    assert (
        parts[0]["type"] == "text"
        and "Goal: Click the button." in parts[0]["text"]
        and "[13] button 'Click Me!'" in parts[0]["text"]
    )
    assert parts[-1]["type"] == "image" and max(parts[-1]["image"].size) == 100  # shrunk, aspect kept
    assert parts[-1]["image"].size == (76, 100)


def test_step_parts_become_a_tool_message_with_the_new_screenshot():
    parts = vision_step_parts(observation((0, 200, 0)), 0.0, False, None, browser())
    content = tool_message_content(ToolResult(data=parts, error="no element with bid 99"))
    assert content[0] == {"type": "text", "text": "Error: no element with bid 99\n"}
    assert "Reward: 0.0  Done: False" in content[1]["text"] and content[-1]["type"] == "image"
    assert tool_message_content(ToolResult(data="plain text")) == "plain text"  # text results unchanged


def test_per_step_prompt_keeps_the_latest_screenshots_only_when_asked():
    history = [("click('13')", observation((0, 0, 200))), ("noop()", observation((0, 200, 200)))]
    every = vision_messages(
        "Click the button.",
        observation((200, 0, 0)),
        tool_names=["click", "noop"],
        history=history,
        config=browser(),
    )
    assert len(messages_images(every)) == 3
    assert np.asarray(messages_images(every)[-1])[0, 0].tolist() == [0, 200, 200]  # the current page is last
    assert every[-1]["role"] == "user" and every[-2] == {"role": "assistant", "content": "noop()"}
    latest = vision_messages(
        "Click the button.",
        observation((200, 0, 0)),
        tool_names=["click"],
        history=history,
        config=browser(keep_screenshots=1),
    )
    assert len(messages_images(latest)) == 1 and np.asarray(messages_images(latest)[0])[0, 0].tolist() == [
        0,
        200,
        200,
    ]
    assert sum(OMITTED in str(m["content"]) for m in latest) == 2
    assert limit_screenshots(every, None) == every


def test_bad_knobs_are_refused():
    with pytest.raises(ValueError, match="page_text"):
        browser(page_text="html")
    with pytest.raises(ValueError, match="keep_screenshots"):
        browser(keep_screenshots=0)
    assert fit_image(Image.new("RGB", (50, 40)), 448).size == (50, 40)  # never enlarged
