"""One GRPO step of `envharness train` against its parts alone: the model's forward passes and the
environment's work, before and after a change, in one run.

Each column is a fresh process running `train()` (real TRL `GRPOTrainer`, real Chromium behind a
`browsergym` server on loopback, or a `textarena` server) for `--steps` steps of
`--groups` x `--generations` episodes, `--turns` turns of `--tokens` tokens each; the "before"
column runs the same with ``src/`` of `--before REV` (`_before.py`). After training, in the same
process and on the same server:

- **step**: TRL's step wall time (`time/step_s`, median over the steps after the first); beside it
  the in-step split that `step_timing.py` logs (generation, the rest of the rollout);
- **model alone**: the model's own forward passes for the shape of one step, timed by themselves:
  per turn, a prefill of every episode's new prompt tokens (turn 1: the whole prompt, each
  episode its own row; later turns: only the tokens the environment added, on the cache of the
  turns before) with ``logits_to_keep=1``, then one decode pass per further completion token, all
  episodes in one batch; no sampling, no Python per token;
- **environment alone**: each step's recorded episodes played again on the same server, all at
  once, without a model (`replay_episode`: reset, the same tool calls, verify); beside it the
  same **turn by turn** (every reset, then every first call, ...: the rollout's own schedule,
  where each round waits for its slowest episode while the model decodes in between);
- **rest** = step - model alone - environment alone; **ratio** = step / (model + environment);
- **decoding thread's CPU per step**: `time.thread_time` of the decoder's worker thread in each
  step (median), which moves less with the machine's load than any wall time; beside it the
  **trainer thread's CPU per step** (the rollout's event loop, sessions and records, and the loss),
  which takes the interpreter lock from the decoder whenever it runs Python.

    PYTHONPATH=src PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_train_step.py [--before d80ae1c]
    ... --env textarena --tasks Wordle-v0            # a TextArena game instead of the browser
    ... --device cuda --model ./smollm2-360m         # the GPU check's model on a GPU
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _before import before_env

DEFAULT_TASKS = {"browsergym": ["click-test", "enter-text"], "textarena": ["Wordle-v0"]}


# -- the worker: one column, in its own process --------------------------------------------------
def model_alone(model: Any, shape: dict[str, int], repeats: int = 7) -> float:
    """Seconds of the model's forward passes for one step's shape (median of `repeats`)."""
    import torch

    from envharness.models.prefix_cache import forward_with_cache

    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    rows = shape["episodes"]
    was_training = model.training
    model.eval()

    def once() -> float:
        started = time.perf_counter()
        past = None
        for turn in range(shape["turns"]):
            width = shape["prompt_tokens"] if turn == 0 else shape["env_tokens_per_turn"]
            ids = torch.randint(0, vocab, (rows, max(width, 1)), device=device)
            for _ in range(shape["completion_tokens_per_turn"]):  # the prefill samples the first
                _, past = forward_with_cache(model, past, input_ids=ids, logits_to_keep=1)
                ids = torch.randint(0, vocab, (rows, 1), device=device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    # on a GPU `train` keeps float32 weights and runs the model under bf16 autocast (precision.py)
    autocast = device.type == "cuda" and next(model.parameters()).dtype == torch.float32
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.inference_mode(), amp:
        once()  # warm-up
        seconds = statistics.median(once() for _ in range(repeats))
    model.train(was_training)
    return seconds


def step_shape(records: list[Any]) -> dict[str, int]:
    """The step's shape from its episode records: episodes, turns, the longest first prompt,
    tokens per turn of the model and of the environment."""
    metrics = [r.metrics for r in records]
    turns = max(int(m.get("turns", 1)) for m in metrics)
    model_tokens = max(int(m.get("model_tokens", 0)) for m in metrics)
    env_tokens = max(int(m.get("env_tokens", 0)) for m in metrics)
    return {
        "episodes": len(records),
        "turns": turns,
        "prompt_tokens": max(int(m.get("prompt_tokens", 0)) for m in metrics),
        "completion_tokens_per_turn": max(1, model_tokens // turns),
        "env_tokens_per_turn": env_tokens // max(1, turns - 1) if turns > 1 else 0,
    }


async def environment_alone(env: str, clients: Any, records: list[Any]) -> float:
    """Seconds to play `records` again at once on the server behind `clients`, without a model."""
    from envharness.core.registry import env_harness
    from envharness.replay.episode import replay_episode

    harness = env_harness(env)
    factory = harness.session_factory(
        clients, default_task=records[0].task, reset_kwargs=dict(harness.reset_kwargs)
    )
    started = time.perf_counter()
    replays = await asyncio.gather(*(replay_episode(factory, r) for r in records))
    seconds = time.perf_counter() - started
    broken = [r for r in replays if r.skipped]
    if broken:
        raise RuntimeError(f"replay could not play {len(broken)} episode(s): {broken[0].skipped}")
    return seconds


async def environment_turn_by_turn(env: str, clients: Any, records: list[Any]) -> float:
    """Seconds to play `records` again turn by turn, as the rollout's schedule has it: every
    episode's reset, then every episode's first tool call, ... each round waiting for its
    slowest episode (the model decodes between rounds in the step). What the environment costs
    the step when the model costs nothing; `environment_alone` lets each episode run free."""
    from envharness.core.registry import env_harness
    from envharness.harness.adapter import call_tool_checked
    from envharness.harness.session import call_session, create_session
    from envharness.harness.tools import tool_name

    harness = env_harness(env)
    factory = harness.session_factory(
        clients, default_task=records[0].task, reset_kwargs=dict(harness.reset_kwargs)
    )
    started = time.perf_counter()
    sessions = await asyncio.gather(*(create_session(factory, r.task, r.seed, None) for r in records))
    await asyncio.gather(*(call_session(s, "initial_messages") for s in sessions))
    tools = [{tool_name(t): t for t in await call_session(s, "list_tools")} for s in sessions]
    for turn in range(max(len(r.tool_calls) for r in records)):
        calls = [
            call_tool_checked(
                s, by_name, str(r.tool_calls[turn]["name"]), dict(r.tool_calls[turn].get("arguments") or {})
            )
            for s, by_name, r in zip(sessions, tools, records)
            if turn < len(r.tool_calls)
        ]
        await asyncio.gather(*calls)
    await asyncio.gather(*(call_session(s, "verify", [], None) for s in sessions))
    await asyncio.gather(*(call_session(s, "close") for s in sessions))
    return time.perf_counter() - started


def thread_cpu_seconds(name: str) -> Callable[[], float]:
    """A clock of the CPU seconds spent so far by every thread called `name` (the decoder's
    worker thread), ended or running: what moves less than wall time with the machine's load.
    Bench instrumentation, patched into `threading.Thread.run`."""
    import threading

    ended = [0.0]
    running: dict[int, int] = {}  # thread ident -> its CPU clock
    run = threading.Thread.run

    def timed_run(self: threading.Thread) -> None:
        if self.name != name:
            return run(self)
        running[threading.get_ident()] = time.pthread_getcpuclockid(threading.get_ident())
        try:
            run(self)
        finally:
            ended[0] += time.thread_time()
            running.pop(threading.get_ident(), None)

    def clock() -> float:
        total = ended[0]
        for clock_id in list(running.values()):
            with contextlib.suppress(OSError):  # ended since: counted in `ended`
                total += time.clock_gettime(clock_id)
        return total

    threading.Thread.run = timed_run  # type: ignore[method-assign]
    return clock


def parts_after_each_step(
    env: str, clients: Any, records_path: Path, decoder_cpu: Callable[[], float]
) -> Any:
    """A callback that times each step's parts (model alone, environment alone, on that step's
    records) right after the step, so a step and its parts share the machine's load of the
    moment: `times[step] = (model_s, env_s)`."""
    from transformers import TrainerCallback

    from envharness.harness.records import read_records

    class PartsAfterEachStep(TrainerCallback):
        times: dict[int, tuple[float, float]] = {}
        decoder_cpu_s: dict[int, float] = {}  # the decoding thread's CPU seconds in each step
        trainer_cpu_s: dict[int, float] = {}  # the trainer's own thread (rollout loop, records, loss)

        def on_step_begin(self, args, state, control, **kwargs):
            self._cpu_before = decoder_cpu()
            self._trainer_before = time.thread_time()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            step = state.global_step
            self.decoder_cpu_s[step] = decoder_cpu() - self._cpu_before
            self.trainer_cpu_s[step] = time.thread_time() - self._trainer_before
            records = [
                r for r in read_records(records_path) if int(r.metrics.get("train_step", -1)) == step - 1
            ]
            if model is not None and records:
                model_s = model_alone(model, step_shape(records), repeats=3)
                self.times[step] = (model_s, asyncio.run(environment_alone(env, clients, records)))

    return PartsAfterEachStep()


def profile_decoder(out: Path) -> Callable[[], None]:
    """Profile the decoding thread in this process (both profilers see only the thread they
    start in): Python functions over every run of the thread (cProfile), and torch's operator
    table, with CUDA time on a GPU, of one run after the first (the profiler is one per process:
    a backend's thread can still be ending when the next step's starts, so only one run gets it).
    Returns the function that writes both."""
    import cProfile
    import io
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    from envharness.models import continuous

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    state: dict[str, Any] = {"runs": 0, "taken": False, "table": "no run after the first", "python": None}
    guard = threading.Lock()
    run = continuous.ContinuousDecoder._run

    def profiled(self: Any) -> None:
        with guard:
            take = state["runs"] >= 1 and not state["taken"]
            state["taken"] |= take
        python = cProfile.Profile()  # one per run: runs of two threads can overlap
        python.enable()
        try:
            if take:
                started = time.perf_counter()
                with profile(activities=activities) as prof:
                    run(self)
                seconds = time.perf_counter() - started
                table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
                state["table"] = f"one decoder run of {seconds:.2f}s\n{table}"
            else:
                run(self)
        finally:
            python.disable()
            with guard:
                state["runs"] += 1
                if state["python"] is None:
                    state["python"] = pstats.Stats(python)
                else:
                    state["python"].add(python)

    continuous.ContinuousDecoder._run = profiled  # type: ignore[method-assign]

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        text = io.StringIO()
        if state["python"] is not None:
            state["python"].stream = text
            state["python"].sort_stats("cumulative").print_stats(60)
            state["python"].dump_stats(out / "decoder_python.prof")  # for pstats' callers and callees
        (out / "decoder_python.txt").write_text(text.getvalue())
        (out / "decoder_ops.txt").write_text(state["table"])

    return write


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Train, then time the parts alone; the medians over the steps after the first."""
    import torch

    from envharness.harness.records import read_records
    from envharness.integrations.trl.config import TrainConfig
    from envharness.integrations.trl.servers import env_clients
    from envharness.integrations.trl.training import train

    torch.set_num_threads(args.threads)
    folder = tempfile.TemporaryDirectory(prefix="bench-train-step-")  # the run's checkpoints go with it
    out = Path(folder.name)
    config = TrainConfig(
        env=args.env,
        tasks=args.tasks or DEFAULT_TASKS[args.env],
        model=args.model,
        max_steps=args.steps,
        num_generations=args.generations,
        groups_per_step=args.groups,
        max_turns=args.turns,
        max_completion_length=args.tokens,
        threads=args.threads,
        device=args.device,
        output_dir=str(out),
        report_to="none",
    )
    write_profile = profile_decoder(Path(args.profile)) if args.profile else None
    with env_clients(args.env) as clients:
        decoder_cpu = thread_cpu_seconds("envharness-decoder")
        paired = parts_after_each_step(args.env, clients, out / "episodes.jsonl", decoder_cpu)
        result = train(config, client_factory=clients, callbacks=[paired])
        logs = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        logs = [entry for entry in logs if "time/step_s" in entry][1:]  # the first step warms up
        records = read_records(out / "episodes.jsonl")
        by_step: dict[int, list[Any]] = {}
        for record in records:
            by_step.setdefault(int(record.metrics.get("train_step", 0)), []).append(record)
        steps = sorted(by_step)[1:]
        env_s = [asyncio.run(environment_alone(args.env, clients, by_step[s])) for s in steps]
        env_turns_s = [asyncio.run(environment_turn_by_turn(args.env, clients, by_step[s])) for s in steps]
        shape = step_shape(by_step[steps[-1]])
        model_s = model_alone(result.model, shape)
    if write_profile is not None:
        write_profile()
    folder.cleanup()
    return {
        "step_s": statistics.median(e["time/step_s"] for e in logs),
        "generate_s": statistics.median(e["time/generate_s"] for e in logs),
        "rollout_env_s": statistics.median(e["time/env_s"] for e in logs),
        "train_s": statistics.median(e["time/train_s"] for e in logs),
        "model_alone_s": model_s,
        "env_alone_s": statistics.median(env_s),
        "env_turns_s": statistics.median(env_turns_s),
        # each step against its own parts, timed right after it
        "paired_ratio": statistics.median(
            e["time/step_s"] / sum(paired.times[e["step"]]) for e in logs if e["step"] in paired.times
        ),
        "decoder_cpu_s": statistics.median(paired.decoder_cpu_s[e["step"]] for e in logs),
        "trainer_cpu_s": statistics.median(paired.trainer_cpu_s[e["step"]] for e in logs),
        # the decoder's own split (absent in code before it was logged)
        "decoder": {
            k[8:]: statistics.median(e[k] for e in logs) for k in logs[0] if k.startswith("decoder/")
        },
        "shape": shape,
    }


