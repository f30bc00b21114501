"""How envharness starts a Python process of its own: never importing from the folder it stands in.

`python -c CODE` and `python -m MODULE` put the current folder first on the child's import
path, so a `pydantic.py` or an `envharness/` folder where the user stands would be imported in
place of the real one: `cd RUN && envharness replay .` on a run folder someone sent would run
their code in the server replay starts. `-P` (Python 3.11's safe path) leaves that folder out,
and PYTHONSAFEPATH=1 in the child's environment does the same for the Python processes it
starts in turn (a server's BrowserGym worker, whatever an environment launches).

Every child keeps the caller's working folder: relative paths in its arguments (a run's
`--output-dir`, an option naming a file) mean what the user meant. Nothing is imported from it
unless asked: `envharness serve guess:SPEC` still finds guess.py there (`core/registry.py`),
appended after the installed packages, so it cannot stand in for one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

#: Python's own switch for `-P`, inherited by every Python process the child starts.
SAFE_PATH_ENV = "PYTHONSAFEPATH"


def python_command(*args: str) -> list[str]:
    """`python -P ARGS` with this interpreter: what every Python child of envharness runs."""
    return [sys.executable, "-P", *args]


def child_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's), with the safe import path for the child's children."""
    child = dict(os.environ if environ is None else environ)
    child[SAFE_PATH_ENV] = "1"
    return child


__all__ = ["SAFE_PATH_ENV", "child_environ", "python_command"]
