"""Python processes envharness starts import nothing from the folder they start in
(`core/child_python.py`): a BrowserGym worker (`python -m ...worker`, which put the current
folder first on its path) started where a planted `envharness/` package and `json.py` lie. The
ranks of `train --processes 2` are checked the same way by test_many_processes.py's two-process
runs (started in a folder with a planted `envharness/` and `pydantic.py`)."""

from __future__ import annotations

import asyncio

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
