"""What a per-step prompt is built from: `PromptContext` (goal, url, the last steps, the last
action's error, the page text, the enabled actions, a token counter), and the pieces every
builder needs (token counting, cutting page text to a budget, recalling earlier steps).

A per-step prompt builder takes a `PromptContext` and returns chat messages; an environment
registers its own (the browser's is in its `prompts.py`), and users give theirs with
`--prompt module:function` (any callable with the same signature).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envharness._deprecated import PROMPT_CONTEXT_FIELDS, old_field

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
    #: The observation's text, as the environment describes it (`EnvHarness.describe_observation`).
    text: str = ""
    last_action_error: str = ""
    history: list[StepSummary] = field(default_factory=list)
    step: int = 1
    task: str | None = None
    tool_names: tuple[str, ...] = ()
    #: Counts tokens the way the model will (its tokenizer when the backend has one).
    count_tokens: Callable[[str], int] = approximate_tokens
    #: How many tokens the observation text may take.
    text_token_budget: int = 1024
    #: How many earlier steps to recall.
    history_steps: int = 4

    def __getattr__(self, name: str) -> Any:
        """The fields' older names, for prompt builders written against them."""
        return old_field(self, name, PROMPT_CONTEXT_FIELDS)


PromptBuilder = Callable[[PromptContext], list[Message]]


def truncate_to_tokens(
    text: str, budget: int, count_tokens: Callable[[str], int] = approximate_tokens
) -> str:
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


def load_prompt_builder(spec: str) -> PromptBuilder:
    """'module.path:function' -> that function (a user's per-step prompt, `--prompt`).

    Raises ValueError with the reason when the spec does not name a callable."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"--prompt expects a prompt style or 'module.path:function', got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--prompt {spec}: cannot import {module_name!r}: {exc}") from None
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise ValueError(f"--prompt {spec}: {module_name} has no callable {attribute!r}")
    return builder
