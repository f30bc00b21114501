"""Where `train` runs when a launcher (`torchrun`, `accelerate launch`, `--processes N`) starts
it as several processes: which rank this is, and the few things that must be one decision or
one file across ranks. Everything rank-aware in `train` asks here; one process is rank 0 of 1,
and then nothing here talks to another process.

The launcher sets `WORLD_SIZE`, `RANK` and `LOCAL_RANK`; TRL's trainer (accelerate) joins the
process group. The collectives here use that group, so they are called only once training
has started (rollouts, loss passes, callbacks), at the same point on every rank. A thread that
calls them beside the trainer's (`--async`'s sampling thread) gives them a group of its own
(`side_group`, `collectives_on`): two threads' collectives on one group would interleave in an
order that differs between ranks, and a rank would wait on a call the other never makes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from envharness.core.child_python import SAFE_PATH_ENV
from envharness.harness.records import EpisodeRecordWriter
from envharness.harness.types import HarnessRolloutResult
from envharness.integrations.trl import rendezvous
from envharness.integrations.trl.layers import Layer, Rollout


def world_size() -> int:
    """How many processes train together (1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's place among them (0 writes the files)."""
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Whether this process writes the run's files and prints its progress."""
    return rank() == 0


def _joined() -> bool:
    import torch.distributed as dist

    return world_size() > 1 and dist.is_available() and dist.is_initialized()


_thread = threading.local()  # .group: this thread's process group (None: the launcher's)


def side_group() -> Any:
    """A process group of every rank beside the launcher's, for a thread whose collectives run
    while the trainer's do (gloo: small objects on the CPU). A collective call itself: every rank
    creates it at the same point. None under one process."""
    if not _joined():
        return None
    import torch.distributed as dist

    return dist.new_group(backend="gloo")


@contextlib.contextmanager
def collectives_on(group: Any) -> Iterator[None]:
    """This thread's collectives (`all_agree`, `all_gather`, `gather_to_main`, `barrier`) on
    `group` while inside; other threads keep theirs."""
    previous = getattr(_thread, "group", None)
    _thread.group = group
    try:
        yield
    finally:
        _thread.group = previous


def _group() -> Any:
    return getattr(_thread, "group", None)


def all_agree(flag: bool) -> bool:
    """True only where every rank's `flag` is True: one decision (a step skipped on every rank
    or on none, so DDP's gradient all-reduce never waits on a rank that skipped)."""
    if not _joined():
        return flag
    import torch
    import torch.distributed as dist

    value = torch.tensor([1 if flag else 0], device=_collective_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN, group=_group())
    return bool(value.item())


def gather_to_main(items: list[Any]) -> list[Any]:
    """Every rank's `items`, in rank order, on rank 0 (an empty list elsewhere)."""
    if not _joined():
        return list(items)
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size() if is_main() else []
    dist.gather_object(list(items), gathered if is_main() else None, dst=0, group=_group())
    return [item for part in gathered for item in part] if is_main() else []


def any_rank(flag: bool) -> bool:
    """True where some rank's `flag` is True (a time budget spent on one rank stops them all)."""
    return not all_agree(not flag)


def all_gather(items: list[Any]) -> list[Any]:
    """Every rank's `items`, in rank order, on every rank."""
    if not _joined():
        return list(items)
    import torch.distributed as dist

    gathered: list[Any] = [None] * world_size()
    dist.all_gather_object(gathered, list(items), group=_group())
    return [item for part in gathered for item in part]


def join() -> None:
    """Join the launcher's process group now (accelerate's own rendezvous: gloo on a CPU,
    NCCL on GPUs), so rank 0 can prepare the run folder while the others wait."""
    if world_size() > 1:
        from accelerate import PartialState

        PartialState()


def local_rank() -> int:
    """This process's place on its machine (0 starts the machine's servers)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


@contextlib.contextmanager
def one_per_machine(start: Callable[[], AbstractContextManager[str]]) -> Iterator[str]:
    """The URL of a server `start` opens once per machine: local rank 0 starts it, and every
    rank of that machine plays on it. It stops once every rank is done with it."""
    if not _joined():
        with start() as url:
            yield url
        return
    machine = os.environ.get("GROUP_RANK") or socket.gethostname()  # torchrun's node rank
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(start()) if local_rank() == 0 else None
        urls = {node: u for node, u in all_gather([(machine, url)]) if u}
        yield urls[machine]
        barrier()  # not on an error: the launcher stops every rank then


def barrier() -> None:
    """Wait for every rank (after rank 0 prepared the run folder)."""
    if _joined():
        import torch.distributed as dist

        dist.barrier(group=_group())


def leave(code: int = 0) -> None:
    """End this rank of a many-process run with `code`, once every rank is done: wait for the
    others, close the process group, run Python's exit handlers, and end the process without the
    interpreter's teardown. That teardown frees the trainer's C++ objects (DDP's reducer, gloo's
    pairs and threads) in no set order, and now and then one aborts ("terminate called without an
    active exception", SIGABRT) after a good run, which the launcher reports as a failed run.
    One process returns and ends as usual."""
    if not _joined():
        return
    import atexit

    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    atexit._run_exitfuncs()  # servers this process started, logging
    sys.stdout.flush()
    sys.stderr.flush()
    if code == 0 and multiprocessing.parent_process() is not None:
        return  # a rank `launch` forked returns to torch's wrapper, which ends it the same way
    os._exit(code)


def _collective_device() -> Any:
    """NCCL reduces tensors on the GPU; gloo on the CPU."""
    import torch
    import torch.distributed as dist

    if dist.get_backend(_group()) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class RankedRecords(EpisodeRecordWriter):
    """`episodes.jsonl` written once by rank 0: every rank keeps its episodes (each with its rank
    in `metrics.rank`) until `flush()`, which the rollout calls on every rank after each
    generation batch; rank 0 then writes them all in rank order. One process writes at once."""

    def __init__(self, path: Any, *, append: bool = False, include_tokens: bool = False):
        self.path = path
        self.include_tokens = include_tokens
        self._pending: list[dict[str, Any]] = []
        self._file = Path(path).open("a" if append else "w", encoding="utf-8") if is_main() else None  # noqa: SIM115 (closed by close())

    def write(self, result: HarnessRolloutResult) -> Any:
        from envharness.harness.records import record_from_result

        if world_size() > 1:
            result.metrics["rank"] = rank()
        record = record_from_result(result, include_tokens=self.include_tokens)
        self._pending.append(record.to_dict())
        return record

    def flush(self) -> None:
        """Every rank's episodes since the last flush into the file (a collective call)."""
        pending, self._pending = self._pending, []
        lines = gather_to_main(pending)
        if self._file is not None and lines:
            self._file.write("".join(json.dumps(line) + "\n" for line in lines))
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class RankFlush(Layer):
    """The layer that hands the episodes to `records` on every rank once a rollout returns (the
    outermost: every rank's flush is the same collective call)."""

    def __init__(self, inner: Rollout, records: RankedRecords) -> None:
        super().__init__(inner)
        self.flushed = records

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        try:
            return self.inner(prompts, trainer)
        finally:
            self.flushed.flush()


#: The file in the run folder that holds the configuration the parent checked, for its ranks.
LAUNCH_CONFIG = "launch_config.json"


def write_launch_config(config: Any, argv: list[str]) -> Path:
    """The configuration the parent checked, written once into its run folder for the ranks to
    load (`read_launch_config`) instead of parsing the command line again, with that command
    line (`argv`: what an interrupted rank names to resume). Returns the file's path."""
    from dataclasses import asdict

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LAUNCH_CONFIG
    path.write_text(json.dumps({"config": asdict(config), "argv": list(argv)}, indent=1), encoding="utf-8")
    return path


def read_launch_config(path: str | Path) -> tuple[Any, list[str]]:
    """(the `TrainConfig`, the command line) the parent wrote (`write_launch_config`)."""
    from envharness.integrations.trl.config import TrainConfig

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return TrainConfig(**data["config"]), list(data["argv"])


#: What every rank imports before it trains (with its entry point's module): imported once, by
#: the forkserver the ranks fork from, rather than once a rank (`from trl import GRPOTrainer`
#: alone is ~9 s of CPU). Importing them initialises no CUDA, so a rank forked after them can
#: still use its GPU.
RANK_PRELOAD = ["envharness.integrations.trl.training", "trl.trainer.grpo_trainer"]


def _quiet_agent_failures(record: logging.LogRecord) -> bool:
    """The agent's logged traceback of a failed rank is left out: `launch` says it in a line."""
    return record.exc_info is None


def _prepare_forkserver(entrypoint: Callable[..., None]) -> None:
    """This process's environment and multiprocessing's settings for the forkserver `launch`'s
    agent starts (and its ranks inherit); the same on every call."""
    os.environ.update({SAFE_PATH_ENV: "1", "PYTHONUNBUFFERED": "1"})  # -P -u
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())  # for `stop_with_the_launcher`
    # should an import ask whether there is a GPU, NVML answers: asking CUDA itself would
    # initialise it in the forkserver, and no rank forked after that could use its GPU
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    multiprocessing.set_forkserver_preload([*RANK_PRELOAD, entrypoint.__module__])
    # a failed rank is said in one line: not also as the agent's traceback, nor as the resource
    # tracker's note on the semaphores of the ranks the agent stopped
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_quiet_agent_failures)
    quiet = "ignore:resource_tracker:UserWarning"
    warnings = [w for w in os.environ.get("PYTHONWARNINGS", "").split(",") if w]
    os.environ["PYTHONWARNINGS"] = ",".join(warnings if quiet in warnings else [*warnings, quiet])


