"""`envharness replay RUN_DIR`: play an eval's or a training run's episodes again on a fresh server.

Prints one line per episode (identical, or the first step where it differs and how) and a
total; writes `replay.json` beside the episodes. Exit 0 when every episode is identical,
1 when one differs or could not be replayed, 2 when the folder cannot be replayed at all.
Nothing is imported from the run's folder (a folder may come from anyone), even when replay
runs inside it: the environment's module must be installed or on PYTHONPATH, or named with `--env`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from envharness.core.registry import NO_CWD_IMPORT_ENV


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir", help="the folder `envharness eval --out` or `envharness train --output-dir` wrote"
    )
    parser.add_argument(
        "--env-url",
        default=None,
        help="a running server of the run's environment, started with the run's options (default: start one)",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="episodes replayed at once (default 4)")
    parser.add_argument("--out", default=None, help="where to write the report (default RUN_DIR/replay.json)")
    parser.add_argument(
        "--env",
        default=None,
        help="the environment (NAME or module:SPEC) instead of the one the run names; its module is imported "
        "from the installed packages and PYTHONPATH, never from the run's folder",
    )


def _line(episode) -> str:  # type: ignore[no-untyped-def]
    name = episode.episode_id or f"{episode.task} seed {episode.seed}"
    if episode.skipped:
        return f"  skipped    {name}: {episode.skipped}"
    if episode.findings:
        more = f" (+{len(episode.findings) - 1} more)" if len(episode.findings) > 1 else ""
        return f"  DIFFERENT  {name}: {episode.first_difference.describe()}{more}"
    return f"  identical  {name} ({episode.steps} steps)"


@contextlib.contextmanager
def no_code_from_the_run(run_dir: str) -> Iterator[None]:
    """Run from inside the run's folder (`cd RUN && envharness replay .`), nothing is imported
    from the current folder, here or in the servers replay starts: a module the run's author
    left there is never run. From any other folder, imports are as for every command."""
    run, here = Path(run_dir).resolve(), Path.cwd().resolve()
    if here != run and run not in here.parents:
        yield
        return
    saved_path, saved_env = list(sys.path), os.environ.get(NO_CWD_IMPORT_ENV)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != here]
    os.environ[NO_CWD_IMPORT_ENV] = "1"
    try:
        yield
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop(NO_CWD_IMPORT_ENV, None)
        else:
            os.environ[NO_CWD_IMPORT_ENV] = saved_env


def run(args: argparse.Namespace) -> int:
    from envharness.replay import ReplaySetupError, replay_run, write_report

    try:
        with no_code_from_the_run(args.run_dir):
            report = replay_run(
                args.run_dir,
                env_url=args.env_url,
                concurrency=args.concurrency,
                on_episode=lambda e: print(_line(e), flush=True),
                env=args.env,
            )
    except ReplaySetupError as exc:
        print(f"envharness replay: {exc}", file=sys.stderr)
        return 2
    if report.caveat:
        print(f"envharness replay: note: {report.caveat}")
    if any(not e.observations_compared for e in report.episodes):
        print(
            "envharness replay: note: some records keep no observation fingerprints (written by an older "
            "envharness): their rewards and done flags were compared, not their observations"
        )
    path = write_report(report, args.out or Path(args.run_dir) / "replay.json")
    total = len(report.episodes)
    print(
        f"envharness replay: {report.identical}/{total} episodes identical, {len(report.differing)} different, "
        f"{len(report.skipped)} skipped ({report.run.env}, {report.run.kind} run); report: {path}"
    )
    return 0 if report.identical == total else 1
