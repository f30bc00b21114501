"""ScriptedBackend: finds the goal and AXTree in the conversation and answers with the solution."""

from __future__ import annotations

import json

from envharness.envs.browsergym.scripted import find_goal_and_tree, scripted_action
from envharness.envs.browsergym.sessions import action_instructions, format_observation
from envharness.models import load_backend
from envharness.models.base import GenerationRequest
from envharness.models.scripted import ScriptedBackend

CLICK_TEST_TREE = "RootWebArea 'Click Test Task', focused\n\t[13] button 'Click Me!'"
OTHER_TREE = "RootWebArea 'Click Button Task', focused\n\t[20] button 'no'\n\t[21] button 'yes'"


def observation(goal: str, tree: str, error: str = "") -> dict:
    return {
        "goal": goal,
        "url": "http://127.0.0.1/miniwob/click-test.html",
        "axtree_txt": tree,
        "last_action_error": error,
    }


def harness_conversation() -> list[dict]:
    """The messages the BrowserGym harness writes: instructions + first page, then tool results."""
    first = (
        action_instructions(["click", "noop"])
        + "\n\n"
        + format_observation(observation("Click the button.", OTHER_TREE))
    )
    later = format_observation(
        observation('Click on the "yes" button.', OTHER_TREE + "\n\t[22] button 'maybe'"), with_error=False
    )
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "click('20')"},
        {"role": "tool", "content": later + "\n\nReward: 0.0  Done: False"},
    ]


def test_reads_the_newest_goal_and_tree_from_harness_messages():
    goal, tree = find_goal_and_tree(harness_conversation())
    assert goal == 'Click on the "yes" button.'
    assert tree == OTHER_TREE + "\n\t[22] button 'maybe'"  # the block ends before "Reward:"


def test_reads_json_observations_and_older_goals():
    messages = [
        {"role": "user", "content": "Goal: Enter the text.\nPage:\n" + CLICK_TEST_TREE},
        {
            "role": "tool",
            "content": json.dumps({"observation": {"axtree_txt": "RootWebArea 'x'\n\t[5] textbox ''"}}),
        },
    ]
    assert find_goal_and_tree(messages) == ("Enter the text.", "RootWebArea 'x'\n\t[5] textbox ''")


async def test_answers_with_the_solution_or_a_noop_and_a_reason():
    seen = []

    def solve(goal, tree):
        seen.append((goal, tree))
        return "click('21')" if "yes" in goal else None

    backend = ScriptedBackend(lambda messages: scripted_action(messages, solve=solve))
    gens = await backend.generate(
        [
            GenerationRequest(harness_conversation()),
            GenerationRequest(
                [{"role": "user", "content": "Goal: Something unknown.\n\n" + CLICK_TEST_TREE}]
            ),
            GenerationRequest([{"role": "user", "content": "hello"}]),
        ]
    )
    assert [g.text for g in gens] == ["click('21')", "noop()", "noop()"]
    assert gens[0].prompt_ids == gens[0].completion_ids == gens[0].logprobs == []
    assert "no scripted solution" in gens[1].metadata["error"]
    assert gens[2].metadata["error"] == "no goal and accessibility tree in the conversation"
    assert seen[0][0] == 'Click on the "yes" button.'


async def test_solves_click_test_with_the_real_solutions():
    backend = load_backend("scripted")
    msgs = [
        {
            "role": "user",
            "content": action_instructions(["click"])
            + "\n\n"
            + format_observation(observation("Click the button.", CLICK_TEST_TREE)),
        }
    ]
    (gen,) = await backend.generate([GenerationRequest(msgs)])
    assert gen.text.replace('"', "'") == "click('13')"
