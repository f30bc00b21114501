"""The environment author's contract (docs/new_environment.md's checklist), on an arithmetic
puzzle written from the docs (`tests/countdown_env.py`): `InvalidAction` is the agent's error
and the episode goes on, any other exception is the environment's bug and ends it; success is
what the environment declares and partial credit is counted apart; `check` names the item of
the checklist that failed."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from openenv.core.generic_client import GenericEnvClient

from envharness.cli import main as cli_main
from envharness.core.client import EnvServerError
from envharness.core.launchers import LocalServer
from envharness.harness.success import episode_success, judge, partial_credit

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.timeout(300)
LONG = "1 + " * 60 + "1"


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """`countdown_env` importable here and in the servers started as child processes."""
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


def failed_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]


# -- errors the agent sees --------------------------------------------------------------------
@pytest.mark.parametrize("spec", ["countdown_env:SPEC", "countdown_env:VALUE_ERROR"])
def test_an_invalid_action_is_an_error_the_agent_reads_and_the_session_goes_on(spec):
    async def main(base_url: str) -> None:
        import countdown_env

        client = countdown_env.SPEC.client(base_url)
        async with client:
            first = await client.reset(seed=3, task="countdown-easy")
            with pytest.raises(ValueError) as refused:  # InvalidAction on this side too
                await client.step(countdown_env.CountdownAction(expression=LONG))
            assert str(refused.value).startswith("expression too long")
            assert (await client.state()).step_count == 1  # it counts
            answer = countdown_env.solve([{"content": first.observation.text}])
            result = await client.step(countdown_env.CountdownAction(expression=answer))
            assert result.reward == 1.0 and result.done

    with LocalServer(spec) as server:
        asyncio.run(main(server.base_url))


def test_openenv_generic_client_reads_the_refusal_and_the_session_goes_on():
    with (
        LocalServer("countdown_env:SPEC") as server,
        GenericEnvClient(base_url=server.base_url).sync() as env,
    ):
        env.reset(seed=1, task="countdown-easy")
        with pytest.raises(
            RuntimeError, match=r"Server error: expression too long .*\(code: EXECUTION_ERROR\)"
        ):
            env.step({"expression": LONG})
        assert env.step({"expression": "2 + 2"}).observation["text"] == "2 + 2 = 4"
        assert env.state()["step_count"] == 2


def test_any_other_exception_is_the_environments_bug(capsys):
    async def main(base_url: str) -> None:
        import countdown_env

        async with countdown_env.SPEC.client(base_url) as client:
            await client.reset(seed=3)
            with pytest.raises(EnvServerError) as crashed:
                await client.step(countdown_env.CountdownAction(expression=LONG))
            assert not isinstance(crashed.value, ValueError) and "KeyError" in crashed.value.message

    with LocalServer("countdown_env:BUGGY") as server:
        asyncio.run(main(server.base_url))
    assert cli_main(["check", "countdown_env:BUGGY", "--episodes", "1"]) == 1
    failed = failed_lines(capsys)
    assert [line.split()[1] for line in failed] == ["bad_wire_actions:", "bad_tool_calls:"], failed
    assert all("environment's bug" in line and "[checklist: errors," in line for line in failed)


def test_through_the_harness_the_refusal_is_the_tool_error_and_the_episode_wins(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--env", "countdown_env:SECOND_TRY", "--model", "scripted", "--tasks", "all"]
    assert cli_main([*argv, "--episodes", "2", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [(t["task"], t["success_rate"], t["errors"]) for t in summary["tasks"]] == [
        ("countdown-easy", 1.0, 0),
        ("countdown-hard", 1.0, 0),
        ("all", 1.0, 0),
    ]
    for line in (out / "episodes.jsonl").read_text().splitlines():
        calls = json.loads(line)["tool_calls"]
        assert len(calls) == 2 and calls[0]["error"].startswith("countdown failed: expression too long")
        assert calls[1]["error"] is None


# -- success is declared; partial credit is counted apart ----------------------------------------
def test_a_near_answer_is_partial_credit_in_evals_table_not_a_success(tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["eval", "--env", "countdown_env:NEAR_MISS", "--model", "scripted", "--tasks", "all"]
    assert cli_main([*argv, "--episodes", "2", "--out", str(out), "--no-progress"]) == 0
    table = capsys.readouterr().out
    assert "partial" in table.splitlines()[0] or any(
        line.split()[-1:] == ["partial"] for line in table.splitlines()
    )
    every = json.loads((out / "summary.json").read_text())["tasks"][-1]
    assert every["task"] == "all" and every["success_rate"] == 0.0 and every["partial_credit"] == 4
    assert 0.9 < every["mean_reward"] < 1.0  # close answers: most of the score, no success


def test_the_authors_own_success_rule_counts(tmp_path):
    out = tmp_path / "eval"
    argv = ["eval", "--env", "countdown_env:LENIENT", "--model", "scripted", "--tasks", "all"]
    assert cli_main([*argv, "--episodes", "2", "--out", str(out), "--no-progress"]) == 0
    every = json.loads((out / "summary.json").read_text())["tasks"][-1]
    assert every["success_rate"] == 1.0 and every["partial_credit"] == 0


def test_one_verdict_everywhere_success_is_counted():
    """eval's table, train's success reward, the held-out evaluation, the curriculum and the
    floor all call `harness/success.episode_success`; a session's own verdict wins."""
    from envharness.check.playground import episode_success as floor_success
    from envharness.eval.stats import is_partial_credit, is_success
    from envharness.harness.types import HarnessRolloutResult, VerifyResult
    from envharness.integrations.trl.rollout import episode_success as train_success

    for reward, metrics, won, partial in [
        (0.02, {}, False, True),  # the puzzle's answer off by 192: partial credit
        (1.0, {}, True, False),
        (0.0, {}, False, False),
        (0.6, {"success": False, "partial_credit": True}, False, True),  # a lost Wordle's letters
        (1.0, {"success": False}, False, False),  # the session's verdict wins
    ]:
        result = HarnessRolloutResult(
            env_reward=reward, verify=VerifyResult(env_reward=reward, metrics=metrics)
        )
        record = {"env_reward": reward, "verify_metrics": metrics}
        assert train_success(result) == floor_success(result) == is_success(record) == won, (reward, metrics)
        assert is_partial_credit(record) == partial_credit(metrics, reward) == partial, (reward, metrics)
    assert not episode_success({"success": True}, 1.0, error="EnvServerError: boom")
    assert judge(0.5, full_score=0.5).success and not judge(0.49, full_score=0.5).success


