"""The eval's default prompt: what it shows, the token budget, user builders, and that the
embedded SmolLM2-135M answers it in the action format (the reason for its worked example)."""

from __future__ import annotations

import re

import pytest

from envharness.envs.browsergym.action_text import build_browsergym_action_tool_call
from envharness.envs.browsergym.prompts import default_prompt
from envharness.envs.browsergym.scripted import find_goal_and_tree
from envharness.prompts.text import (
    PromptContext,
    StepSummary,
    load_prompt_builder,
    truncate_to_tokens,
)

# Real AXTree texts of MiniWoB pages (seed 1), as the browser env returns them.
CLICK_TEST = (
    "Click the button.",
    "RootWebArea 'Click Test Task', focused, url='http://miniwob.local/miniwob/click-test.html'\n\t[13] button 'Click Me!'",
)
FOCUS_TEXT = (
    "Focus into the textbox.",
    "RootWebArea 'Focus Text Task', focused, url='http://miniwob.local/miniwob/focus-text.html'\n\t[12] textbox ''",
)


def context(goal: str, tree: str, **kwargs) -> PromptContext:
    kwargs.setdefault("url", "http://miniwob.local/miniwob/x.html")
    return PromptContext(goal=goal, text=tree, **kwargs)


def test_default_prompt_shows_goal_page_history_error_and_one_worked_example():
    ctx = context(
        *CLICK_TEST,
        last_action_error="TimeoutError: element 99 not found",
        history=[
            StepSummary("click('99')", 0.0, "TimeoutError: element 99 not found"),
            StepSummary("noop()", 0.0),
        ],
    )
    system, example_user, example_reply, user = default_prompt(ctx)
    assert [m["role"] for m in (system, example_user, example_reply, user)] == [
        "system",
        "user",
        "assistant",
        "user",
    ]
    assert "click('bid')" in system["content"] and "fill('bid', 'text')" in system["content"]
    assert build_browsergym_action_tool_call(example_reply["content"]).args == {
        "bid": "13"
    }  # the example is a valid action
    text = user["content"]
    assert text.startswith("Goal: Click the button.\nURL: http://miniwob.local/miniwob/x.html\n")
    assert "[13] button 'Click Me!'" in text
    assert (
        "Step 1: click('99') -> reward 0 (error: TimeoutError: element 99 not found)\nStep 2: noop() -> reward 0"
        in text
    )
    assert "Last action error: TimeoutError: element 99 not found" in text
    # The scripted backend (and any reader of these prompts) finds this step's goal and tree, not the example's.
    assert find_goal_and_tree(default_prompt(ctx)) == CLICK_TEST


def test_history_keeps_only_the_last_steps():
    ctx = context(
        *CLICK_TEST, history=[StepSummary(f"click('{i}')", 0.0) for i in range(1, 7)], history_steps=2
    )
    text = default_prompt(ctx)[-1]["content"]
    assert "Step 5: click('5')" in text and "Step 6: click('6')" in text and "Step 4" not in text


def test_the_page_is_cut_at_a_line_to_fit_its_token_budget():
    tree = "RootWebArea 'Big'\n" + "\n".join(f"\t[{i}] button 'button number {i}'" for i in range(200))
    count_words = lambda text: len(text.split())  # noqa: E731 - any counter: the backend's tokenizer in a run
    cut = truncate_to_tokens(tree, 100, count_words)
    kept = cut.splitlines()[:-1]
    assert count_words("\n".join(kept)) <= 100 < count_words("\n".join(tree.splitlines()[: len(kept) + 1]))
    assert kept == tree.splitlines()[: len(kept)]
    assert cut.splitlines()[-1] == f"... ({201 - len(kept)} more lines cut to fit 100 tokens)"
    assert truncate_to_tokens(tree, 10_000, count_words) == tree
    ctx = context("Click button 150.", tree, text_token_budget=100, count_tokens=count_words)
    assert "more lines cut" in default_prompt(ctx)[-1]["content"]


def blind_prompt(ctx: PromptContext) -> list[dict]:
    return [{"role": "user", "content": f"Goal: {ctx.goal}"}]


def test_prompt_builders_are_named_module_colon_function():
    from envharness.prompts import get_prompt_style

    assert get_prompt_style("default", "browsergym").step is default_prompt  # the browser's per-step prompt
    assert get_prompt_style(f"{__name__}:blind_prompt", "browsergym").step is blind_prompt
    assert load_prompt_builder(f"{__name__}:blind_prompt") is blind_prompt
    for spec, reason in [
        ("no_colon", "module.path:function"),
        ("no.such.module:f", "cannot import"),
        (f"{__name__}:missing", "no callable"),
    ]:
        with pytest.raises(ValueError, match=reason):
            load_prompt_builder(spec)


async def test_the_embedded_model_answers_the_default_prompt_with_an_action():
    """SmolLM2-135M-Instruct, greedy: with the worked example it replies with a parseable
    action, and on these two one-element pages with the right one."""
    from envharness.eval.runner import token_counter
    from envharness.models import load_backend
    from envharness.models.base import GenerationRequest, SamplingParams

    backend = load_backend("embedded")
    count = token_counter(backend)
    requests = [
        GenerationRequest(
            default_prompt(context(goal, tree, count_tokens=count)),
            sampling=SamplingParams(temperature=0.0, max_tokens=10),
        )
        for goal, tree in (CLICK_TEST, FOCUS_TEXT)
    ]
    gens = await backend.generate(requests)
    calls = [build_browsergym_action_tool_call(g.text) for g in gens]
    assert [(c.name, c.args) for c in calls] == [("click", {"bid": "13"}), ("click", {"bid": "12"})], [
        g.text for g in gens
    ]
    assert all(not c.metadata.get("parse_error") for c in calls)


def test_builders_written_against_the_old_context_names_still_read_them_with_a_warning():
    ctx = PromptContext(goal="g", text="[13] button 'OK'", text_token_budget=50)
    from envharness._deprecated import REMOVED_IN

    said = f"PromptContext.axtree is deprecated and will be removed in envharness {REMOVED_IN}: use PromptContext.text"
    with pytest.warns(DeprecationWarning, match=re.escape(said)):
        assert ctx.axtree == "[13] button 'OK'"
    with pytest.warns(DeprecationWarning):
        assert ctx.axtree_token_budget == 50
    with pytest.raises(AttributeError, match="no_such_field"):
        _ = ctx.no_such_field
