"""Python processes envharness starts import nothing from the folder they start in
(`core/child_python.py`): a BrowserGym worker (`python -m ...worker`, which put the current
folder first on its path) started where a planted `envharness/` package and `json.py` lie."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envharness.envs.browsergym.gym_engine.process import WorkerError, WorkerProcess

pytestmark = pytest.mark.timeout(300)


def test_a_browsergym_worker_imports_nothing_from_its_working_folder(tmp_path, monkeypatch):
    here = tmp_path / "here"
    (here / "envharness").mkdir(parents=True)
    markers = [tmp_path / "ran-envharness", tmp_path / "ran-json"]
    (here / "envharness" / "__init__.py").write_text(f"open({str(markers[0])!r}, 'w').write('pwned')\n")
    (here / "json.py").write_text(f"open({str(markers[1])!r}, 'w').write('pwned')\n")
    monkeypatch.chdir(here)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)

    async def ask() -> str:
        worker = await WorkerProcess.start()
        try:
            with pytest.raises(WorkerError) as refused:  # an unknown command: answered by its loop
                await worker.request({"cmd": "nothing"}, timeout_s=240)
            return str(refused.value)
        finally:
            await worker.close()

    said = asyncio.run(ask())
    assert "nothing" in said, said
    assert not [m.name for m in markers if m.exists()]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_ranks_of_train_processes_import_nothing_from_the_working_folder(tmp_path):
    """`envharness train --processes 2` started in a folder with a planted `envharness/`: torchrun
    started each rank as `python -u -m envharness.cli`, which put that folder first on its path."""
    here = tmp_path / "here"
    (here / "envharness").mkdir(parents=True)
    marker = tmp_path / "ran-envharness"
    (here / "envharness" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    env = {
        k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "PYTHONSAFEPATH")
    }
    train = [str(Path(sys.executable).with_name("envharness")), "train", "--env", "textarena", "--tasks",
             "Wordle-v0", "--model", "tiny", "--processes", "2", "--threads", "1", "--out", str(tmp_path / "run"),
             "--steps", "1"]  # fmt: skip
    process = subprocess.Popen(train, cwd=here, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=800)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
    assert not marker.exists(), stderr[-3000:]
    assert process.returncode == 0, stderr[-3000:]
    assert stdout.count("trained 1 step") == 1, stdout[-2000:]
