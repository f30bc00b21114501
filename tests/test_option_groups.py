"""The commands' options come in groups (`harness/groups.py`), as TRL's `HfArgumentParser`
composes dataclasses: each field is declared once, in its group; a rule about two fields is
written once, with its group; a configuration is never changed once made (checking one
returns the resolved copy)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from envharness.cli import main as cli_main
from envharness.core.declared import check_options
from envharness.eval.config import EvalConfig, EvalSetupError
from envharness.harness.groups import EnvironmentArgs, FleetArgs, ModelArgs, ServerArgs, TrainingModelArgs
from envharness.integrations.trl.checks import check_config
from envharness.integrations.trl.config import TrainConfig
from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.sft import SFTRunConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "envharness"

COMPOSED = {
    EvalConfig: (EnvironmentArgs, FleetArgs, ModelArgs),
    TrainConfig: (EnvironmentArgs, FleetArgs, TrainingModelArgs),
    SFTRunConfig: (EnvironmentArgs, ServerArgs, TrainingModelArgs),
}


@pytest.mark.parametrize("config", list(COMPOSED), ids=lambda c: c.__name__)
def test_every_command_composes_the_groups_each_field_declared_once(config):
    for group in COMPOSED[config]:
        assert issubclass(config, group)
        for field in dataclasses.fields(group):  # the very declaration, not a copy
            assert config.__dataclass_fields__[field.name] is field, (config.__name__, field.name)
    assert TrainingModelArgs.__dataclass_fields__["dtype"] is not ModelArgs.__dataclass_fields__["dtype"]
    assert "mixed precision" in TrainingModelArgs.__dataclass_fields__["dtype"].metadata["option"].help


@pytest.mark.parametrize("command", ["eval", "train", "sft"])
def test_help_shows_each_group_as_its_own_section(command, capsys):
    with pytest.raises(SystemExit):
        cli_main([command, "--help"])
    shown = capsys.readouterr().out
    sections = ["environment options:", "servers options:", "model options:"]
    at = [shown.index(title) for title in sections]
    assert at == sorted(at)
    assert at[0] < shown.index("  --env NAME") < at[1] < shown.index("  --env-url URL") < at[2]
    assert at[2] < shown.index("  --model SPEC") and at[2] < shown.index("  --threads N")
    assert shown.index("  --seed N") < at[0]  # the command's own options come first


def _shared_rules():
    spec = importlib.util.spec_from_file_location(
        "shared_rules", SRC.parents[1] / "scripts" / "shared_rules.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_shared_rule_is_written_in_one_place():
    import re

    rules = _shared_rules()
    seen = rules.refusals(SRC)
    for rule, pattern in rules.NAMED_RULES.items():
        places = [where for text, wheres in seen.items() if re.search(pattern, text) for where in wheres]
        assert len(places) == 1, (rule, places)


def test_the_fleet_rule_refuses_in_the_same_words_everywhere():
    from envharness.fleet.start import open_fleet

    words = "give one of --env-url, --env-urls and --servers"
    with pytest.raises(EvalSetupError) as eval_refused:
        EvalConfig(out="x", env_url="http://127.0.0.1:9", servers=2).check()
    with pytest.raises(TrainSetupError) as train_refused:
        check_config(TrainConfig(env_url="http://127.0.0.1:9", servers=2, model="tiny"))
    with (
        pytest.raises(ValueError) as fleet_refused,
        open_fleet("echo", env_urls=["http://127.0.0.1:9"], servers=2),
    ):
        pass
    assert str(eval_refused.value) == str(train_refused.value) == str(fleet_refused.value) == words
    with pytest.raises(TrainSetupError, match="--ray-address needs --servers"):
        check_config(TrainConfig(ray_address="auto", model="tiny"))


def test_checking_an_eval_config_returns_a_resolved_copy_and_changes_nothing():
    given = EvalConfig(out="x", env="textarena", tasks=["Wordle-v0"], opponent="")
    checked = given.check()
    assert (given.prompt, given.actions) == ("", [])  # as made
    assert checked.config.prompt and checked.config.actions and checked.config.tasks == ["Wordle-v0"]
    assert checked.env.name == "textarena"
    assert dataclasses.replace(checked.config, prompt="", actions=[]) == given
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.tasks = ["other"]  # type: ignore[misc]


def test_preparing_an_sft_run_returns_a_resolved_copy_and_changes_nothing(tmp_path):
    from envharness.cli.sft import prepare
    from envharness.core.registry import env_harness

    given = SFTRunConfig(env="textarena", tasks=["Wordle-v0"], model="tiny", output_dir=str(tmp_path / "sft"))
    config, checkpoint, demos = prepare(given)
    assert given.prompt == "" and config.prompt == env_harness("textarena").train_prompt
    assert checkpoint is None and demos.tasks == ["Wordle-v0"] and demos.prompt == config.prompt
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.prompt = "compact"  # type: ignore[misc]
    with pytest.raises(ValueError, match="--micro-batch 3 does not divide --batch-size 8"):
        check_options(SFTRunConfig(micro_batch=3))  # sft's own rule, with its options


def test_serve_policy_and_check_use_the_same_declarations():
    import inspect

    from envharness.cli.check import CheckConfig
    from envharness.cli.exposure import ExposureArgs
    from envharness.cli.policy import PolicyConfig
    from envharness.cli.serve import AppArgs, ServeConfig
    from envharness.core.server import create_app
    from envharness.policy.limits import PolicyLimits

    for config, groups in (
        (ServeConfig, (AppArgs, ExposureArgs)),
        (PolicyConfig, (PolicyLimits, ExposureArgs, ModelArgs)),
        (CheckConfig, (ServerArgs,)),
    ):
        for group in groups:
            for field in dataclasses.fields(group):
                assert config.__dataclass_fields__[field.name] is field, (config.__name__, field.name)
    for name in ("env_options", "tasks", "seed"):  # check's own fields, from the same declarations
        check, train = CheckConfig.__dataclass_fields__[name], TrainConfig.__dataclass_fields__[name]
        assert check.metadata["option"].flags == train.metadata["option"].flags, name
    # what create_app takes is AppArgs, by name, with the same defaults
    takes = inspect.signature(create_app).parameters
    for field in dataclasses.fields(AppArgs):
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        given = takes[field.name].default
        assert (list(given) if isinstance(given, tuple) else given) == default, field.name


def _parsed(command: str, argv: list[str], monkeypatch) -> object:
    """The configuration `envharness COMMAND ARGV...` runs with (its own parser and
    config_from_args; the run is left out)."""
    module = importlib.import_module(f"envharness.cli.{command}")
    seen = []
    monkeypatch.setattr(module, "run", lambda args: seen.append(module.config_from_args(args)) or 0)
    assert cli_main([command, *argv]) == 0
    return seen[0]


def test_serve_policy_and_check_read_their_typed_options(monkeypatch):
    monkeypatch.delenv("ENVHARNESS_TOKEN", raising=False)
    serve = _parsed(
        "serve",
        ["echo", "--max-sessions", "3", "--idle-timeout", "0", "--allowed-hosts", "a, b", "--mcp-fixed",
         "seat,seed", "--web", "--token", "t", "--port", "0", "--exit-with-parent", "7"],
        monkeypatch,
    )  # fmt: skip
    assert (serve.max_sessions, serve.idle_timeout_s, serve.allowed_hosts, serve.mcp_fixed) == (
        3, None, ["a", "b"], ["seat", "seed"]
    )  # fmt: skip
    assert (serve.web, serve.token, serve.port, serve.exit_with_parent, serve.allowed_origins) == (
        True, "t", 0, 7, []
    )  # fmt: skip
    monkeypatch.setenv("ENVHARNESS_TOKEN", "from-env")
    policy = _parsed(
        "policy",
        ["--model", "tiny", "--max-calls-per-rollout", "0", "--rollout-idle-timeout", "5", "--max-prompt-tokens",
         "9", "--allow-null-origin", "--allowed-origins", "null", "--temperature", "0.5"],
        monkeypatch,
    )  # fmt: skip
    assert (policy.max_calls_per_rollout, policy.rollout_idle_s, policy.max_prompt_tokens, policy.token) == (
        None, 5.0, 9, "from-env"
    )  # fmt: skip
    assert (policy.allowed_origins, policy.allow_null_origin, policy.temperature, policy.port) == (
        ["null"], True, 0.5, 9000
    )  # fmt: skip
    check = _parsed(
        "check",
        ["echo", "--env-option", "x=1", "--task", "a,b", "--max-turns", "3", "--episode-timeout", "0",
         "--floor", "--floor-policies", "noop, random", "--no-progress"],
        monkeypatch,
    )  # fmt: skip
    assert (check.env_options, check.tasks, check.max_steps, check.episode_timeout_s) == (
        {"x": 1},
        ["a", "b"],
        3,
        None,
    )
    assert (check.floor, check.floor_policies, check.progress) == (True, ["noop", "random"], False)


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["policy", "--model", "tiny", "--max-request-bytes", "10"],
            "--max-request-bytes must be at least 1024",
        ),
        (
            ["policy", "--model", "tiny", "--allowed-origins", "null"],
            "--allowed-origins null would let every",
        ),
        (["serve", "echo", "--max-sessions", "0"], "--max-sessions must be at least 1"),
        (["check", "echo", "--episodes", "0"], "--episodes must be at least 1"),
    ],
)
def test_serve_policy_and_check_refuse_out_of_bounds_in_words_before_starting(argv, words, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert f"envharness {argv[0]}: {words}" in err and "Traceback" not in err
