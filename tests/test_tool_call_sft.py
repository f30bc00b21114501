"""`examples/tool_call_sft.py`: scripted tool-call demonstrations in TRL's exact first-turn
prompt, a step of SFT on them, and a model directory the bench and `load_model` take (the
tiny model, one step; the embedded model's run is in docs/results.md)."""

from __future__ import annotations

import json
import os
import re

import pytest
from _examples import load_example

pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_demonstrations_train_and_save_a_tool_calling_model(tmp_path, training_browser_server):
    example = load_example("tool_call_sft")
    argv = ["--model", "tiny", "--tasks", "click-test,click-button", "--demos", "2", "--steps", "1"]
    assert example.main([*argv, "--base-url", training_browser_server.base_url, "--out", str(tmp_path)]) == 0

    from envharness.integrations.trl.environment import load_model
    from envharness.models.tool_template import TOOL_CHAT_TEMPLATE

    summary = json.loads((tmp_path / "tool_call_sft.json").read_text())
    assert summary["per_task"] == {"click-test": 1, "click-button": 1}
    assert len(summary["steps"]) == 1
    _, tokenizer = load_model(str(tmp_path), tools=True)  # the saved directory, as the bench loads it
    assert tokenizer.chat_template == TOOL_CHAT_TEMPLATE
    for line in (tmp_path / "demonstrations.jsonl").read_text().splitlines():
        demo = json.loads(line)
        assert "<tools>" in demo["prompt"] and demo["prompt"].endswith("<|im_start|>assistant\n")
        (call,) = tokenizer.parse_response(demo["completion"], prefix=demo["prompt"])["tool_calls"]
        assert call["function"]["name"] == "click"
        page = demo["prompt"].rsplit("Elements:", 1)[1]  # the episode's page, after the worked example's
        assert re.search(rf"^\[{re.escape(call['function']['arguments']['bid'])}\] ", page, re.MULTILINE)
