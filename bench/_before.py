"""The code before a change, run beside the current code in one benchmark run.

`before_env(rev)` unpacks ``src/`` of git revision `rev` into a temporary folder and returns the
environment variables that make a server process import that code instead (``PYTHONPATH`` comes
before the editable install). Same machine, same Chromium, same moment: only the code differs.
"""

from __future__ import annotations

import atexit
import io
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The last commit before issue 25's work (warm pool, cheap Playwright stacks, RenderDocument off).
BEFORE_ISSUE_25 = "688194c"
#: The last commit before task changes in place (document rewrite) and the demand-sized warm pool.
BEFORE_TASK_SWITCH = "9be0095"


def before_env(rev: str = BEFORE_ISSUE_25) -> dict[str, str] | None:
    """Environment variables for a server running `rev`'s code; None when git cannot give it
    (a shallow clone, no git), so that the benchmark can leave the column out. `rev` may also be
    a folder holding an unpacked ``src/`` (a machine with no git, such as the GPU check's)."""
    if (Path(rev) / "src").is_dir():
        return {"PYTHONPATH": str((Path(rev) / "src").resolve())}
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    folder = Path(tempfile.mkdtemp(prefix=f"envharness-{rev}-"))
    atexit.register(shutil.rmtree, folder, True)  # the benchmark's processes have ended by then
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return {"PYTHONPATH": str(folder / "src")}