# -- check verifies the checklist and names the item that failed --------------------------------
def test_the_puzzle_passes_every_check_over_all_tasks(capsys):
    assert cli_main(["check", "countdown_env:SPEC", "--tasks", "all", "--episodes", "1"]) == 0
    out = capsys.readouterr().out
    assert "9 passed, 0 failed, 0 skipped" in out and "PASS  reward_range: " in out
    assert "listed tasks checked" not in out  # every task was


def test_check_says_when_it_checked_only_the_default_tasks(capsys):
    assert cli_main(["check", "countdown_env:SPEC", "--episodes", "1"]) == 0
    assert (
        "1 of 2 listed tasks checked (the default ones); --tasks all checks every one"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "spec, check, item",
    [
        ("countdown_env:OVERPAYING", "reward_range", "reward range"),
        ("countdown_env:NEAR_MISS", "scripted_policy_wins", "success"),
    ],
)
def test_a_failed_check_names_its_checklist_item(spec, check, item, capsys):
    assert cli_main(["check", spec, "--episodes", "1"]) == 1
    failed = failed_lines(capsys)
    assert len(failed) == 1 and failed[0].startswith(f"FAIL  {check}: "), failed
    assert failed[0].endswith(f"[checklist: {item}, docs/new_environment.md]")


def test_an_author_imports_everything_from_one_place():
    import envharness
    from envharness import Action, Environment, InvalidAction, Observation, State, define_environment

    assert issubclass(InvalidAction, ValueError) and callable(define_environment)
    assert {Action, Environment, Observation, State} and "InvalidAction" in envharness.__all__


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "countdown_env:SPCE", "--port", "0"],
        ["check", "countdown_env:SPCE"],
        ["eval", "--env", "countdown_env:SPCE", "--model", "scripted"],
    ],
)
def test_a_misspelt_attribute_gets_the_same_words_and_the_close_name(argv, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"envharness {argv[0]}: "), err  # no traceback
    assert err[0].endswith("module 'countdown_env' has no attribute 'SPCE'; did you mean 'SPEC'?")
