"""--device / --dtype: one choice for every command, refused in words when the machine cannot give it.

This machine has no GPU: `auto` must mean the CPU in float32, and `cuda` must be refused. The
GPU rules (bf16 only where the card has it, `cuda:N` within the cards there are) are checked
against a GPU described to torch's query functions, since none can exist here; the real GPU
path is `scripts/gpu_check.py`."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from envharness.models import load_backend
from envharness.models.device import DeviceError, resolve, resolve_device, resolve_dtype


def test_auto_is_the_cpu_in_float32_without_a_gpu():
    placement = resolve("auto", "auto")
    assert placement.device == torch.device("cpu") and placement.dtype == torch.float32
    assert placement.describe() == {"device": "cpu", "dtype": "float32"}


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:1"])
def test_cuda_without_a_gpu_is_refused_in_words(spec):
    with pytest.raises(DeviceError, match="use --device cpu or auto"):
        resolve_device(spec)


@pytest.mark.parametrize("spec", ["tpu", "cuda:x", "gpu", "cuda:-1"])
def test_unknown_devices_are_refused(spec):
    with pytest.raises(DeviceError, match="unknown device"):
        resolve_device(spec)


def test_dtypes_by_name_and_alias_and_unknown_ones_refused():
    cpu = torch.device("cpu")
    assert resolve_dtype("bf16", cpu) == torch.bfloat16 and resolve_dtype("float16", cpu) == torch.float16
    with pytest.raises(DeviceError, match="unknown dtype 'float64'"):
        resolve_dtype("float64", cpu)


@pytest.fixture
def one_old_gpu(monkeypatch):
    """torch's answers for a machine with one compute-capability-7.0 card (no bf16)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")


def test_gpu_rules(one_old_gpu):
    assert resolve("auto", "auto").device == torch.device("cuda", 0)
    assert resolve("auto", "auto").dtype == torch.float32  # no bf16 on this card: auto keeps fp32
    with pytest.raises(DeviceError, match="Tesla V100 .* does not support it"):
        resolve("cuda", "bfloat16")
    with pytest.raises(DeviceError, match="has 1 GPU"):
        resolve("cuda:1", "auto")
    assert resolve("cuda:0", "float16").dtype == torch.float16


def test_load_backend_places_the_model_and_reports_it():
    backend = load_backend("tiny", device="cpu", dtype="bfloat16")
    assert {p.dtype for p in backend.model.parameters() if p.is_floating_point()} == {torch.bfloat16}
    assert backend.placement.describe() == {"device": "cpu", "dtype": "bfloat16"}
    from envharness.models.base import GenerationRequest, SamplingParams

    (gen,) = backend.generate_blocking(
        [
            GenerationRequest(
                [{"role": "user", "content": "hi"}], sampling=SamplingParams(max_tokens=4, seed=1)
            )
        ]
    )
    assert len(gen.completion_ids) == 4 and all(isinstance(x, float) for x in gen.logprobs)


def test_remote_models_refuse_a_device_choice():
    with pytest.raises(ValueError, match="runs no local model"):
        load_backend("openai:gpt@http://127.0.0.1:9", device="cuda")


@pytest.mark.parametrize("command", ["eval", "train", "sft", "policy"])
def test_every_command_refuses_what_the_machine_cannot_give(command):
    for flags, words in (
        (["--device", "cuda"], "torch was built without CUDA"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--dtype", "float64"], "unknown dtype 'float64'"),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from envharness.cli import main; sys.exit(main())",
                command,
                *flags,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and words in done.stderr, (command, flags, done.stderr[-500:])


def test_seeded_rows_draw_what_multinomial_draws_in_any_batch():
    """The batched draw is torch.multinomial with each row's own generator (the same seed, the same token)."""
    from envharness.models.sampling import sample_tokens

    torch.manual_seed(0)
    logprobs = torch.log_softmax(3 * torch.randn(6, 500), -1)
    alone = [
        int(torch.multinomial(logprobs[i].exp(), 1, generator=torch.Generator().manual_seed(i)))
        for i in range(6)
    ]
    seeds = [0, 1, None, 3, None, 5]
    together = sample_tokens(
        logprobs, 1.0, [torch.Generator().manual_seed(s) if s is not None else None for s in seeds]
    ).tolist()
    assert [t for t, s in zip(together, seeds) if s is not None] == [alone[s] for s in seeds if s is not None]


def test_the_gpu_check_says_there_is_no_gpu_and_exits_0(tmp_path):
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "no CUDA GPU here" in done.stdout


def test_train_in_bf16_mixed_precision_on_the_cpu_logs_where_it_ran(tmp_path):
    """The training path builds every tensor on the model's device and dtype: bf16 autocast over
    float32 weights runs a step with signal, and the log says where."""
    import json

    code = (
        "from envharness.integrations.trl import rewards; "
        "rewards.REWARD_FUNCS['spread'] = lambda completion_ids, **kw: [(sum(c) % 7) / 7 for c in completion_ids]; "
        "import sys; from envharness.cli import main; sys.exit(main())"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "train",
            "--env",
            "textarena",
            "--tasks",
            "Wordle-v0",
            "--model",
            "tiny",
            "--dtype",
            "bfloat16",
            "--steps",
            "1",
            "--max-turns",
            "1",
            "--max-new-tokens",
            "8",
            "--num-generations",
            "4",
            "--groups-per-step",
            "1",
            "--reward",
            "spread",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "TRL_EXPERIMENTAL_SILENCE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "model on cpu, bfloat16 mixed precision (float32 weights)" in done.stderr
    step = json.loads((tmp_path / "train_log.jsonl").read_text().splitlines()[0])
    assert (step["device"], step["dtype"], step["weights_dtype"]) == ("cpu", "bfloat16", "float32")
    assert step["no_signal_skipped"] == 0.0 and "sampling/sampling_logp_difference/mean" in step
