"""The wire: what travels between clients and servers, in OpenEnv's format.

WebSocket `/ws` (one environment per connection):
    client -> {"type": "reset" | "step" | "state" | "close", "data": {...}}
    server -> {"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}
              {"type": "state", "data": {...}}
              {"type": "error", "data": {"message": "...", "code": "..."}}
HTTP: POST /reset, POST /step, GET /state, GET /health, GET /metadata, GET /schema.
HTTP errors answer {"detail": {"message": "...", "code": "..."}} with a fitting status.

The OpenEnv names are kept (`openenv.core.env_server.types`); envharness adds a few
error codes and session counters to /health, which OpenEnv clients ignore.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envharness.core import wire_json
from envharness.core.types import Observation
from envharness.core.wire_json import JSONLimitError


class ErrorCode(str, Enum):  # noqa: UP042 - OpenEnv's own shape: str() and formatting stay as theirs
    """Error codes in `{"type": "error", "data": {"code": ...}}` and HTTP error bodies."""

    # OpenEnv's codes (WSErrorCode)
    INVALID_JSON = "INVALID_JSON"
    UNKNOWN_TYPE = "UNKNOWN_TYPE"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    EXECUTION_ERROR = "EXECUTION_ERROR"
    CAPACITY_REACHED = "CAPACITY_REACHED"
    FACTORY_ERROR = "FACTORY_ERROR"
    SESSION_ERROR = "SESSION_ERROR"
    # envharness additions
    MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
    NOT_RESET = "NOT_RESET"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    IDLE_TIMEOUT = "IDLE_TIMEOUT"
    SHUTTING_DOWN = "SHUTTING_DOWN"


#: HTTP status for each error code.
HTTP_STATUS = {
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.UNKNOWN_TYPE: 400,
    ErrorCode.VALIDATION_ERROR: 422,
    ErrorCode.EXECUTION_ERROR: 500,
    ErrorCode.CAPACITY_REACHED: 503,
    ErrorCode.FACTORY_ERROR: 500,
    ErrorCode.SESSION_ERROR: 500,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.NOT_RESET: 409,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.IDLE_TIMEOUT: 408,
    ErrorCode.SHUTTING_DOWN: 503,
}


class ProtocolError(Exception):
    """An error the server reports to the client as a structured error."""

    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def to_data(self) -> dict[str, Any]:
        return {"message": self.message, "code": self.code.value, **self.extra}


def validation_error(prefix: str, exc: ValidationError) -> ProtocolError:
    """A pydantic error in words (`field: problem; ...`) plus the structured list."""
    words = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    return ProtocolError(ErrorCode.VALIDATION_ERROR, f"{prefix}: {words}", errors=errors)


# -- WebSocket messages ---------------------------------------------------------------
class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetMessage(_Message):
    type: Literal["reset"] = "reset"
    data: dict[str, Any] = Field(default_factory=dict, description="seed, episode_id and env options")


class StepMessage(_Message):
    type: Literal["step"] = "step"
    data: dict[str, Any] = Field(..., description="The action's fields")


class StateMessage(_Message):
    type: Literal["state"] = "state"
    data: dict[str, Any] = Field(default_factory=dict)


class CloseMessage(_Message):
    type: Literal["close"] = "close"
    data: dict[str, Any] = Field(default_factory=dict)


CLIENT_MESSAGES: dict[str, type[_Message]] = {
    "reset": ResetMessage,
    "step": StepMessage,
    "state": StateMessage,
    "close": CloseMessage,
}


def parse_client_message(raw: str | bytes) -> ResetMessage | StepMessage | StateMessage | CloseMessage:
    """Parse one client frame; raises `ProtocolError` with the right code."""
    try:
        payload = wire_json.loads(raw)
    except JSONLimitError as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"Refused JSON: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(ErrorCode.INVALID_JSON, f"Invalid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ProtocolError(ErrorCode.INVALID_JSON, f"Expected a JSON object, got {type(payload).__name__}")
    kind = payload.get("type")
    model = CLIENT_MESSAGES.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ProtocolError(
            ErrorCode.UNKNOWN_TYPE,
            f"Unknown message type: {kind!r} (expected one of {', '.join(CLIENT_MESSAGES)})",
        )
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise validation_error(f"Invalid {kind} message", exc) from None


def observation_message(observation: Observation) -> dict[str, Any]:
    return {"type": "observation", "data": serialize_observation(observation)}


def state_message(state: BaseModel) -> dict[str, Any]:
    return {"type": "state", "data": state.model_dump(mode="json")}


def error_message(error: ProtocolError) -> dict[str, Any]:
    return {"type": "error", "data": error.to_data()}


def serialize_observation(observation: Observation) -> dict[str, Any]:
    """OpenEnv's layout: reward and done beside the observation, metadata in both places."""
    result = {
        "observation": observation.model_dump(mode="json", exclude={"reward", "done"}),
        "reward": observation.reward,
        "done": observation.done,
    }
    if observation.metadata:
        result["metadata"] = result["observation"]["metadata"]
    return result


# -- HTTP bodies ----------------------------------------------------------------------
#: The largest seed a reset takes (a signed 64-bit integer: what every RNG downstream holds).
MAX_SEED = 2**63 - 1


class ResetRequest(BaseModel):
    """POST /reset body; extra fields are env options. A task, when named, is a name (not ''),
    and `task_name` (OpenEnv's BrowserGym spelling) beside `task` must say the same."""

    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    episode_id: str | None = Field(default=None, max_length=255)

    @model_validator(mode="after")
    def _task_named_once(self) -> ResetRequest:
        named = {
            k: v for k, v in (self.model_extra or {}).items() if k in ("task", "task_name") and v is not None
        }
        for key, value in named.items():
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{key} must be a task's name, got {value!r}")
        if len(set(named.values())) > 1:
            raise ValueError(
                f"task {named['task']!r} and task_name {named['task_name']!r} differ: name one task"
            )
        return self


class StepRequest(BaseModel):
    """POST /step body (OpenEnv's): the action plus optional bookkeeping."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)


class HealthResponse(BaseModel):
    """GET /health. OpenEnv sends only `status`; the counters are envharness's."""

    status: Literal["healthy", "shutting_down"] = "healthy"
    env: str
    active_sessions: int
    max_sessions: int
    live_environments: int
    sessions_opened: int
    sessions_closed: int


class SchemaResponse(BaseModel):
    """GET /schema: JSON schemas of action, observation and state (OpenEnv's shape)."""

    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]
