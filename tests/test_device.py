"""--device / --dtype: one choice for every command, refused in words when the machine cannot give it.

Each machine-dependent rule is its own test, marked with the machine it needs (`needs_cuda`,
`needs_no_cuda`) and skipped in words on the other one, so no test passes having checked nothing
(`auto`: the GPU in bf16 where the card has it, else the CPU in float32; a GPU asked for where
there is none, or an index past the last card, refused in words). The GPU rules on a card this machine may not have (no bf16) are checked against a GPU
described to torch's query functions; `scripts/gpu_check.py --cpu` runs the GPU check's steps
that no other test covers on the CPU, and on a GPU machine the check itself runs once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from _jobs import Job, run_tree

from envharness.models import load_backend
from envharness.models.device import DeviceError, decoding_attention, resolve, resolve_device, resolve_dtype

CUDA = torch.cuda.is_available()
#: Each machine-dependent test states one machine's rule; the other machine's is skipped in words.
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (this machine has none)")
needs_no_cuda = pytest.mark.skipif(CUDA, reason="checks a machine without CUDA (this one has a GPU)")
#: The words of the refusal of a GPU on a machine without one.
NO_GPU_WORDS = "torch was built without CUDA" if torch.version.cuda is None else "torch sees no GPU"


@needs_no_cuda
def test_auto_without_a_gpu_is_the_cpu_in_float32():
    placement = resolve("auto", "auto")
    assert placement.device == torch.device("cpu") and placement.dtype == torch.float32
    assert placement.describe() == {"device": "cpu", "dtype": "float32"}


@needs_cuda
def test_auto_with_a_gpu_is_the_current_card_in_bf16_where_it_has_it():
    placement = resolve("auto", "auto")
    bf16 = torch.cuda.get_device_capability(placement.device)[0] >= 8
    assert placement.device == torch.device("cuda", torch.cuda.current_device())
    assert placement.dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert placement.describe()["device_name"] == torch.cuda.get_device_name(placement.device)


@needs_no_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:1"])
def test_cuda_without_a_card_is_refused_in_words(spec):
    with pytest.raises(DeviceError, match="use --device cpu or auto") as refused:
        resolve_device(spec)
    assert NO_GPU_WORDS in str(refused.value)


@needs_cuda
@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "CUDA:0"])
def test_cuda_is_given_where_there_is_a_card(spec):
    written = spec.partition(":")[2]
    index = int(written) if written else torch.cuda.current_device()
    assert resolve_device(spec) == torch.device("cuda", index)


@needs_no_cuda
def test_an_index_without_a_card_is_refused_in_words():
    with pytest.raises(DeviceError, match="use --device cpu or auto"):
        resolve_device("cuda:7")


@needs_cuda
def test_an_index_past_the_last_card_is_refused_in_words():
    with pytest.raises(DeviceError, match=f"this machine has {torch.cuda.device_count()} GPU"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


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


def test_decoding_on_a_gpu_leaves_cudnn_attention_out_and_puts_it_back():
    """cuDNN's attention plans every new cache length anew (milliseconds of CPU per layer and
    token): decoding uses the other kernels, and the choice is back as it was afterwards."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    kernels = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled())
    with decoding_attention(torch.device("cuda", 0)):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()) == (
            True,
            True,
        )
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    assert (
        torch.backends.cuda.flash_sdp_enabled(),
        torch.backends.cuda.mem_efficient_sdp_enabled(),
    ) == kernels
    with decoding_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before  # the CPU has no cuDNN kernel to avoid
    backend = load_backend("tiny", device="cpu")
    with backend.sampling_mode():
        assert torch.is_inference_mode_enabled() and not backend.model.training


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


#: A device this machine cannot give, and the words of its refusal.
UNAVAILABLE = (
    (["--device", f"cuda:{torch.cuda.device_count()}"], "this machine has")
    if CUDA
    else (
        ["--device", "cuda"],
        "torch was built without CUDA" if torch.version.cuda is None else "torch sees no GPU",
    )
)


