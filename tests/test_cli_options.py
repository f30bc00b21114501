"""`eval` and `train` take the shared options under the same names, and the old spellings still work."""

from __future__ import annotations

import argparse

import pytest

from envharness.cli import eval as eval_cli, main as cli_main, serve as serve_cli, train as train_cli
from envharness.cli.options import collect_options

SHARED = [
    "--model",
    "tiny",
    "--tasks",
    "click-test,click-button",
    "--task",
    "enter-text",
    "--prompt",
    "compact",
    "--out",
    "runs/x",
    "--env-url",
    "http://127.0.0.1:9",
    "--seed",
    "5",
    "--max-turns",
    "3",
    "--max-new-tokens",
    "7",
    "--temperature",
    "0.5",
    "--threads",
    "1",
]
OLD = [
    "--model",
    "tiny",
    "--task",
    "click-test",
    "--task",
    "click-button,enter-text",
    "--prompt",
    "compact",
    "--output-dir",
    "runs/x",
    "--env-url",
    "http://127.0.0.1:9",
    "--seed",
    "5",
    "--max-steps",
    "3",
    "--max-completion-length",
    "7",
    "--temperature",
    "0.5",
    "--threads",
    "1",
]


def parse(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("module", [eval_cli, train_cli])
def test_shared_options_mean_the_same_in_eval_and_train(module):
    new, old = parse(module, SHARED), parse(module, OLD)
    for args in (new, old):
        assert args.tasks == ["click-test", "click-button", "enter-text"]
        assert (args.model, args.prompt, args.out, args.env_url, args.seed) == (
            "tiny",
            "compact",
            "runs/x",
            "http://127.0.0.1:9",
            5,
        )
        assert (args.max_turns, args.max_new_tokens, args.temperature, args.threads) == (3, 7, 0.5, 1)


def test_the_options_reach_each_command_config():
    evaluated = eval_cli.config_from_args(parse(eval_cli, SHARED))
    assert (
        evaluated.tasks,
        evaluated.out,
        evaluated.max_steps,
        evaluated.max_new_tokens,
        evaluated.prompt,
    ) == (["click-test", "click-button", "enter-text"], "runs/x", 3, 7, "compact")
    trained = train_cli.config_from_args(parse(train_cli, SHARED))
    assert (
        trained.tasks,
        trained.output_dir,
        trained.max_turns,
        trained.max_completion_length,
        trained.prompt,
    ) == (["click-test", "click-button", "enter-text"], "runs/x", 3, 7, "compact")
    # defaults are each command's own (the environment's, resolved when the run is checked), and
    # a given --tasks replaces them
    from envharness.core.registry import env_harness
    from envharness.integrations.trl.checks import check_config

    given = eval_cli.config_from_args(parse(eval_cli, ["--out", "x"]))
    evaluated = given.check().config  # a resolved copy: the given configuration is not changed
    assert given.tasks == [] and given.prompt == ""
    assert (
        evaluated.tasks == list(env_harness("browsergym").default_tasks)
        and evaluated.prompt == "default"
        and evaluated.env == "browsergym"
    )
    trained = train_cli.config_from_args(parse(train_cli, ["--model", "tiny"]))
    trained = check_config(trained).config
    assert trained.tasks == ["click-test"] and trained.prompt == "compact"
    assert parse(eval_cli, ["--task", "focus-text"]).tasks == ["focus-text"]
    # `all` and split names take the environment's listing
    everything = eval_cli.config_from_args(parse(eval_cli, ["--out", "x", "--tasks", "all"])).check().config
    assert len(everything.tasks) == 125


def test_train_refuses_models_it_cannot_train_in_words(capsys):
    for spec in ("scripted", "openai:gpt-4o-mini@http://127.0.0.1:9/v1", "trl-vllm:http://127.0.0.1:9"):
        assert cli_main(["train", "--model", spec]) == 2
        assert "has no weights to train" in capsys.readouterr().err


def test_serve_keeps_its_env_options():
    args = parse(serve_cli, ["browsergym", "--option", "max_steps=3", "--port", "0"])
    assert args.name == "browsergym" and collect_options(
        args.option, {"ENVHARNESS_OPTION_HEADLESS": "true"}
    ) == {"headless": True, "max_steps": 3}
    assert serve_cli.collect_options is collect_options  # still importable where `mcp` and older code look