def launch(argv: list[str], processes: int, device: str | None, entrypoint: Callable[..., None]) -> int:
    """`entrypoint(*argv)` (a module-level function: `train`'s `run_rank`) as `processes` ranks
    through torch.distributed.run's agent, run in this process (one machine, its own rendezvous on
    loopback); returns 0, or 1 once a rank failed. The agent stops every rank when one fails; this
    says which one did, in a line instead of the launcher's traceback. A rank that succeeds returns
    from `entrypoint` (the agent waits for its result); one that fails ends with its exit status.

    The ranks fork from a forkserver (torchrun's `--start-method forkserver`) that has imported
    `RANK_PRELOAD` and the entry point's module: a fresh interpreter, started with `-P`'s
    PYTHONSAFEPATH (nothing imported from the cwd: core/child_python.py), not this process, which
    has threads of its own."""
    import torch
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    if (device or "").startswith("cuda") or (device in (None, "auto") and torch.cuda.is_available()):
        gpus = torch.cuda.device_count()
        if processes > gpus:
            raise ValueError(f"--processes {processes}: this machine has {gpus} GPU(s), one process per GPU")
    rendezvous.register()
    os.environ.update(rendezvous.loopback_sockets_env())  # the ranks inherit the agent's environment
    _prepare_forkserver(entrypoint)
    # torchrun's own parsing (it also gives each rank OMP_NUM_THREADS=1 unless the user set it);
    # the script name is a placeholder: the ranks run `entrypoint`
    config, _, _ = config_from_args(
        parse_args([*rendezvous.launcher_args(processes), "--start-method", "forkserver", "envharness"])
    )
    try:
        elastic_launch(config, entrypoint=entrypoint)(*argv)
    except ChildFailedError as exc:
        failed, failure = first_own_failure(exc.failures)
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
        raise RankFailedError(
            f"rank {failed} of {processes} failed ({how}, pid {failure.pid}); the launcher stopped the other "
            "rank(s). That rank's own output above says why."
        ) from None
    return 0


