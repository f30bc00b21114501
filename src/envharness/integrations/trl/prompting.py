"""What an environment lends a training run: its prompt styles (as session factory options)
and its reward functions, looked up through its harness, never by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envharness.core.registry import DEFAULT_ENV, ResolvedEnv, load_target, resolved
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.rewards import REWARD_FUNCS
from envharness.prompts import PromptStyle, get_prompt_style, opening_builder
from envharness.prompts.text import tokenizer_counter

#: An environment by name, or as the run resolved it (`core.registry.ResolvedEnv`): the entry
#: point resolves it once, the helpers below take either.
EnvRef = str | ResolvedEnv | None

__all__ = ["EnvRef", "prompt_options", "prompt_style", "resolved", "reward_functions"]


def prompt_style(style: str, env: EnvRef = None) -> PromptStyle:
    """A prompt style of the environment, or a `TrainSetupError` naming what it has."""
    try:
        return get_prompt_style(style, env)
    except ValueError as exc:
        raise TrainSetupError(str(exc)) from None


def prompt_options(style: str, tokenizer: Any = None, env: EnvRef = None) -> dict[str, Any]:
    """Session factory options for a prompt style of the environment: the opening messages
    `envharness eval --prompt STYLE` also gives (observation text budgets counted with
    `tokenizer`, as eval counts them with the model's)."""
    chosen = prompt_style(style, env)
    describe = resolved(env if env is not None else DEFAULT_ENV).require_harness().describe_observation
    options: dict[str, Any] = {
        "prompt_builder": opening_builder(
            chosen, count_tokens=tokenizer_counter(tokenizer), describe=describe
        )
    }
    if chosen.observation_text is not None:  # how the style shows later observations
        options["observation_text"] = chosen.observation_text
    return options


def reward_functions(env: EnvRef = DEFAULT_ENV) -> dict[str, Callable[..., Any]]:
    """The rewards `--rewards` picks from: the generic ones (success, sum, mean, max of the
    environment's own reward) and the environment's shaped ones (`EnvHarness.reward_functions`)."""
    harness = resolved(env).require_harness()
    shaped = load_target(harness.reward_functions) if harness.reward_functions else {}
    return {**REWARD_FUNCS, **shaped}
