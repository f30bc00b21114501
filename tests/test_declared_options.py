"""Each option of `eval`, `train` and `sft` is declared once, as a field of its configuration:
the parser, `--help`, the configuration and its bounds come from that declaration."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from envharness.cli import main as cli_main
from envharness.cli.declared import cli_fields
from envharness.core.declared import KEY, check_bounds
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.sft import SFTRunConfig

CONFIGS = {"eval": EvalConfig, "train": TrainConfig, "sft": SFTRunConfig}


@pytest.mark.parametrize("command", list(CONFIGS))
def test_every_field_declares_its_option_with_help_and_help_lists_it(command, capsys):
    cls = CONFIGS[command]
    for field in dataclasses.fields(cls):
        declared = field.metadata.get(KEY)
        assert declared is not None and declared.help.strip(), f"{cls.__name__}.{field.name} has no help"
    with pytest.raises(SystemExit) as stop:
        cli_main([command, "--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    listed = cli_fields(cls)
    assert len(listed) >= len(dataclasses.fields(cls)) - 1  # train's skip_no_signal is Python's only
    for name, flag in listed:
        assert f"  {flag}" in shown or f", {flag}" in shown, f"{command} --help does not list {flag} ({name})"


SHARED = (
    "env",
    "env_options",
    "tasks",
    "model",
    "prompt",
    "env_url",
    "threads",
    "device",
    "opponent",
    "seat",
)


def test_an_option_eval_and_train_share_is_one_declaration():
    fields = {
        cls: {f.name: f.metadata[KEY] for f in dataclasses.fields(cls)} for cls in (EvalConfig, TrainConfig)
    }
    for name in SHARED:
        assert fields[EvalConfig][name] == fields[TrainConfig][name], name
    # the same option under each command's older field name: one flag, one help text
    turns = fields[EvalConfig]["max_steps"], fields[TrainConfig]["max_turns"]
    tokens = fields[EvalConfig]["max_new_tokens"], fields[TrainConfig]["max_completion_length"]
    for a, b in (turns, tokens):
        assert (a.flags, a.help, a.minimum) == (b.flags, b.help, b.minimum)


def test_an_option_train_and_sft_share_is_one_declaration():
    """Held-out evaluation during a run, the same option in both; only what it logs beside differs."""
    fields = {
        cls: {f.name: f.metadata[KEY] for f in dataclasses.fields(cls)} for cls in (TrainConfig, SFTRunConfig)
    }
    for name in ("eval_tasks", "eval_episodes", "eval_on_start", "threads", "device", "env_url", "resume"):
        option_of = fields[TrainConfig][name], fields[SFTRunConfig][name]
        assert option_of[0].flags == option_of[1].flags and option_of[0].minimum == option_of[1].minimum, name
    every = fields[TrainConfig]["eval_every"], fields[SFTRunConfig]["eval_every"]
    assert every[0].help.split("logged beside")[0] == every[1].help.split("logged beside")[0]
    assert "loss per task" in every[1].help and "loss per task" not in every[0].help


def test_bounds_are_refused_in_the_options_words_for_python_callers_too():
    with pytest.raises(ValueError, match="--steps must be at least 1"):
        check_bounds(TrainConfig(max_steps=0))
    with pytest.raises(ValueError, match="--num-generations must be at least 2"):
        check_bounds(TrainConfig(num_generations=1))
    with pytest.raises(EvalSetupError, match="--max-turns must be at least 1"):
        EvalConfig(out="x", max_steps=0).check()
    check_bounds(TrainConfig(minutes=None, threads=None))  # None is "not set", never out of bounds


def test_the_old_flag_of_the_observation_budget_still_works_and_run_folders_keep_its_key():
    from envharness.cli import eval as eval_cli

    parser = __import__("argparse").ArgumentParser()
    eval_cli.add_arguments(parser)
    config = eval_cli.config_from_args(parser.parse_args(["--axtree-tokens", "77", "--out", "x"]))
    assert config.observation_tokens == 77 and config.to_json()["axtree_tokens"] == 77
    assert "observation_tokens" not in config.to_json()


def test_train_overwrite_replaces_the_run_in_the_folder(tmp_path, capsys):
    out = tmp_path / "run"
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    (out / "episodes.jsonl").write_text('{"old": true}\n')
    (out / "notes.txt").write_text("mine")
    base = ["train", "--env", "echo", "--model", "tiny", "--out", str(out), "--steps", "1"]
    small = ["--num-generations", "2", "--groups-per-step", "1", "--max-new-tokens", "4", "--threads", "1"]
    assert cli_main([*base, *small, "--resume", "--overwrite"]) == 2
    assert "--resume and --overwrite contradict each other" in capsys.readouterr().err
    assert cli_main([*base, *small]) == 2
    assert "pass --resume to continue it, --overwrite to replace it" in capsys.readouterr().err
    assert cli_main([*base, *small, "--overwrite"]) == 0
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all("old" not in r for r in records)
    assert not (out / "checkpoint-3").exists() and (out / "checkpoint-1").is_dir()
    assert (out / "notes.txt").read_text() == "mine"  # only the run's own files are replaced
    assert "overwrite" not in json.loads((out / "train_config.json").read_text())


#: flag -> (what a user types after it, the configuration's value it must give). Every value
#: differs from the field's default, so an option the parser ignored fails below.
TYPED = {
    "--out": (["runs/x"], "runs/x"),
    "--env": (["textarena"], "textarena"),
    "--env-option": (["games=all", "--env-option", "size=3"], {"games": "all", "size": 3}),
    "--tasks": (["Wordle-v0,Hangman-v0", "--task", "Kuhn"], ["Wordle-v0", "Hangman-v0", "Kuhn"]),
    "--opponent": (["  random  "], "random"),
    "--seat": ([" 1 "], "1"),
    "--episodes": (["7"], 7),
    "--model": (["tiny"], "tiny"),
    "--device": (["cpu"], "cpu"),
    "--dtype": (["bfloat16"], "bfloat16"),
    "--prompt": ([" mypkg.prompts:build "], "mypkg.prompts:build"),  # module:function, checked at run start
    "--temperature": (["0.25"], 0.25),
    "--max-turns": (["9"], 9),
    "--max-new-tokens": (["33"], 33),
    "--observation-tokens": (["500"], 500),
    "--history-steps": (["2"], 2),
    "--actions": (["click, fill"], ["click", "fill"]),
    "--concurrency": (["3"], 3),
    "--seed": (["42"], 42),
    "--env-url": (["http://127.0.0.1:8123"], "http://127.0.0.1:8123"),
    "--resume": ([], True),
    "--overwrite": ([], True),
    "--no-screenshots": ([], False),
    "--episode-timeout": (["12.5"], 12.5),
    "--batch-wait": (["0.05"], 0.05),
    "--no-progress": ([], False),
    "--vision": ([], True),
    "--screenshot-max-side": (["224"], 224),
    "--record-tokens": ([], True),
    "--threads": (["2"], 2),
    "--env-urls": (["http://127.0.0.1:1,http://127.0.0.1:2"], ["http://127.0.0.1:1", "http://127.0.0.1:2"]),
    "--servers": (["2"], 2),
    "--ray-address": (["auto"], "auto"),
    "--lora": ([], True),
    "--lora-rank": (["8"], 8),
    "--steps": (["5"], 5),
    "--minutes": (["1.5"], 1.5),
    "--num-generations": (["6"], 6),
    "--groups-per-step": (["3"], 3),
    "--micro-batch": (["2"], 2),
    "--gradient-checkpointing": ([], True),
    "--lr": (["0.001"], 0.001),
    "--beta": (["0.04"], 0.04),
    "--loss-type": (["grpo"], "grpo"),
    "--reward": (["sum", "--reward", "max"], ["sum", "max"]),
    "--save-steps": (["4"], 4),
    "--use-vllm": ([], True),
    "--processes": (["2"], 2),
    "--report-to": (["tensorboard"], "tensorboard"),
    "--agent": (["mypkg.agent:run"], "mypkg.agent:run"),
    "--agent-timeout": (["30"], 30.0),
    "--vision-page-text": (["none"], "none"),
    "--no-logprob-correction": ([], False),
    "--curriculum": (["signal"], "signal"),
    "--curriculum-floor": (["0.1"], 0.1),
    "--max-extra-groups": (["2"], 2),
    "--async": ([], True),
    "--max-staleness": (["3"], 3),
    "--eval-every": (["5"], 5),
    "--eval-tasks": (["a, b"], ["a", "b"]),
    "--eval-episodes": (["3"], 3),
    "--eval-on-start": ([], True),
    "--mix": (["textarena:Wordle-v0", "--mix", "echo:echo"], {"textarena": ["Wordle-v0"], "echo": ["echo"]}),
    "--demos": (["runs/eval"], "runs/eval"),
    "--epochs": (["1.5"], 1.5),
    "--batch-size": (["4"], 4),
    "--save-epochs": ([], True),
}


def parse_real_command_line(command: str, argv: list[str], monkeypatch) -> object:
    """The configuration `envharness COMMAND ARGV...` runs with: the CLI's own parser (its
    subcommand, check_args) and the command's own config_from_args; only the run is left out."""
    module = importlib.import_module(f"envharness.cli.{command}")
    seen = []
    monkeypatch.setattr(module, "run", lambda args: seen.append(module.config_from_args(args)) or 0)
    assert cli_main([command, *argv]) == 0
    (config,) = seen
    return config