@pytest.mark.parametrize("command", ["eval", "train", "sft", "policy"])
def test_every_command_refuses_what_the_machine_cannot_give(command, tmp_path, prewarmed):
    """`envharness COMMAND` with each flag, forked from the prewarmed interpreter (torch, TRL
    imported: twelve commands without twelve cold starts), exits 2 with the refusal's words."""
    for flags, words in (
        UNAVAILABLE,
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--dtype", "float64"], "unknown dtype 'float64'"),
    ):
        job = Job([command, *flags], tmp_path, prewarmed=prewarmed)
        try:
            code = job.wait(600)  # a hang guard: `train` imports TRL, slow on a busy machine
        finally:
            job.kill_all()
        assert code == 2 and words in job.output, (command, flags, job.output[-500:])


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


def _gpu_check(out, *flags: str) -> subprocess.CompletedProcess:
    done = run_tree(
        [sys.executable, "scripts/gpu_check.py", "--out", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


@needs_no_cuda
def test_the_gpu_check_without_a_gpu_says_so_and_writes_nothing(tmp_path):
    """Without CUDA the check has nothing to do and says so (the whole check is `python
    scripts/gpu_check.py`, minutes long, on a GPU machine)."""
    done = _gpu_check(tmp_path)
    assert "no CUDA GPU here" in done.stdout and not (tmp_path / "gpu_check.json").exists()


@needs_cuda
def test_the_gpu_check_samples_on_the_gpu(tmp_path):
    """With CUDA, the check's seeded-sampling step runs on the GPU."""
    _gpu_check(tmp_path, "--only", "seeded_sampling")
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["device"] == "cuda" and report["seeded_sampling"]["ok"], report


#: The GPU check's steps that `--cpu` runs here: the ones no other test covers (the script's own
#: comparisons in one process, the train launcher's worker file, the train-step bench). The rest
#: run here as their commands' own tests: eval (test_eval_run.py, test_textarena_runs.py),
#: policy (test_policy_bounds.py starts `envharness policy`; test_policy_endpoint.py), sft
#: (test_sft.py), train without signal (test_no_signal.py), train with signal (the bf16 test
#: below; test_logprob_agreement.py). On a GPU machine the whole check runs.
CPU_STEPS = ["logprobs", "seeded_sampling", "generation", "train_launcher", "step_split"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_gpu_check_checks_itself_on_the_cpu_with_a_tiny_model(tmp_path):
    """`--cpu --only CPU_STEPS`: those steps of the GPU check on the CPU with a tiny model, each
    one ok; on any machine."""
    done = run_tree(
        [
            sys.executable,
            "scripts/gpu_check.py",
            "--cpu",
            "--only",
            ",".join(CPU_STEPS),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    failed = {k: v.get("error") for k, v in report.items() if isinstance(v, dict) and v.get("ok") is False}
    assert done.returncode == 0 and not failed, failed or done.stderr[-2000:]
    steps = [k for k, v in report.items() if isinstance(v, dict) and "ok" in v]
    assert steps == CPU_STEPS
    assert report["seeded_sampling"]["equal"], report
    assert any(key.endswith(" envharness") for key in report["generation"]), report["generation"]
    assert report["train_launcher"]["steps"], report["train_launcher"]  # torchrun's worker trained
    split = (tmp_path / "train_step_split.md").read_text()  # the bench's tables: step and decoder split
    assert "| after (this tree) |" in split and "decode passes per step" in split
    assert report["device"] == "cpu"
    for arm in report["logprobs"].values():
        if isinstance(arm, dict) and "abs_diff_mean" in arm:
            assert arm["model_device"] == "cpu" and arm["tokens"] > 0


def test_train_in_bf16_mixed_precision_on_the_cpu_logs_where_it_ran(tmp_path):
    """The training path builds every tensor on the model's device and dtype: bf16 autocast over
    float32 weights runs a step with signal, and the log says where."""
    import json

    code = (
        "from envharness.integrations.trl import rewards; "
        "rewards.REWARD_FUNCS['spread'] = lambda completion_ids, **kw: [(sum(c) % 7) / 7 for c in completion_ids]; "
        "import sys; from envharness.cli import main; sys.exit(main())"
    )
    done = run_tree(
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