#: The launcher's pid, in its ranks' environment (`launch` sets it).
LAUNCHER_PID_ENV = "ENVHARNESS_LAUNCHER_PID"


def stop_with_the_launcher() -> None:
    """SIGTERM this rank once the process that launched it has exited, in any way (SIGKILL too):
    train's guard then stops it as it stops for Ctrl-C. The kernel's parent-death signal cannot
    do it: a rank's parent is the forkserver, which lives on while any rank does."""
    pid = os.environ.get(LAUNCHER_PID_ENV)
    if pid:
        from envharness.core.lifecycle import watch_process

        watch_process(int(pid), lambda: os.kill(os.getpid(), signal.SIGTERM))


#: The exit status of a rank that stopped only because another one ended (a collective whose peer
#: went away): the launcher names the rank that failed of its own accord, not this one.
STOPPED_BY_ANOTHER_RANK = 75
#: Exit codes of a rank that did not fail of its own accord: 75, or the SIGTERM torch's agent
#: sends the others once one failed (128 + 15 through `train`'s signal guard, -15 without it).
STOPPED_BY_THE_LAUNCHER = frozenset({STOPPED_BY_ANOTHER_RANK, 128 + signal.SIGTERM, -signal.SIGTERM})
#: How long a rank that stops only because another one ended waits before it exits: the launcher
#: (which polls every 0.1 s and reports the first rank it finds ended) then finds the rank that
#: failed first, and names that one.
STOPPED_RANK_GRACE_S = 2.0


def stopped_by_another_rank() -> int:
    """The exit status of a rank whose peer went away, returned after `STOPPED_RANK_GRACE_S`."""
    import time

    time.sleep(STOPPED_RANK_GRACE_S)
    return STOPPED_BY_ANOTHER_RANK


def first_own_failure(failures: dict[int, Any]) -> tuple[int, Any]:
    """(rank, torch's `ProcessFailure`) of the rank to name: the first that failed of its own
    accord. torch's `get_first_failure` orders by whole seconds, then by rank, so a rank 0 that
    stopped in the same second as the rank 1 it waited on would be named in its place."""
    own = {r: f for r, f in failures.items() if f.exitcode not in STOPPED_BY_THE_LAUNCHER} or failures
    rank = min(own, key=lambda r: (own[r].timestamp, r))
    return rank, own[rank]


class RankFailedError(RuntimeError):
    """A rank of a `--processes N` run died; the others were stopped."""
