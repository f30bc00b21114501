"""The per-step text prompt `envharness eval` uses by default, as BrowserGym/AgentLab agents and the seeds build them.

A prompt builder takes a `PromptContext` (goal, url, the last steps, the last action's
error, the accessibility tree, the enabled actions, a token counter) and returns chat
messages. The default one writes the goal, the URL, the AXTree cut to a token budget, the
previous steps and the last error, and shows one worked example as an earlier turn: small
models (SmolLM2-135M) answer in the action format only when they have seen it once.

Users replace it with `--prompt module:function` (any callable with the same signature).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from envharness.envs.browsergym.action_text import ACTION_TOOLS, DEFAULT_TOOL_NAMES

Message = dict[str, Any]


def approximate_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 4 characters per token), for backends without a tokenizer."""
    return (len(text) + 3) // 4


def tokenizer_counter(tokenizer: Any) -> Callable[[str], int]:
    """Count tokens with a transformers tokenizer (None: `approximate_tokens`)."""
    if tokenizer is None or not callable(tokenizer):
        return approximate_tokens
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class StepSummary:
    """One earlier step, as the next prompt recalls it."""

    action: str
    reward: float | None = None
    error: str = ""


@dataclass
class PromptContext:
    """Everything a prompt builder may use for the next step."""

    goal: str
    url: str = ""
    axtree: str = ""
    last_action_error: str = ""
    history: list[StepSummary] = field(default_factory=list)
    step: int = 1
    task: str | None = None
    tool_names: tuple[str, ...] = DEFAULT_TOOL_NAMES
    #: Counts tokens the way the model will (its tokenizer when the backend has one).
    count_tokens: Callable[[str], int] = approximate_tokens
    #: How many tokens the page text may take.
    axtree_token_budget: int = 1024
    #: How many earlier steps to recall.
    history_steps: int = 4


PromptBuilder = Callable[[PromptContext], list[Message]]


def truncate_to_tokens(text: str, budget: int, count_tokens: Callable[[str], int] = approximate_tokens) -> str:
    """`text` cut at a line boundary so that it takes at most `budget` tokens, with a note of
    how many lines were cut. Whole lines keep the `[bid] role 'name'` format intact."""
    if budget <= 0:
        return ""
    if count_tokens(text) <= budget:
        return text
    lines = text.splitlines()
    lo, hi = 0, len(lines)  # the most lines that fit, by bisection (the counter may be a tokenizer)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens("\n".join(lines[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return "\n".join(lines[:lo] + [f"... ({len(lines) - lo} more lines cut to fit {budget} tokens)"])


def action_list(tool_names: tuple[str, ...] | list[str]) -> str:
    """The enabled actions in the syntax the action parser reads, one per line."""
    lines = []
    for name in tool_names:
        tool = ACTION_TOOLS[name]
        required = [(tool.shown(p), kind) for p, kind in tool.params if p not in tool.optional]
        params = ", ".join(f"'{shown}'" if kind == "string" else shown for shown, kind in required)
        lines.append(f"{name}({params}): {tool.description}")
    return "\n".join(lines)


def format_history(history: list[StepSummary], keep: int) -> str:
    if not history:
        return "none"
    first = max(0, len(history) - keep)
    lines = []
    for i, step in enumerate(history[first:], first + 1):
        line = f"Step {i}: {step.action}"
        if step.reward is not None:
            line += f" -> reward {step.reward:g}"
        if step.error:
            line += f" (error: {step.error})"
        lines.append(line)
    return "\n".join(lines)


def observation_text(goal: str, url: str, axtree: str, history: str, error: str) -> str:
    """One step's user message. The tree sits between its header and a blank line, where
    readers of these prompts (the scripted backend) look for it."""
    return (
        f"Goal: {goal}\n"
        f"URL: {url or '(unknown)'}\n"
        f"Page (accessibility tree):\n{axtree or '(empty page)'}\n\n"
        f"Previous steps:\n{history}\n"
        f"Last action error: {error or 'none'}\n\n"
        "Reply with one action."
    )


# Shaped like a real MiniWoB tree (its root line names the URL too): with a plainer example,
# SmolLM2-135M copies words of the root line into the bid (click('click-test-test-...')).
_EXAMPLE_URL = "http://miniwob.local/miniwob/example.html"
_EXAMPLE_TREE = f"RootWebArea 'Example Task', focused, url='{_EXAMPLE_URL}'\n\t[11] textbox ''\n\t[13] button 'OK'\n\t[14] button 'Cancel'"
EXAMPLE = [
    {"role": "user", "content": observation_text('Click on the "OK" button.', _EXAMPLE_URL, _EXAMPLE_TREE, "none", "")},
    {"role": "assistant", "content": "click('13')"},
]


def default_prompt(ctx: PromptContext) -> list[Message]:
    """System message with the actions, one worked example, then this step's page."""
    system = (
        "You are a web agent. You act on a web page to complete a goal. Page elements have an id in\n"
        "square brackets, e.g. [13]. Reply with exactly one action and nothing else.\n"
        "Actions:\n" + action_list(ctx.tool_names)
    )
    page = truncate_to_tokens(ctx.axtree, ctx.axtree_token_budget, ctx.count_tokens)
    user = observation_text(ctx.goal, ctx.url, page, format_history(ctx.history, ctx.history_steps), ctx.last_action_error)
    return [{"role": "system", "content": system}, *EXAMPLE, {"role": "user", "content": user}]


def load_prompt_builder(spec: str | None) -> PromptBuilder:
    """`None`/'default' -> `default_prompt`; 'module.path:function' -> that function.

    Raises ValueError with the reason when the spec does not name a callable."""
    if spec in (None, "", "default"):
        return default_prompt
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--prompt expects 'module.path:function' (or 'default'), got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--prompt {spec}: cannot import {module_name!r}: {exc}") from None
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise ValueError(f"--prompt {spec}: {module_name} has no callable {attribute!r}")
    return builder
