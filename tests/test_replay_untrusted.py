"""`envharness replay` on a run folder that came from someone else: the real command, run from
inside the folder, imports none of the Python it holds (neither in itself nor in the server it
starts), and a hostile config or record is refused in words, never with a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)
ENVHARNESS = Path(sys.executable).with_name("envharness")


def _replay(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed command, as a user types it; its own process group, killed on timeout."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "ENVHARNESS_NO_CWD_IMPORT")}
    process = subprocess.Popen(
        [str(ENVHARNESS), "replay", *args], cwd=cwd, env=environ, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def _run_folder(path: Path, config: dict | str, records: str) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    (path / "episodes.jsonl").write_text(records)
    return path


def test_replay_inside_a_run_folder_runs_none_of_its_python(tmp_path):
    """A planted `pydantic.py` and `envharness/` package would be imported first by a child
    started as `python -c ...` in that folder; each writes a marker if it ever runs."""
    run = _run_folder(
        tmp_path / "run",
        {"env": "echo"},
        json.dumps({"version": 1, "task": "echo", "env_reward": 0.0}) + "\n",
    )
    markers = {name: tmp_path / f"ran-{name}" for name in ("pydantic", "envharness")}
    (run / "pydantic.py").write_text(f"open({str(markers['pydantic'])!r}, 'w').write('pwned')\n")
    (run / "envharness").mkdir()
    (run / "envharness" / "__init__.py").write_text(
        f"open({str(markers['envharness'])!r}, 'w').write('pwned')\n"
    )
    done = _replay(run, ".")
    assert not [name for name, marker in markers.items() if marker.exists()], done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 episodes identical" in done.stdout, done.stdout
    report = json.loads((run / "replay.json").read_text())
    assert report["identical"] == 1


def test_hostile_run_folders_are_refused_in_words(tmp_path):
    record = json.dumps({"version": 1, "task": "echo"}) + "\n"
    deep = "[" * 100_000 + "]" * 100_000
    cases = {
        "a path for a name": (_run_folder(tmp_path / "name", {"env": "../../etc:passwd"}, record), "environment"),
        "nested config": (_run_folder(tmp_path / "nested", f'{{"env": "echo", "x": {deep}}}', record), "nested"),
        "huge number": (_run_folder(tmp_path / "number", '{"env": "echo", "x": ' + "9" * 5000 + "}", record), "digits"),
        "a list record": (_run_folder(tmp_path / "list", {"env": "echo"}, "[1, 2]\n"), "episodes.jsonl:1"),
        "nested record": (_run_folder(tmp_path / "deeprecord", {"env": "echo"}, deep + "\n"), "episodes.jsonl:1"),
    }  # fmt: skip
    for case, (folder, said) in cases.items():
        done = _replay(folder, str(folder))
        assert done.returncode == 2, (case, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (case, done.stderr)
        assert done.stderr.startswith("envharness replay: ") and said in done.stderr, (case, done.stderr)
