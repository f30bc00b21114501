"""OpenEnv compatibility: its sessions run in our runtime, ours in its adapter, same result fields."""

from __future__ import annotations

import dataclasses

import openenv.core.harness as oe
from openenv.core.env_server.mcp_types import Tool
from openenv.core.llm_client import LLMResponse as OELLMResponse, ToolCall as OEToolCall
from test_harness_runtime import CounterFactory, ScriptedTokenStep, call, script_for

from envharness import harness as eh


class OpenEnvCounter(oe.ResourceSession):
    """A session written against OpenEnv's API (pydantic Tool objects, sync methods)."""

    def __init__(self):
        self.total, self.closed = 0, False

    def initial_messages(self):
        return [{"role": "user", "content": "count"}]

    def list_tools(self):
        return [
            Tool(
                name="add",
                description="add n",
                input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            )
        ]

    def call_tool(self, name, arguments):
        self.total += arguments["n"]
        return oe.ToolResult(data={"total": self.total, "reward": float(self.total)}, done=self.total >= 3)

    def verify(self, transcript, final_state=None):
        return oe.VerifyResult(env_reward=float(self.total), done=self.total >= 3)

    def close(self):
        self.closed = True


class OpenEnvCounterFactory(oe.ResourceSessionFactory):
    def create(self, task, seed=None, episode_id=None):
        return OpenEnvCounter()


def test_openenv_sessions_run_in_our_runtime():
    rollout_func = eh.build_harness_rollout_func(
        session_factory=OpenEnvCounterFactory(),
        harness_adapter=eh.MCPHarnessAdapter(),
        model_step_builder=lambda trainer, session: ScriptedTokenStep(
            [call("add", n=1), call("add", n="x"), call("add", n=2)]
        ),
    )
    out = rollout_func(["a", "b"], None)
    assert out["env_reward"] == [3.0, 3.0]
    assert all(m.get("error") is None for m in out["verify_metrics"])


def test_our_sessions_run_in_openenv_adapter_with_its_own_types():
    session = CounterFactory().create("ep2")
    replies = iter(script_for("ep2"))

    def model_step(messages, tools, sampling):
        assert [t["name"] for t in tools] == ["add", "finish"]
        text = next(replies)
        [c] = eh.parse_json_tool_calls(text)
        return oe.ModelStepResult(
            response=OELLMResponse(content=text, tool_calls=[OEToolCall(id=c.id, name=c.name, args=c.args)])
        )

    result = oe.MCPHarnessAdapter().run_white_box(model_step, session, oe.HarnessRunLimits(max_turns=5))
    assert result.done and session.reward == 3.0
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool"] * 1 + [
        "assistant",
        "tool",
    ] * 2


def test_our_types_carry_every_openenv_field():
    pairs = [
        (oe.HarnessRolloutResult, eh.HarnessRolloutResult),
        (oe.HarnessRunLimits, eh.HarnessRunLimits),
        (oe.ModelStepResult, eh.ModelStepResult),
        (oe.ToolResult, eh.ToolResult),
        (oe.VerifyResult, eh.VerifyResult),
        (oe.ToolTraceEntry, eh.ToolTraceEntry),
        (oe.RolloutEvent, eh.RolloutEvent),
        (OELLMResponse, eh.LLMResponse),
        (OEToolCall, eh.ToolCall),
    ]
    for theirs, ours in pairs:
        their_fields = {f.name for f in dataclasses.fields(theirs)}
        assert their_fields <= {f.name for f in dataclasses.fields(ours)}, theirs.__name__
    msg = eh.LLMResponse("hi", [eh.ToolCall("c1", "add", {"n": 1})]).to_message_dict()
    assert msg == OELLMResponse("hi", [OEToolCall("c1", "add", {"n": 1})]).to_message_dict()
