"""envharness: fast RL environments for LLM agents, OpenEnv-compatible.

What an environment's author needs, from one place (resolved on first use, so this import
stays light):

    from envharness import Action, Environment, InvalidAction, Observation, State, define_environment

and `ToolCall`, what a `tool_call_parser` of your own returns.
"""

from envharness.core.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "Action": "core.types",
    "Observation": "core.types",
    "State": "core.types",
    "Environment": "core.environment",
    "InvalidAction": "core.errors",
    "ToolCall": "harness.types",
    "define_environment": "harness.define",
    "register_environment": "core.registry",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports(__name__, _EXPORTS)