# -- the table -------------------------------------------------------------------------------
def run_column(argv: list[str], env: dict[str, str] | None, timeout: float) -> dict[str, Any]:
    process_env = {**os.environ, **(env or {})}
    process_env["PYTHONPATH"] = os.pathsep.join(
        p for p in ((env or {}).get("PYTHONPATH"), os.environ.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [sys.executable, __file__, "--worker", *argv],
        env=process_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def print_table(columns: dict[str, list[dict[str, Any]]]) -> None:
    keys = (
        "step_s", "generate_s", "rollout_env_s", "train_s", "model_alone_s", "env_alone_s", "paired_ratio",
        "decoder_cpu_s", "trainer_cpu_s",
    )  # fmt: skip
    turns = all("env_turns_s" in r for runs in columns.values() for r in runs)  # absent in old runs
    print(
        "\n| code | step (s) | in the step: generation | in the step: rest of rollout | in the step: loss pass | model alone (s) "
        "| environment alone (s) | rest (s) | step / (model + env) | the same, each step against its parts "
        "| decoding thread's CPU per step (s) | trainer thread's CPU per step (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in columns.items():
        m = {k: statistics.median(r[k] for r in runs) for k in keys}
        parts = m["model_alone_s"] + m["env_alone_s"]
        print(
            f"| {name} | {m['step_s']:.3f} | {m['generate_s']:.3f} | {m['rollout_env_s']:.3f} | {m['train_s']:.3f} | "
            f"{m['model_alone_s']:.3f} | {m['env_alone_s']:.3f} | {m['step_s'] - parts:.3f} | "
            f"{m['step_s'] / parts:.2f}x | {m['paired_ratio']:.2f}x | {m['decoder_cpu_s']:.2f} | {m['trainer_cpu_s']:.3f} |"
        )
    if turns:
        print_turn_by_turn(columns)
    print_decoder_split(columns)
    shape = next(iter(columns.values()))[0]["shape"]
    print(f"\nshape of a step: {shape}")


def print_turn_by_turn(columns: dict[str, list[dict[str, Any]]]) -> None:
    """The step against the environment played on the rollout's own schedule (turn by turn)."""
    print(
        "\n| code | environment alone, free (s) | environment alone, turn by turn (s) | step / (model + env turn by turn) |"
    )
    print("|---|---|---|---|")
    for name, runs in columns.items():
        m = {
            k: statistics.median(r[k] for r in runs)
            for k in ("step_s", "model_alone_s", "env_alone_s", "env_turns_s")
        }
        print(
            f"| {name} | {m['env_alone_s']:.3f} | {m['env_turns_s']:.3f} | "
            f"{m['step_s'] / (m['model_alone_s'] + m['env_turns_s']):.2f}x |"
        )


def print_decoder_split(columns: dict[str, list[dict[str, Any]]]) -> None:
    """The decoding thread's split of a step (train_log's `decoder/...`), where a column has it."""
    keys = ("forwards", "admissions", "forward_s", "admit_s", "sample_s", "finish_s")
    logged = {name: runs for name, runs in columns.items() if runs[0].get("decoder")}
    if not logged:
        return
    print(
        "\n| code | decode passes per step | admissions (prefill passes) | decode passes (s) | admissions (s) "
        "| sampling and stop checks (s) | finished rows (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, runs in logged.items():
        m = {k: statistics.median(r["decoder"].get(k, 0) for r in runs) for k in keys}
        print(
            f"| {name} | {m['forwards']:.0f} | {m['admissions']:.0f} | {m['forward_s']:.3f} | "
            f"{m['admit_s']:.3f} | {m['sample_s']:.3f} | {m['finish_s']:.3f} |"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="browsergym")
    parser.add_argument("--tasks", nargs="+", default=None)
    parser.add_argument("--model", default="tiny", help="tiny, embedded, a model directory or a hub id")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, auto")
    parser.add_argument("--steps", type=int, default=5, help="training steps per run (the first warms up)")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2, help="runs per column, alternating")
    parser.add_argument(
        "--before", default="d80ae1c", help="git revision for the 'before' column ('' for none)"
    )
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--profile", default="", help="folder for profiles of the decoding thread (one more run of this tree)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.worker:
        print(json.dumps(worker(args)), flush=True)
        return 0
    argv = [a for a in sys.argv[1:] if a not in ("--worker",)]
    if args.profile:  # a run of its own after the table: profilers slow a step
        argv = [
            a
            for i, a in enumerate(argv)
            if not a.startswith("--profile") and argv[i - 1 : i] != ["--profile"]
        ]
    variants: list[tuple[str, dict[str, str] | None]] = [("after (this tree)", None)]
    if args.before:
        env = before_env(args.before)
        if env is None:
            print(f"git cannot give {args.before}: no 'before' column", file=sys.stderr)
        else:
            variants.insert(0, (f"before ({args.before})", env))
    load = os.getloadavg()[0]
    columns: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    for repeat in range(args.repeats):
        for name, env in variants if repeat % 2 == 0 else variants[::-1]:
            columns[name].append(run_column(argv, env, args.timeout))
            print(f"run {repeat} {name}: {json.dumps(columns[name][-1])}", flush=True)
    print_table(columns)
    if args.profile:
        run_column([*argv, "--profile", args.profile], None, args.timeout)
        print(f"\nthe decoding thread of one more run of this tree, profiled: {args.profile}/decoder_*.txt")
    print(
        f"{args.env} {args.tasks or DEFAULT_TASKS[args.env]}, model {args.model} on {args.device}, "
        f"{args.threads} thread(s), medians of {args.repeats} run(s) x {args.steps - 1} step(s); "
        f"{os.cpu_count()} CPUs, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
