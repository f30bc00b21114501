"""Every name kept for old callers, in one place: where it lives now and when it goes.

A module that once offered a name that now lives elsewhere ends with

    __getattr__ = deprecated_names(__name__)

and an old import keeps working while it warns with `EnvharnessDeprecationWarning`, which
names the import path to use and the version that removes the old one (`REMOVED_IN`). The
targets are written as "module:attribute" strings, so this module imports nothing of the
package: any layer may use it (tests/test_layers.py).

This is also the one module outside `envs/` and `cli/` that names an environment: the
browser-named helpers from before every environment was served the same way.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

#: The release that removes the names below (this one is 0.1; the next minor keeps them).
REMOVED_IN = "0.3.0"

_TRL = "envharness.integrations.trl"
_BROWSER = "browsergym"


class EnvharnessDeprecationWarning(DeprecationWarning):
    """An old envharness name was used; the message says what replaces it."""


#: module -> {old name: "module:attribute" it is now, imported from that module}
MOVED: dict[str, dict[str, str]] = {
    f"{_TRL}.training": {
        "EnvRef": f"{_TRL}.prompting:EnvRef",
        "agent_env_url": f"{_TRL}.servers:agent_env_url",
        "check_config": f"{_TRL}.checks:check_config",
        "check_loss_fits_upfront": f"{_TRL}.grpo_args:check_loss_fits_upfront",
        "check_model_spec": f"{_TRL}.loading:check_model_spec",
        "env_clients": f"{_TRL}.servers:env_clients",
        "evaluate": f"{_TRL}.evaluate:evaluate",
        "grpo_config": f"{_TRL}.grpo_args:grpo_config",
        "load_model": f"{_TRL}.loading:load_model",
        "loss_passes": f"{_TRL}.grpo_args:loss_passes",
        "mix_clients": f"{_TRL}.servers:mix_clients",
        "prompt_options": f"{_TRL}.prompting:prompt_options",
        "reward_functions": f"{_TRL}.prompting:reward_functions",
        "train_server_options": f"{_TRL}.servers:train_server_options",
        "_check": "envharness._deprecated:check_train_config",
    },
    "envharness.envs.browsergym.harness": {
        name: f"envharness.envs.browsergym.sessions:{name}"
        for name in (
            "action_instructions",
            "build_browsergym_action_str",
            "format_observation",
            "resolve_task",
        )
    },
    "envharness.envs.textarena.harness": {
        name: f"envharness.envs.textarena.sessions:{name}"
        for name in ("SEND_TOOL", "move_of", "opening_text", "resolve_task")
    },
    f"{_TRL}.rollout": {
        "RolloutFunc": f"{_TRL}.layers:RolloutFunc",
        **{
            name: f"{_TRL}.rewards:{name}"
            for name in ("REWARD_FUNCS", "reward_max", "reward_mean", "reward_success", "reward_sum")
        },
    },
    "envharness.fleet.router": {"ServerLostError": "envharness.fleet.errors:ServerLostError"},
    f"{_TRL}.kinds": {"PlanRow": "envharness.harness.plan:PlanRow"},
    _TRL: {
        "build_browsergym_rollout_func": "envharness._deprecated:build_browsergym_rollout_func",
        "browser_clients": "envharness._deprecated:browser_clients",
        "browsergym_environment_factory": "envharness._deprecated:browsergym_environment_factory",
        "TRAIN_SERVER_OPTIONS": "envharness._deprecated:train_server_options",
    },
}

#: What replaces an old name whose replacement is a call, not the same object under a new path.
USE_INSTEAD: dict[str, str] = {
    f"{_TRL}.training._check": f"check_config(config) from {_TRL}.checks",
    f"{_TRL}.build_browsergym_rollout_func": f'build_env_rollout_func("browsergym", ...) from {_TRL}',
    f"{_TRL}.browser_clients": f'env_clients("browsergym", ...) from {_TRL}.servers',
    f"{_TRL}.browsergym_environment_factory": f'environment_factory("browsergym", ...) from {_TRL}.environment',
    f"{_TRL}.TRAIN_SERVER_OPTIONS": f'train_server_options("browsergym") from {_TRL}.servers',
}

#: Old constants now computed by a call: the value is the target's result.
COMPUTED = {f"{_TRL}.TRAIN_SERVER_OPTIONS"}

#: `PromptContext`'s field names from when per-step prompts were the browser's -> their names now.
PROMPT_CONTEXT_FIELDS = {"axtree": "text", "axtree_token_budget": "text_token_budget"}

# Names in what users hold rather than import: the eval flag users know for
# `EvalConfig.observation_tokens`, and config.json's key for it (run folders written with it
# resume). They are read without a warning; a run folder keeps its keys.
OBSERVATION_TOKENS_FLAG = "--axtree-tokens"
#: Field name -> config.json key, where the file keeps an older name.
FILE_KEYS = {"observation_tokens": "axtree_tokens"}


def message(old: str, new: str) -> str:
    """The warning's words: what to use instead and when the old name goes."""
    return f"{old} is deprecated and will be removed in envharness {REMOVED_IN}: use {new}"


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def deprecated_names(module: str) -> Callable[[str], Any]:
    """`module`'s `__getattr__`: its old names, each with a warning; AttributeError for others."""
    moved = MOVED[module]

    def __getattr__(name: str) -> Any:
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        old = f"{module}.{name}"
        now, _, attribute = target.partition(":")
        new = USE_INSTEAD.get(old, f"from {now} import {attribute}")
        warnings.warn(message(old, new), EnvharnessDeprecationWarning, stacklevel=2)
        value = _load(target)
        return value() if old in COMPUTED else value

    return __getattr__


def old_field(owner: object, name: str, fields: dict[str, str]) -> Any:
    """An object's attribute under its old name (`fields`: old -> new), with a warning."""
    new = fields.get(name)
    if new is None:
        raise AttributeError(f"{type(owner).__name__!r} object has no attribute {name!r}")
    kind = type(owner).__name__
    warnings.warn(message(f"{kind}.{name}", f"{kind}.{new}"), EnvharnessDeprecationWarning, stacklevel=3)
    return getattr(owner, new)


# The old helpers whose replacement takes the environment's name.


def build_browsergym_rollout_func(
    client_factory: Callable[[], Any], *, default_task: str | None = "click-test", **kwargs: Any
) -> Any:
    """`build_env_rollout_func("browsergym", ...)`."""
    build = _load(f"{_TRL}.rollout:build_env_rollout_func")
    return build(_BROWSER, client_factory, default_task=default_task, **kwargs)


def browser_clients(env_url: str | None = None, **kwargs: Any) -> Any:
    """`env_clients("browsergym", ...)`."""
    return _load(f"{_TRL}.servers:env_clients")(_BROWSER, env_url, **kwargs)


def browsergym_environment_factory(
    client_factory: Callable[[], Any], *, task: str = "click-test", **options: Any
) -> Any:
    """`environment_factory("browsergym", ...)`."""
    options.pop("max_observation_chars", None)  # the session's own bound applies
    factory = _load(f"{_TRL}.environment:environment_factory")
    return factory(_BROWSER, client_factory, task=task, **options)


def train_server_options() -> dict[str, Any]:
    """The browser's `train_server_options`, which `TRAIN_SERVER_OPTIONS` held."""
    return _load(f"{_TRL}.servers:train_server_options")(_BROWSER)


def check_train_config(config: Any, env: Any = None, *, model_given: bool = False) -> Any:
    """`train`'s checks without training (`check_config`)."""
    return _load(f"{_TRL}.checks:check_config")(config, model=object() if model_given else None)
