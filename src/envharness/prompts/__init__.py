"""Prompts: how an observation becomes the model's messages, in one place for eval and train.

A policy is evaluated on the prompt it was trained on, so `envharness eval --prompt STYLE`
and `envharness train --prompt STYLE` take the same named style from this registry and run
an episode the same way:

- a *conversation* style gives the episode's opening messages from the first observation;
  each later turn appends the model's reply and the tool result (the page after the action),
  as train's rollout does (the session factory's `prompt_builder=style.opening`);
- a *per-step* style builds a fresh prompt at every step from a `PromptContext` (goal, URL,
  page text cut to a token budget, last steps, last error), as `envharness eval` does by
  default. Training on a per-step style is one turn per episode (later turns would not be
  one token sequence).

Each environment registers its styles (`EnvHarness.prompt_styles`: the browser's are in
each in its `envs/<name>/prompts.py`); this package
holds what they share:

    text.py        `PromptContext` and the pieces of a per-step prompt (token budgets, history)
    vision.py      screenshots in the newest message, for vision-language models
    screenshot.py  `add_screenshot`: any per-step prompt plus the page's screenshot

Adding a style at run time is one call:

    register_prompt_style(PromptStyle("mine", "my prompt", step=my_prompt), env=ENV)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envharness.core.registry import DEFAULT_ENV
from envharness.harness.prompt_style import Message, OpeningBuilder, PromptStyle
from envharness.prompts.text import (
    PromptBuilder,
    PromptContext,
    approximate_tokens,
    load_prompt_builder,
)

_STYLES: dict[str, dict[str, PromptStyle]] = {}


#: An environment by name, or as a run resolved it (`core.registry.ResolvedEnv`).
EnvRef = Any


def _styles(env: EnvRef) -> dict[str, PromptStyle]:
    """The styles of `env`: those its harness registers (`EnvHarness.prompt_styles`), plus any
    added with `register_prompt_style(..., env=env)`."""
    from envharness.core.registry import load_target, resolved

    env = resolved(env or DEFAULT_ENV)
    if env.name not in _STYLES:
        harness = env.require_harness()
        styles = (
            load_target(harness.prompt_styles)
            if isinstance(harness.prompt_styles, str)
            else harness.prompt_styles
        )
        _STYLES[env.name] = dict(styles or {})
    return _STYLES[env.name]


def register_prompt_style(style: PromptStyle, *, env: EnvRef = None, replace: bool = False) -> PromptStyle:
    """Make `style` available to `--prompt` in eval and train, for `env` (default: the browser)."""
    styles = _styles(env)
    if style.name in styles and not replace:
        raise ValueError(f"prompt style {style.name!r} is already registered")
    if ":" in style.name or not style.name:
        raise ValueError(f"a prompt style name must be non-empty and have no ':' (got {style.name!r})")
    styles[style.name] = style
    return style


def prompt_styles(env: EnvRef = None) -> list[PromptStyle]:
    return list(_styles(env).values())


def prompt_names(env: EnvRef = None) -> list[str]:
    return list(_styles(env))


def get_prompt_style(spec: str | None, env: EnvRef = None) -> PromptStyle:
    """A style of `env` by name (None/'' -> the environment's default), or 'module.path:function'
    as a per-step style (a `PromptBuilder`). Raises ValueError naming the choices."""
    from envharness.core.registry import resolved

    env = resolved(env or DEFAULT_ENV)
    styles = _styles(env)
    if not (spec or "").strip():
        spec = env.require_harness().default_prompt
    spec = spec.strip()
    if spec in styles:
        return styles[spec]
    if ":" not in spec:
        raise ValueError(
            f"unknown prompt style {spec!r}{f' for {env.name}' if env.name != DEFAULT_ENV else ''}; "
            f"choose from {', '.join(styles)} or give module.path:function"
        )
    return PromptStyle(spec, "a user prompt builder", step=load_prompt_builder(spec))


def opening_builder(
    style: PromptStyle,
    *,
    count_tokens: Callable[[str], int] = approximate_tokens,
    text_token_budget: int = 1024,
    history_steps: int = 4,
    describe: Callable[[Any], tuple[str, str]] | None = None,
) -> OpeningBuilder:
    """The episode's opening messages for any style, as `BrowserGymSessionFactory(prompt_builder=...)`
    takes them. For a per-step style it is the style's step-1 prompt, built from the first
    observation with these settings (eval's step 1 and train's only turn are the same)."""
    if style.opening is not None:
        return style.opening
    step = style.step
    assert step is not None

    def opening(observation: Any, task: Any, tool_names: list[str]) -> list[Message]:
        goal, text = (describe or _describe)(observation)
        context = PromptContext(
            goal=goal,
            url=getattr(observation, "url", "") or "",
            text=text,
            last_action_error=getattr(observation, "last_action_error", "") or "",
            task=task if isinstance(task, str) else None,
            tool_names=tuple(tool_names),
            count_tokens=count_tokens,
            text_token_budget=text_token_budget,
            history_steps=history_steps,
        )
        return list(step(context))

    return opening


__all__ = [
    "OpeningBuilder",
    "PromptContext",
    "PromptBuilder",
    "PromptStyle",
    "DEFAULT_ENV",
    "get_prompt_style",
    "opening_builder",
    "prompt_names",
    "prompt_styles",
    "register_prompt_style",
]


def _describe(observation: Any) -> tuple[str, str]:
    """(goal, text) of an observation whose environment describes none of its own."""
    return getattr(observation, "goal", "") or "", getattr(observation, "text", "") or ""
