"""`envharness sft`: scripted demonstrations in the student's exact tokens, then TRL's SFT.

- the demonstrations' token sequences are the tokens `eval --prompt compact` shows the model:
  at every turn, the sequence so far equals a fresh tokenization of eval's conversation up
  to that turn, and the model's tokens are the reply plus its end-of-turn token;
- the loss falls on the model's tokens only (labels -100 on prompt, page text, tool results);
- the run leaves a model directory that `eval --model` takes; an eval run folder's own
  successes are a source too (rejection sampling), and ids of another tokenizer are refused.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from envharness.cli import main as cli_main
from envharness.eval.demonstrations import DemonstrationError, from_records, read_run
from envharness.models import chat
from envharness.models.embedded import tiny_test_model

pytestmark = pytest.mark.timeout(600)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
TASKS = "click-test,enter-text"


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "run"
    code = cli_main(
        [
            "sft",
            "--model",
            "tiny",
            "--tasks",
            TASKS,
            "--episodes",
            "2",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--max-turns",
            "3",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    return out


def test_demonstrations_are_the_tokens_eval_shows_the_model(sft_run):
    _, tokenizer = tiny_test_model()
    records = read_run(sft_run / "demos")
    assert sorted({r["task"] for r in records}) == ["click-test", "enter-text"] and len(records) == 4
    assert all(r["seed"] >= 1000 for r in records)  # eval's seeds 0.. stay held out
    end = chat.end_of_turn_text(tokenizer).rstrip()
    assert max(r["metrics"]["turns_assembled"] for r in records) >= 2  # enter-text: type, then submit
    for record in records:
        ids = record["token_ids"]
        sequence = ids["prompt_ids"] + ids["completion_ids"]
        mask = [0] * len(ids["prompt_ids"]) + ids["env_mask"]
        messages = record["messages"]
        # the model's turns are the last assistant messages (the opening may hold a worked example)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"][
            -record["metrics"]["turns_assembled"] :
        ]
        assert turns and record["metrics"]["turns_assembled"] == len(record["tool_calls"]), record
        model_tokens = []
        for i in turns:
            shown = chat.prompt_ids(tokenizer, messages[:i])  # eval's conversation, tokenized afresh
            assert sequence[: len(shown)] == shown
            assert sum(mask[: len(shown)]) == len(model_tokens)  # only earlier replies are model tokens
            reply = chat.encode(tokenizer, messages[i]["content"] + end)
            assert sequence[len(shown) : len(shown) + len(reply)] == reply
            assert mask[len(shown) : len(shown) + len(reply)] == [1] * len(reply)
            model_tokens += reply
        assert [t for t, m in zip(sequence, mask) if m] == model_tokens  # nothing else is trained on


def test_labels_keep_only_the_models_tokens(sft_run):
    _, tokenizer = tiny_test_model()
    demos = from_records(read_run(sft_run / "demos"), tokenizer)
    assert len(demos.demonstrations) == 4 and demos.dropped == {}
    for demo in demos.demonstrations:
        labels = demo.labels
        assert len(labels) == len(demo.input_ids)
        kept = [i for i, label in enumerate(labels) if label != -100]
        assert kept and all(demo.input_ids[i] == labels[i] for i in kept)
        assert len(kept) == sum(demo.env_mask) < len(demo.completion_ids) + len(demo.prompt_ids)


def test_the_run_leaves_a_model_eval_takes(sft_run, tmp_path, capsys):
    logs = [json.loads(line) for line in (sft_run / "train_log.jsonl").read_text().splitlines()]
    assert [log["step"] for log in logs if "loss" in log] == [1, 2]
    assert (sft_run / "final" / "config.json").is_file() and (sft_run / "checkpoint-2").is_dir()
    code = cli_main(
        [
            "eval",
            "--model",
            str(sft_run / "final"),
            "--prompt",
            "compact",
            "--tasks",
            "click-test",
            "--episodes",
            "1",
            "--max-turns",
            "1",
            "--max-new-tokens",
            "4",
            "--no-progress",
            "--out",
            str(tmp_path / "eval"),
        ]
    )
    assert code == 0, capsys.readouterr().err


def test_a_run_folders_successes_are_demonstrations(sft_run, tmp_path, capsys):
    code = cli_main(
        [
            "sft",
            "--model",
            "tiny",
            "--demos",
            str(sft_run / "demos"),
            "--tasks",
            "click-test",
            "--steps",
            "1",
            "--batch-size",
            "2",
            "--out",
            str(tmp_path / "rft"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "[sft] 2 demonstrations of 2 episodes" in capsys.readouterr().err


def test_ids_of_another_tokenizer_are_refused(sft_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(sft_run / "demos", other)
    records = read_run(other)
    for record in records:
        record["token_ids"]["prompt_ids"] = [(t + 7) % 1000 for t in record["token_ids"]["prompt_ids"]]
    _, tokenizer = tiny_test_model()
    with pytest.raises(DemonstrationError, match="not this model's tokens"):
        from_records(records, tokenizer)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--demos", "no/such/run"], "neither 'scripted' nor an eval run folder"),
        (["--prompt", "default"], "builds a fresh prompt every step"),
        (["--episodes", "0"], "--episodes must be at least 1"),
        (["--batch-size", "8", "--micro-batch", "3"], "does not divide --batch-size 8"),
    ],
)
def test_bad_settings_are_refused_in_words(tmp_path, capsys, args, message):
    assert (
        cli_main(["sft", "--model", "tiny", "--tasks", "click-test", "--out", str(tmp_path / "x"), *args])
        == 2
    )
    assert message in capsys.readouterr().err


def test_sigterm_keeps_the_finished_steps_and_resume_finishes_the_run(tmp_path, prewarmed):
    """As `train`: the steps done are checkpointed, one line says how to resume, and the
    resumed run reuses the demonstrations and ends at the requested steps."""
    import shlex
    import signal

    from _jobs import Job, held_at_step

    from envharness.integrations.trl.resume import latest_checkpoint

    out = tmp_path / "run"
    args = [
        "sft",
        "--model",
        "tiny",
        "--tasks",
        "click-test",
        "--episodes",
        "4",
        "--steps",
        "12",
        "--batch-size",
        "1",
        "--save-steps",
        "100",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    job = Job(
        args, tmp_path, script=held_at_step(2), prewarmed=prewarmed
    )  # the run waits at step 2: the signal comes mid-run
    try:
        job.wait_for_output("held at step 2", timeout_s=400)
        job.signal(signal.SIGTERM)
        assert job.wait() == 143
        last = job.output.strip().splitlines()[-1]
        assert last.startswith("envharness sft: stopped by SIGTERM; kept ") and "Traceback" not in job.output
        argv = shlex.split(last.split("Resume with: ")[1])
        latest = latest_checkpoint(out)
        assert argv[-3:] == ["--out", str(out), "--resume"] and latest is not None and latest.step >= 2
        job.assert_nothing_left()
        assert cli_main([*args, "--resume"]) == 0  # the same command, resumed
        logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        assert [log["step"] for log in logs if "loss" in log][-1] == 12
    finally:
        job.kill_all()


def test_eval_every_chooses_the_stage_on_held_out_success_and_keeps_every_epoch(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["sft", "--model", "tiny", "--tasks", TASKS, "--episodes", "1", "--epochs", "2", "--save-epochs"]
    args += ["--batch-size", "2", "--max-turns", "2", "--max-new-tokens", "4", "--eval-every", "1"]
    args += ["--eval-tasks", "click-button", "--eval-episodes", "1", "--out", str(out)]
    assert cli_main(args) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    evals = [json.loads(line) for line in (out / "eval_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [1, 2]  # one step per epoch: 2 demonstrations, 2 per step
    for e in evals:  # every trained task and the transfer task on held-out seeds, the loss per task
        assert {k for k in e if k.startswith("eval/")} == {
            "eval/click-test/success",
            "eval/enter-text/success",
            "eval/click-button/success",
            "eval/trained_mean",
            "eval/transfer_mean",
        }
        assert e["eval/trained_mean"] == (e["eval/click-test/success"] + e["eval/enter-text/success"]) / 2
        assert all(e[f"loss/{task}"] > 0 for task in TASKS.split(","))
    steps = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    steps = [log for log in steps if "loss" in log and "train_runtime" not in log]
    assert [log["eval/trained_mean"] for log in steps] == [e["eval/trained_mean"] for e in evals]
    assert [log["loss/enter-text"] for log in steps] == [e["loss/enter-text"] for e in evals]
    assert "held-out" in err and "enter-text" in err  # the progress line names each task
    best = json.loads((out / "best" / "best.json").read_text())
    assert best["eval/trained_mean"] == max(e["eval/trained_mean"] for e in evals)
    assert (out / "best" / "config.json").is_file()
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()  # one per epoch, kept
