import re
from typing import Any

import pytest
from eval_protocol.models import EvaluateResult, EvaluationRow, Message
from eval_protocol.pytest import evaluation_test

from envharness.integrations.eval_protocol import OpenEnvRolloutProcessor


def browsergym_dataset_to_rows(data: list[dict[str, Any]]) -> list[EvaluationRow]:
    """Adapt simple dict rows into EvaluationRow objects."""
    rows: list[EvaluationRow] = []
    for row in data:
        prompt = str(row.get("prompt", "start"))
        rows.append(EvaluationRow(messages=[Message(role="user", content=prompt)]))
    return rows


ACTION_PATTERN = re.compile(r"[A-Za-z_]+\s*\(.*\)", re.DOTALL)


def prompt_builder(observation: Any, step: int, history: list[str]) -> str:
    """Turn a BrowserGym observation into a text prompt."""
    goal = getattr(observation, "goal", "") or ""
    url = getattr(observation, "url", "") or "(unknown)"
    error_note = "Yes" if getattr(observation, "last_action_error", False) else "No"
    text = (getattr(observation, "text", "") or "")[:2048]
    return (
        f"Step: {step}\n"
        f"Goal: {goal}\n"
        f"Current URL: {url}\n"
        f"Previous steps:\n" + ("\n".join(history[-4:]) if history else "None") + "\n"
        f"Last action error: {error_note}\n\n"
        "Reply with a single BrowserGym action, e.g., click('13') or noop().\n\n"
        f"Page excerpt:\n{text}\n\n"
        "Reply with exactly one BrowserGym action string."
    ).strip()


def action_parser(response_text: str):
    """Parse model output into a BrowserGym action."""
    try:
        from envharness.envs.browsergym import BrowserGymAction  # provided by envharness
    except Exception:
        pytest.skip("envharness (envharness.envs.browsergym) is not installed; skipping BrowserGym test.")
        raise

    if not response_text:
        return BrowserGymAction(action_str="noop()")

    for raw in response_text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = ACTION_PATTERN.search(line)
        if m:
            return BrowserGymAction(action_str=m.group(0))

    m = ACTION_PATTERN.search(response_text)
    if m:
        return BrowserGymAction(action_str=m.group(0))
    return BrowserGymAction(action_str="noop()")


try:
    from envharness.envs.browsergym import AsyncBrowserGymEnv as BrowserGymEnv  # provided by envharness

    _HAS_BROWSERGYM = True
except Exception:
    _HAS_BROWSERGYM = False


BROWSERGYM_INLINE_DATA: list[dict[str, Any]] = [
    {"id": "click-test", "prompt": "start"},
]


@evaluation_test(  # type: ignore[misc]
    input_rows=[browsergym_dataset_to_rows(BROWSERGYM_INLINE_DATA)],
    completion_params=[
        {
            "temperature": 0.0,
            "max_tokens": 512,
            # an envharness model: "scripted", "embedded" or "envharness:<spec>"; any other
            # name goes through LiteLLM as before. Override: --ep-input-param model=embedded
            "model": "scripted",
        }
    ],
    num_runs=1,
    max_concurrent_rollouts=1,
    mode="pointwise",
    rollout_processor=(
        OpenEnvRolloutProcessor(
            env_client_cls=BrowserGymEnv if _HAS_BROWSERGYM else None,
            prompt_builder=prompt_builder,
            action_parser=action_parser,
            tasks=["click-test"],  # each episode's task goes to reset(task=...); no Docker image
            timeout_ms=10000,
            num_generations=1,
            max_steps=5,
        )
        if _HAS_BROWSERGYM
        else None
    ),
)
def test_openenv_browsergym_eval(row: EvaluationRow) -> EvaluationRow:
    """
    Example: run a BrowserGym MiniWoB environment via OpenEnvRolloutProcessor.
    """
    if not _HAS_BROWSERGYM:
        pytest.skip("OpenEnv (envs.browsergym_env) is not installed; skipping BrowserGym test.")

    # The rollout processor appends per-step rewards in a sentinel system message:
    # "__ep_step_rewards__:[r0, r1, ...]".
    step_rewards: list[float] = []
    try:
        for msg in row.messages or []:
            if (
                msg.role == "system"
                and isinstance(msg.content, str)
                and msg.content.startswith("__ep_step_rewards__:")
            ):
                import json as _json

                payload = msg.content.split(":", 1)[1]
                step_rewards = _json.loads(payload) or []
                break
    except Exception:
        step_rewards = []

    total = float(sum(step_rewards)) if step_rewards else 0.0
    # Map total reward into [0, 1]
    score = max(0.0, min(1.0, total))
    reason = f"Total reward={total:.2f} across {len(step_rewards)} steps"
    row.evaluation_result = EvaluateResult(score=score, reason=reason)
    return row
