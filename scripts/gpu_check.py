#!/usr/bin/env python3
"""The GPU check: does envharness run fully on this machine's GPU, and how exact are its logprobs there?

    python scripts/gpu_check.py [--out DIR] [--cpu]      # or: bash scripts/gpu_check.sh (carries wheels)

No network: the model is a random Qwen2-shaped one (Qwen2.5-0.5B's layers, an 8k vocabulary
trained here, bf16 weights as hub checkpoints are saved) and the environment is TextArena
(no browser). Steps, each timed, each failure recorded and the next step run:

  logprobs    TransformersBackend samples 32 requests x 48 tokens at T=1 on the GPU; the sampled
              tokens are scored again by a plain forward of the same model. Three precisions: bf16
              weights (eval's `--dtype auto` on a GPU), float32 weights under bf16 autocast (what
              `train` runs: mixed precision), float32. Per-token |difference|, and the importance
              ratio p_forward/p_sample before and after the truncation `train` applies.
  generation  tokens/s of TransformersBackend against Hugging Face `generate` on the same model and
              prompts, 32 and 64 requests x 48 tokens, bf16 and float32, after a warm-up.
  eval        `envharness eval --env textarena` on the model: where it ran (summary.json).
  policy      `envharness policy` on the model: one chat completion through a rollout.
  sft         `envharness sft --env textarena` on scripted demonstrations, 2 steps.
  train       `envharness train --env textarena --reward success`: a random model's batches carry
              no signal (the batch that used to crash); then with a reward that has spread,
              with the logprob gap of each step from train_log.jsonl, and each step's split
              (time/generate_s, time/env_s, time/train_s).
  train_launcher  the same run started by torchrun (`--nproc-per-node 1`: the launcher's path on
              the one GPU lent; more GPUs are not).
  step_split  bench/bench_train_step.py on the model: a `train` step against the model's own
              forward passes and the environment's work alone, before (.gpu-check/before, or
              the bench's revision through git) and after, in one run (train_step_split.md); then the decoding thread of
              one more run, profiled (decoder_python.txt, decoder_ops.txt).

Writes DIR/gpu_check.json and prints a summary table. Without CUDA it says so and exits 0
(`--cpu` runs the same steps on the CPU with a tiny model, to check the check).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

T0 = time.monotonic()
PROFILE_DIR = Path("runs/gpu-check")  # main() sets it to --out
REPEATS = 3  # timed batches per arm (the median is reported)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
WORDLE = (
    "You are Player 0 in Wordle. A secret 5-letter word has been chosen. You have 6 attempts to guess it. "
    "For each guess, wrap your word in square brackets (e.g., [apple]). Feedback: G green, Y yellow, X wrong."
)


def log(msg: str) -> None:
    print(f"[gpu-check +{time.monotonic() - T0:5.0f}s] {msg}", flush=True)


# -- the model -------------------------------------------------------------------------------


def build_model(out: Path, cuda: bool) -> Path:
    """A random Qwen2 model directory (bf16 weights) with a BPE tokenizer trained on Wordle-like text."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from envharness.models.tiny_vlm import build_tokenizer

    rng = random.Random(0)
    words = ["".join(rng.choice("etaoinshrdlcumwfgypbvk") for _ in range(5)) for _ in range(3000)]
    lines = [WORDLE] * 50 + [
        f"[{w}]\n{' '.join(w.upper())}\n{' '.join(rng.choice('GYX') for _ in range(5))}" for w in words
    ]
    tokenizer = build_tokenizer(SPECIALS, corpus=lines, vocab_size=8192)
    tokenizer.chat_template = CHATML
    ids = {s: tokenizer.convert_tokens_to_ids(s) for s in SPECIALS}
    shape = (
        dict(
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
        )
        if cuda
        else dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        **shape,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    with (
        torch.no_grad()
    ):  # a realistic logit spread (std ~3.6): near-uniform logits hide every precision error
        model.model.norm.weight.fill_(6.0)
    path = out / "model"
    model.to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)
    GenerationConfig(eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"]).save_pretrained(path)
    log(
        f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, vocab {len(tokenizer)} -> {path}"
    )
    return path


def requests(n: int, new_tokens: int, seeded: bool = True) -> list[Any]:
    from envharness.models.base import GenerationRequest, SamplingParams

    rng = random.Random(n)
    out = []
    for i in range(n):
        history = "\n".join(
            f"[{''.join(rng.choice('crane slate') for _ in range(5))}] {' '.join(rng.choice('GYX') for _ in range(5))}"
            for _ in range(i % 6)
        )
        text = f"{WORDLE}\n{history}\nYou have {6 - i % 6} guesses left."
        out.append(
            GenerationRequest(
                messages=[{"role": "user", "content": text}],
                sampling=SamplingParams(
                    temperature=1.0, max_tokens=new_tokens, seed=1000 + i if seeded else None
                ),
            )
        )
    return out


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


# -- steps -----------------------------------------------------------------------------------


def step_logprobs(path: Path, device: str, n: int, new_tokens: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envharness.integrations.trl.logprob_agreement import truncated_ratio
    from envharness.models.transformers_backend import TransformersBackend

    tokenizer = AutoTokenizer.from_pretrained(path)
    results = {}
    arms = {
        "bf16 weights (eval)": (torch.bfloat16, None),
        "fp32 weights + bf16 autocast (train)": (torch.float32, torch.bfloat16),
        "fp32": (torch.float32, None),
    }
    for name, (dtype, autocast) in arms.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        if autocast:  # around the forward, as Accelerate patches it in `train`: autocast is
            # thread-local, and the backend samples in its own decoding thread
            model.forward = torch.autocast(device_type=torch.device(device).type, dtype=autocast)(
                model.forward
            )
        gens = TransformersBackend(model, tokenizer).generate_blocking(requests(n, new_tokens))
        sampled, recomputed = [], []
        with torch.no_grad():
            for g in gens:  # a plain forward of prompt + completion, one sequence, no cache, no padding
                ids = torch.tensor([g.prompt_ids + g.completion_ids], device=device)
                logits = model(input_ids=ids).logits[0, len(g.prompt_ids) - 1 : -1].float()
                lp = torch.log_softmax(logits, -1).gather(
                    -1, torch.tensor(g.completion_ids, device=device)[:, None]
                )[:, 0]
                recomputed.append(lp)
                sampled.append(torch.tensor(g.logprobs, device=device))
        rec, smp = torch.cat(recomputed), torch.cat(sampled)
        diff = (rec - smp).abs()
        raw = torch.exp(rec - smp)
        corrected = truncated_ratio(rec, smp, torch.ones_like(rec), clip_max=3.0)
        results[name] = {
            "tokens": int(rec.numel()),
            "abs_diff_mean": float(diff.mean()),
            "abs_diff_max": float(diff.max()),
            "ratio_min": float(raw.min()),
            "ratio_mean": float(raw.mean()),
            "ratio_max": float(raw.max()),
            "corrected_ratio_min": float(corrected.min()),
            "corrected_ratio_max": float(corrected.max()),
            "model_device": str(next(model.parameters()).device),
        }
        log(
            f"logprobs {name}: |diff| mean {diff.mean():.2e} max {diff.max():.2e}, ratio {raw.min():.3f}-{raw.max():.3f}"
        )
        del model
    return results


def step_seeded_sampling(device: str) -> dict[str, Any]:
    """The batched seeded draw equals torch.multinomial with each row's own generator, on this device."""
    import torch

    from envharness.models.sampling import sample_tokens

    torch.manual_seed(0)
    logprobs = torch.log_softmax(3 * torch.randn(16, 8192, device=device), -1)
    expected = [
        int(torch.multinomial(logprobs[i].exp(), 1, generator=torch.Generator(device=device).manual_seed(i)))
        for i in range(16)
    ]
    got = sample_tokens(
        logprobs, 1.0, [torch.Generator(device=device).manual_seed(i) for i in range(16)]
    ).tolist()
    if got != expected:
        raise AssertionError(f"batched seeded draw {got} != per-row multinomial {expected}")
    return {"rows": 16, "equal": True}


def step_generation(path: Path, device: str, sizes: list[int], new_tokens: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envharness.models.transformers_backend import TransformersBackend

    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    results = {}
    for dtype in (torch.bfloat16, torch.float32):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        for n in sizes:
            key = f"{str(dtype)[6:]} x{n}"
            for seeded in (True, False):
                reqs = requests(n, new_tokens, seeded)
                backend = TransformersBackend(model, tokenizer)
                backend.generate_blocking(requests(n, new_tokens, seeded))  # warm-up: the same shapes
                rates = []
                for _ in range(REPEATS):
                    sync()
                    started = time.perf_counter()
                    gens = backend.generate_blocking(reqs)
                    sync()
                    rates.append(sum(len(g.completion_ids) for g in gens) / (time.perf_counter() - started))
                results[f"{key} {'seeded' if seeded else 'unseeded'} envharness"] = round(
                    statistics.median(rates), 1
                )
            texts = [
                tokenizer.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True)
                for r in reqs
            ]
            batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            rates = []
            with torch.no_grad():
                model.generate(**batch, max_new_tokens=new_tokens, do_sample=True)  # warm-up: the same shapes
                for _ in range(REPEATS):
                    sync()
                    started = time.perf_counter()
                    out = model.generate(
                        **batch,
                        max_new_tokens=new_tokens,
                        do_sample=True,
                        temperature=1.0,
                        top_k=0,
                        top_p=1.0,
                    )
                    sync()
                    seconds = time.perf_counter() - started
                    rates.append(
                        int((out[:, batch["input_ids"].shape[1] :] != tokenizer.pad_token_id).sum()) / seconds
                    )
            results[f"{key} hf_generate"] = round(statistics.median(rates), 1)
            log(
                f"generation {key} (median of {REPEATS}): envharness {results[f'{key} seeded envharness']:.0f} (seeded) / "
                f"{results[f'{key} unseeded envharness']:.0f} (unseeded) tok/s, HF generate {results[f'{key} hf_generate']:.0f} tok/s"
            )
        if device == "cuda" and dtype == torch.bfloat16:
            profile_batch(model, tokenizer, requests(sizes[0], 16), PROFILE_DIR)
        del model
    return results


def profile_batch(model: Any, tokenizer: Any, reqs: list[Any], out: Path) -> None:
    """Where one decode batch spends its time (gen_profile.txt), for whoever makes it faster."""
    from torch.profiler import ProfilerActivity, profile

    from envharness.models.transformers_backend import TransformersBackend

    backend = TransformersBackend(model, tokenizer)
    backend.generate_blocking(reqs[:2])
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        backend.generate_blocking(reqs)
        sync()
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=30, max_name_column_width=50)
    (out / "gen_profile.txt").write_text(table)


#: A reward with spread for a random model (the check's own, registered in the child process
#: before `envharness train` starts): which tokens were sampled, folded to [0, 1).
SPREAD_REWARD = (
    "from envharness.integrations.trl import rewards; "
    "rewards.REWARD_FUNCS['spread'] = lambda completion_ids, **kw: [(sum(c) % 7) / 7 for c in completion_ids]; "
)


def envharness_cli(
    args: list[str], timeout: float, env: dict[str, str], launcher: list[str] = ()
) -> subprocess.CompletedProcess:
    """`envharness ARGS` with the spread reward registered; under `launcher` (torchrun's module and
    its options) the same command as the launcher's worker script."""
    code = (
        SPREAD_REWARD
        + "import sys; from envharness.cli import main; sys.argv[0] = 'envharness'; sys.exit(main())"
    )
    log("$ " + " ".join(["python", *launcher, "envharness", *args] if launcher else ["envharness", *args]))
    if launcher:
        script = PROFILE_DIR / "envharness_worker.py"  # a launcher starts a file, not `-c`
        script.write_text(code.replace("; ", "\n"))
        command = [sys.executable, *launcher, str(script), *args]
    else:
        command = [sys.executable, "-c", code, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    return done


def step_eval(path: Path, out: Path, device: str, env: dict[str, str]) -> dict[str, Any]:
    envharness_cli(
        [
            "eval",
            "--env",
            "textarena",
            "--tasks",
            "Wordle-v0",
            "--model",
            str(path),
            "--device",
            device,
            "--episodes",
            "8",
            "--max-turns",
            "3",
            "--max-new-tokens",
            "16",
            "--temperature",
            "1",
            "--out",
            str(out / "eval"),
            "--overwrite",
            "--no-progress",
        ],
        300,
        env,
    )
    summary = json.loads((out / "eval" / "summary.json").read_text())
    return {"placement": summary.get("placement"), "episodes": summary["tasks"][0].get("episodes")}


def step_policy(path: Path, device: str, env: dict[str, str]) -> dict[str, Any]:
    import httpx

    code = "import sys; from envharness.cli import main; sys.argv[0] = 'envharness'; sys.exit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "policy", "--model", str(path), "--device", device, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = ""
        while "listening on" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError(f"envharness policy exited {proc.returncode}")
        url = line.split("listening on ")[1].split()[0]
        rollout = httpx.post(f"{url}/rollouts", timeout=60).json()
        reply = httpx.post(
            f"{rollout['base_url']}/chat/completions",
            timeout=120,
            json={
                "model": "m",
                "messages": [{"role": "user", "content": WORDLE}],
                "max_tokens": 8,
                "temperature": 1.0,
            },
        ).json()
        httpx.post(f"{url}/rollouts/{rollout['rollout_id']}/end", timeout=60)
        sample = httpx.get(f"{url}/rollouts/{rollout['rollout_id']}/sample", timeout=60).json()
        return {
            "banner": line.strip(),
            "reply": reply["choices"][0]["message"].get("content"),
            "sample_keys": sorted(sample)[:8],
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def step_sft(path: Path, out: Path, device: str, env: dict[str, str]) -> dict[str, Any]:
    envharness_cli(
        [
            "sft",
            "--env",
            "textarena",
            "--tasks",
            "Wordle-v0",
            "--model",
            str(path),
            "--device",
            device,
            "--episodes",
            "4",
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--max-turns",
            "2",
            "--out",
            str(out / "sft"),
        ],
        300,
        env,
    )
    return {
        "log": [
            json.loads(line)
            for line in (out / "sft" / "train_log.jsonl").read_text().splitlines()
            if line.strip()
        ][-1]
    }


TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]


def step_train(
    path: Path,
    out: Path,
    device: str,
    rewards: list[str],
    name: str,
    env: dict[str, str],
    launcher: list[str] = (),
) -> dict[str, Any]:
    args = [
        "train",
        "--env",
        "textarena",
        "--tasks",
        "Wordle-v0",
        "--model",
        str(path),
        "--device",
        device,
        "--steps",
        "2",
        "--max-turns",
        "2",
        "--max-new-tokens",
        "16",
        "--num-generations",
        "4",
        "--groups-per-step",
        "2",
        "--save-steps",
        "100",
        "--overwrite",  # the check run again in the same folder
        "--out",
        str(out / name),
    ]
    for reward in rewards:
        args += ["--reward", reward]
    envharness_cli(args, 300, env, launcher)
    lines = [
        json.loads(line) for line in (out / name / "train_log.jsonl").read_text().splitlines() if line.strip()
    ]
    keep = (
        "step",
        "device",
        "dtype",
        "weights_dtype",
        "no_signal_skipped",
        "loss",
        "reward",
        "time/step_s",
        "time/generate_s",
        "time/env_s",
        "time/train_s",
    )
    return {
        "steps": [
            {k: v for k, v in line.items() if k in keep or k.startswith("sampling/")}
            for line in lines
            if "step" in line
        ]
    }


def step_split(path: Path, out: Path, device: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """The train-step bench's table (step, model alone, environment alone, rest), before and after."""
    before = []  # the bench's own "before" revision, through git
    if Path(".gpu-check/before/src").is_dir():
        before = ["--before", ".gpu-check/before"]  # carried by --prepare: no git on a GPU machine
    steps = "4"  # the first warms up
    if device == "cpu":  # checking the check: the "after" column and one timed step are enough
        before, steps = ["--before", ""], "2"
    command = [
        sys.executable, "bench/bench_train_step.py", "--env", "textarena", "--tasks", "Wordle-v0",
        "--model", str(path), "--device", device, "--steps", steps, "--repeats", "1", *before, "--profile", str(out),
    ]  # fmt: skip
    log("$ " + " ".join(command[1:]))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
    table = done.stdout[done.stdout.index("\n| code") :].strip() if "\n| code" in done.stdout else done.stdout
    (out / "train_step_split.md").write_text(table + "\n")
    log("step split:\n" + table)
    return {"table": table}


# -- the run ---------------------------------------------------------------------------------


ONLY: set[str] = set()  # main() sets it from --only


def run_step(report: dict[str, Any], name: str, fn: Callable[..., Any], *args: Any) -> None:
    if ONLY and name not in ONLY:
        return
    started = time.monotonic()
    log(f"== {name}")
    try:
        report[name] = {"ok": True, **fn(*args)}
    except Exception as exc:  # noqa: BLE001 - one failed step must not hide the others
        report[name] = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[-3000:],
            "traceback": traceback.format_exc()[-4000:],
        }
        log(f"!! {name} failed: {report[name]['error'][-600:]}")
    report[name]["seconds"] = round(time.monotonic() - started, 1)
    # written after every step: a check stopped by its time limit keeps what it found
    (PROFILE_DIR / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    import torch

    if torch.cuda.is_available():
        report[name]["cuda_max_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.empty_cache()


SPLIT = ("time/step_s", "time/generate_s", "time/env_s", "time/train_s")  # a train step, in seconds


def summary_table(report: dict[str, Any]) -> str:
    rows = ["| step | result |", "|---|---|"]
    for name, rec in report.items():
        if not isinstance(rec, dict) or "ok" not in rec:
            continue
        text = "ok" if rec["ok"] else f"FAILED: {rec['error'][:200]}"
        rows.append(f"| {name} ({rec['seconds']}s) | {text} |")
    for arm, r in report.get("logprobs", {}).items():
        if isinstance(r, dict) and "abs_diff_mean" in r:
            rows.append(
                f"| logprobs: {arm} | abs diff mean {r['abs_diff_mean']:.2e} max {r['abs_diff_max']:.2e}; ratio "
                f"{r['ratio_min']:.3f}-{r['ratio_max']:.3f}, corrected {r['corrected_ratio_min']:.3f}-{r['corrected_ratio_max']:.3f} |"
            )
    for name in ("train_signal", "train_launcher"):
        for step in report.get(name, {}).get("steps", []):
            split = ", ".join(
                f"{k[5:]} {step[k]:.2f}" for k in SPLIT if isinstance(step.get(k), (int, float))
            )
            if split:
                rows.append(f"| {name} step {step.get('step')} | {split} |")
    for key, value in report.get("generation", {}).items():
        if key not in ("ok", "seconds", "cuda_max_allocated_gib"):
            rows.append(f"| tokens/s {key} | {value} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu-check")
    parser.add_argument("--only", default="", help="comma-separated steps to run (default: all)")
    parser.add_argument("--work", default=None, help="where the model and the runs go (default: OUT/work)")
    parser.add_argument(
        "--cpu", action="store_true", help="run the steps on the CPU with a tiny model (checks the check)"
    )
    parser.add_argument(
        "--split-timeout",
        type=float,
        default=300,
        help="seconds for the step split's bench (2 runs and a profiled one)",
    )
    args = parser.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu:
        print(
            f"gpu-check: no CUDA GPU here (torch {torch.__version__}, CUDA build {torch.version.cuda}): nothing to check."
        )
        return 0
    device = "cuda" if cuda and not args.cpu else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    global PROFILE_DIR, ONLY
    PROFILE_DIR, ONLY = out, {n.strip() for n in args.only.split(",") if n.strip()}
    env = {
        **os.environ,
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    report: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)
        report["bf16_supported"] = torch.cuda.is_bf16_supported()
    import transformers

    report["transformers"] = transformers.__version__
    work = Path(args.work) if args.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    path = build_model(work, cuda=device == "cuda")
    big = device == "cuda"
    run_step(report, "logprobs", step_logprobs, path, device, 32 if big else 4, 48 if big else 8)
    run_step(report, "seeded_sampling", step_seeded_sampling, device)
    run_step(report, "generation", step_generation, path, device, [32, 64] if big else [4], 48 if big else 8)
    run_step(report, "eval", step_eval, path, work, device, env)
    run_step(report, "policy", step_policy, path, device, env)
    run_step(report, "sft", step_sft, path, work, device, env)
    run_step(report, "train_no_signal", step_train, path, work, device, ["success"], "train-no-signal", env)
    run_step(
        report, "train_signal", step_train, path, work, device, ["success", "spread"], "train-signal", env
    )
    run_step(
        report, "train_launcher", step_train, path, work, device, ["success", "spread"], "train-launcher", env,
        TORCHRUN,
    )  # fmt: skip
    run_step(report, "step_split", step_split, path, out, device, env, args.split_timeout)
    report["seconds"] = round(time.monotonic() - T0, 1)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(summary_table(report))
    print(f"gpu-check: {report['seconds']}s; everything in {out / 'gpu_check.json'}")
    return 0 if all(r.get("ok") for r in report.values() if isinstance(r, dict) and "ok" in r) else 1


if __name__ == "__main__":
    sys.exit(main())
