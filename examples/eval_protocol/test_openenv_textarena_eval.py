"""Eval Protocol's OpenEnv TextArena example (the `from_docker_image` form of its OpenEnv page),
run against envharness: no Docker engine is needed, the `textarena-env:latest` image is served
locally by `envharness serve textarena` with the same `TEXTARENA_*` variables.

What differs from the page: the imports (envharness's `OpenEnvRolloutProcessor` and
`TextArenaEnv`), the model (an envharness model name), and one line of the action parser: the
page's parser strips the square brackets from `[crane]`, and TextArena's Wordle refuses a guess
without them ("wrong format"), so every game would end in an invalid move. Here the bracketed
move is sent as the game asks.

    pytest examples/eval_protocol/test_openenv_textarena_eval.py          # scripted solver
    pytest ... --ep-input-param model=embedded                           # the offline model
    TEXTARENA_ENV_ID=GuessTheNumber-v0 pytest ...                        # another game
"""

import os
import re
from typing import Any

import pytest
from eval_protocol.models import EvaluateResult, EvaluationRow, Message
from eval_protocol.pytest import evaluation_test

from envharness.integrations.eval_protocol import OpenEnvRolloutProcessor

try:
    from envharness.envs.textarena import AsyncTextArenaEnv as TextArenaEnv  # provided by envharness

    _HAS_TEXTARENA = True
except Exception:
    _HAS_TEXTARENA = False


def textarena_dataset_to_rows(data: list[dict[str, Any]]) -> list[EvaluationRow]:
    """One EvaluationRow per {"id", "prompt"} entry."""
    return [
        EvaluationRow(messages=[Message(role="user", content=str(row.get("prompt", "Let's play")))])
        for row in data
    ]


def textarena_prompt_builder(observation: Any, step: int, history: list[str]) -> str:
    """The game's prompt and its latest messages."""
    lines = []
    for msg in (getattr(observation, "messages", None) or [])[-5:]:
        content = getattr(msg, "content", "")
        if content:
            lines.append(
                f"[{getattr(msg, 'category', 'MESSAGE')}] Player {getattr(msg, 'sender_id', '?')}: {content}"
            )
    conversation = "\n".join(lines) or "[No messages yet]"
    return (
        f"Step {step}\n"
        f"Game: {getattr(observation, 'prompt', '')}\n\n"
        f"Conversation:\n{conversation}\n\n"
        "Your move (reply with your guess or action):"
    )


BRACKETED = re.compile(r"\[[^\]]+\]")


def textarena_action_parser(response_text: str):
    """The model's reply -> TextArenaAction: the first [bracketed] move, brackets kept."""
    from envharness.envs.textarena import TextArenaAction

    text = response_text.strip() if isinstance(response_text, str) else ""
    match = BRACKETED.search(text)
    return TextArenaAction(message=(match.group(0) if match else text) or "pass")


TEXTARENA_INLINE_DATA: list[dict[str, Any]] = [
    {"id": "wordle-1", "prompt": "Play Wordle"},
    {"id": "wordle-2", "prompt": "Play Wordle"},
    {"id": "wordle-3", "prompt": "Play Wordle"},
]


@evaluation_test(  # type: ignore[misc]
    input_rows=[textarena_dataset_to_rows(TEXTARENA_INLINE_DATA)],
    completion_params=[
        {
            "temperature": 0.7,
            "max_tokens": 32,
            # an envharness model: "scripted", "embedded" or "envharness:<spec>"; any other
            # name goes through LiteLLM as before. Override: --ep-input-param model=embedded
            "model": "scripted",
        }
    ],
    num_runs=1,
    max_concurrent_rollouts=2,
    mode="pointwise",
    rollout_processor=(
        OpenEnvRolloutProcessor(
            env_client_cls=TextArenaEnv if _HAS_TEXTARENA else None,  # type: ignore
            docker_image=os.getenv("TEXTARENA_DOCKER_IMAGE", "textarena-env:latest"),
            env_vars={
                "TEXTARENA_ENV_ID": os.getenv("TEXTARENA_ENV_ID", "Wordle-v0"),
                "TEXTARENA_NUM_PLAYERS": os.getenv("TEXTARENA_NUM_PLAYERS", "1"),
            },
            task_var="TEXTARENA_ENV_ID",
            tasks=None,  # one game per server, chosen by TEXTARENA_ENV_ID
            prompt_builder=textarena_prompt_builder,
            action_parser=textarena_action_parser,
            timeout_ms=10000,
            num_generations=1,
            max_steps=8,
        )
        if _HAS_TEXTARENA
        else None
    ),
)
def test_openenv_textarena_eval(row: EvaluationRow) -> EvaluationRow:
    """Score = the game's total reward, clipped to [0, 1] (Wordle: 1.0 for a win, the share of
    letters found for a loss)."""
    if not _HAS_TEXTARENA:
        pytest.skip("envharness (envharness.envs.textarena) is not installed; skipping TextArena test.")

    extra = getattr(row.execution_metadata, "extra", None)
    step_rewards = [float(r) for r in (extra.get("step_rewards") or [])] if isinstance(extra, dict) else []
    total_reward = float(sum(step_rewards))
    row.evaluation_result = EvaluateResult(
        score=max(0.0, min(1.0, total_reward)),
        reason=f"TextArena total reward={total_reward:.2f} over {len(step_rewards)} steps",
    )
    return row
