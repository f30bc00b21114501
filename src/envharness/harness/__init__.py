"""The harness runtime: tool-calling sessions over environments, and concurrent rollouts.

Names follow OpenEnv's `openenv.core.harness` so that its tutorial code runs here with
only its imports changed. The map:

- `session.py`: `ResourceSession`, `ResourceSessionFactory`; `step_session.py`:
  `StepEnvSessionAdapter` (any reset/step client as a session); `tools.py`: tool specs.
- `adapter.py`: `MCPHarnessAdapter`, the white-box loop (model step -> tool calls -> tool messages).
- `model_step.py`: sync/async model steps, `BatchingModelStep` (one backend call per batch).
- `tokens.py`: exact multi-turn token sequences and the env mask.
- `rollout.py`: `run_episodes` (async, concurrent) and `build_harness_rollout_func` (TRL).
- `records.py`: episode records as versioned JSONL.
- `define.py`: `define_environment`, a playable environment from its `Environment` class.
"""

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.adapter import HarnessAdapter, MCPHarnessAdapter, tool_message_content
from envharness.harness.define import define_environment
from envharness.harness.model_step import (
    ArrivingSessions,
    BatchingModelStep,
    EpisodeModelStep,
    ModelStep,
    call_model_step,
)
from envharness.harness.records import (
    RECORD_VERSION,
    EpisodeRecord,
    EpisodeRecordWriter,
    iter_records,
    read_records,
    record_from_result,
    write_records,
)
from envharness.harness.rollout import (
    build_harness_rollout_func,
    resolve_env_reward,
    run_episode,
    run_episodes,
)
from envharness.harness.session import (
    ClientSessionFactory,
    ResourceSession,
    ResourceSessionFactory,
    call_session,
    create_session,
)
from envharness.harness.step_session import StepEnvSessionAdapter
from envharness.harness.tokens import TokenAssembler
from envharness.harness.tool_parsing import parse_json_tool_calls
from envharness.harness.tools import RESERVED_TOOL_NAMES, tool_spec, validate_arguments
from envharness.harness.types import (
    HarnessRolloutResult,
    HarnessRunLimits,
    LLMResponse,
    Message,
    ModelStepResult,
    RolloutEvent,
    ToolCall,
    ToolResult,
    ToolTraceEntry,
    VerifyResult,
)

__all__ = [
    "RECORD_VERSION",
    "RESERVED_TOOL_NAMES",
    "ArrivingSessions",
    "BatchingModelStep",
    "define_environment",
    "EpisodeModelStep",
    "EpisodeRecord",
    "EpisodeRecordWriter",
    "HarnessAdapter",
    "HarnessRolloutResult",
    "HarnessRunLimits",
    "LLMResponse",
    "MCPHarnessAdapter",
    "Message",
    "ModelStep",
    "ModelStepResult",
    "ResourceSession",
    "ResourceSessionFactory",
    "ClientSessionFactory",
    "RolloutEvent",
    "StepEnvSessionAdapter",
    "TokenAssembler",
    "ToolCall",
    "ToolResult",
    "ToolTraceEntry",
    "VerifyResult",
    "build_harness_rollout_func",
    "call_model_step",
    "call_session",
    "create_session",
    "iter_records",
    "parse_json_tool_calls",
    "read_records",
    "record_from_result",
    "resolve_env_reward",
    "run_coroutine_sync",
    "run_episode",
    "run_episodes",
    "tool_message_content",
    "tool_spec",
    "validate_arguments",
    "write_records",
]
