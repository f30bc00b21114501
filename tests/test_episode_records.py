"""An episode's record: what `episodes.jsonl` holds, and the sync bridge every rollout returns through."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from envharness.core.concurrency import run_coroutine_sync
from envharness.harness.records import EpisodeRecord, record_from_result
from envharness.harness.types import HarnessRolloutResult, RolloutEvent, ToolResult, ToolTraceEntry


def _result() -> HarnessRolloutResult:
    call = ToolTraceEntry("click", {"bid": "13"}, ToolResult(data="ok", done=True, metadata={"reward": 1.0}))
    return HarnessRolloutResult(
        messages=[
            {"role": "user", "content": "Click the button."},
            {"role": "assistant", "content": "click('13')"},
        ],
        tool_trace=[call],
        events=[RolloutEvent("tool_call", {"turn": 1, "elapsed_s": 0.01})],
        done=True,
        metrics={"turns": 1, "prompt_tokens": 5, "model_tokens": 3},
        prompt_ids=[1, 2, 3, 4, 5],
        completion_ids=[6, 7, 8],
        logprobs=[-0.5, -0.25, -0.125],
        env_mask=[1, 1, 1],
        task="click-test",
        seed=7,
        episode_id="e-1",
        env_reward=1.0,
    )


def test_a_records_dict_is_its_fields_and_reads_back_equal():
    record = record_from_result(_result(), include_tokens=True)
    data = record.to_dict()
    assert data == dataclasses.asdict(record)
    assert data["token_ids"]["completion_ids"] == [6, 7, 8]
    assert data["tool_calls"][0]["arguments"] == {"bid": "13"}
    assert EpisodeRecord.from_dict(json.loads(json.dumps(data))) == record


def test_a_record_does_not_change_when_its_result_does():
    result = _result()
    record = record_from_result(result)
    result.messages.append({"role": "user", "content": "later"})
    result.metrics["turns"] = 9
    assert len(record.to_dict()["messages"]) == 2
    assert record.to_dict()["metrics"]["turns"] == 1


async def _value(value):
    await asyncio.sleep(0)
    return value


async def _fails():
    await asyncio.sleep(0)
    raise ValueError("no episode")


def test_the_sync_bridge_returns_the_value_and_raises_the_error_from_sync_code():
    results = [_result() for _ in range(3)]
    assert run_coroutine_sync(_value(results)) is results
    with pytest.raises(ValueError, match="no episode"):
        run_coroutine_sync(_fails())


def test_the_sync_bridge_works_inside_a_running_loop():
    async def caller():
        return run_coroutine_sync(_value(42))

    assert asyncio.run(caller()) == 42