def declared_defaults(cls: type, out: str) -> object:
    """`cls` with its fields' defaults (`out` for a field without one: eval's run folder)."""
    required = [
        f.name for f in dataclasses.fields(cls) if f.default is f.default_factory is dataclasses.MISSING
    ]
    return cls(**dict.fromkeys(required, out))


@pytest.mark.parametrize("command", list(CONFIGS))
def test_a_real_command_line_gives_every_option_its_typed_value(command, monkeypatch):
    cls = CONFIGS[command]
    listed = cli_fields(cls)
    untyped = [flag for _, flag in listed if flag not in TYPED]
    assert not untyped, f"add a typed value for {untyped} to TYPED"
    if command == "sft":  # sft's own rule: --micro-batch divides --batch-size
        assert TYPED["--batch-size"][1] % TYPED["--micro-batch"][1] == 0
    argv = [token for _, flag in listed for token in (flag, *TYPED[flag][0])]
    config = parse_real_command_line(command, argv, monkeypatch)
    defaults = declared_defaults(cls, out="runs/default")
    for name, flag in listed:
        expected = TYPED[flag][1]
        assert getattr(defaults, name) != expected, f"{flag}: the typed value is the default; pick another"
        assert getattr(config, name) == expected, (flag, getattr(config, name))


@pytest.mark.parametrize("command", list(CONFIGS))
def test_a_bare_command_line_gives_the_declared_defaults(command, monkeypatch):
    cls = CONFIGS[command]
    config = parse_real_command_line(command, ["--out", "runs/x"], monkeypatch)
    out_field = next(name for name, flag in cli_fields(cls) if flag == "--out")
    expected = dataclasses.replace(declared_defaults(cls, out="runs/x"), **{out_field: "runs/x"})
    assert config == expected
