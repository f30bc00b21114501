"""Success says what it means: a MiniWoB answer that earns part of the task's score is not a
success. find-greatest pays a raw 0.1 for a wrong card; BrowserGym's reward (raw > 0) makes
that 1.0, which envharness keeps as the reward, while success needs the task's full raw score,
and the episode is counted as partial credit: in the records, in eval's table, and in the
`success` that training rewards."""

from __future__ import annotations

import re

from envharness.core.launchers import LocalServer
from envharness.envs.browsergym import BrowserGymAction
from envharness.envs.browsergym.client import BrowserGymEnv
from envharness.envs.browsergym.sessions import _verify
from envharness.eval.stats import format_table, summarize

CARD = re.compile(
    r'<div bid="(\w+)" class="card hidden" data-index="\d">\s*<span bid="\w+" class="card-value">\s*(-?\d+)'
)


def play_find_greatest(env, pick: str):
    """Turn over the greatest (or the smallest) card and submit; returns the last step's result."""
    result = env.reset(task="find-greatest", seed=7)
    cards = {bid: int(value) for bid, value in CARD.findall(result.observation.pruned_html)}
    assert len(cards) == 3, result.observation.pruned_html[:1500]
    chosen = (max if pick == "greatest" else min)(cards, key=cards.get)
    submit = re.search(r"\[(\w+)\] button 'Submit'", result.observation.axtree_txt).group(1)
    result = env.step(BrowserGymAction(action_str=f"click('{chosen}')"))
    assert result.observation.last_action_error == ""
    return env.step(BrowserGymAction(action_str=f"click('{submit}')"))


def test_a_wrong_card_earns_browsergyms_reward_but_is_partial_credit_not_success():
    with (
        LocalServer("browsergym", extra_properties=False) as server,
        BrowserGymEnv(base_url=server.base_url) as env,
    ):
        right, wrong = play_find_greatest(env, "greatest"), play_find_greatest(env, "smallest")
    assert right.done and wrong.done
    assert (right.reward, wrong.reward) == (1.0, 1.0)  # BrowserGym's reward: raw > 0
    verdicts = [_verify([], None, result, None).metrics for result in (right, wrong)]
    assert verdicts[0]["raw_reward"] == 1.0 and verdicts[0]["success"] and not verdicts[0]["partial_credit"]
    assert verdicts[1]["raw_reward"] == 0.1 and not verdicts[1]["success"] and verdicts[1]["partial_credit"]
    records = [{"task": "find-greatest", "env_reward": 1.0, "verify_metrics": v} for v in verdicts]
    (row,) = summarize(records)
    assert (row.episodes, row.successes, row.partial_credit, row.mean_reward) == (2, 1, 1, 1.0)
    table = format_table([row])
    assert table.splitlines()[0].split()[-1] == "partial" and table.splitlines()[2].split()[-1] == "1"


def test_eval_counts_partial_credit_apart(tmp_path):
    """Full scores are successes, with the raw reward in each record and no partial column."""
    from envharness.cli import main

    assert (
        main(
            [
                "eval",
                "--model",
                "scripted",
                "--tasks",
                "click-test",
                "--episodes",
                "2",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 0
    )
    import json

    (task,) = json.loads((tmp_path / "summary.json").read_text())["tasks"]
    assert task["successes"] == 2 and task["partial_credit"] == 0
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert all(r["verify_metrics"]["raw_reward"] == 1.0 and r["verify_metrics"]["success"] for r in records)
