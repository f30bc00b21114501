"""envharness: fast RL environments for LLM agents, OpenEnv-compatible."""

__version__ = "0.1.0"
