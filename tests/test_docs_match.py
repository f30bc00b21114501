"""What the docs say about files is true of them: each module path they name exists, and a line
count they give for a file is its count ("`examples/custom_env/guess.py`, 64 lines")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: A repository path in backticks (or a link to it), then within a few characters "N lines".
COUNTED = re.compile(r"`((?:examples|src|bench|scripts)/[\w/.-]+\.\w+)`\]?(?:\([^)]*\))?,? (\d+) lines")


PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A path in backticks with a folder in it: `integrations/trl/training.py`, `examples/x/y.py`.
NAMED = re.compile(r"`([\w.-]+(?:/[\w.-]+)+\.(?:py|js|html|md|toml))(?::[\w.]+)?`")
#: Where a path the docs name may start: the repository, the package, the page's own folder.
BASES = [ROOT, ROOT / "src" / "envharness", ROOT / "src"]


def _exists(path: str, page: Path) -> bool:
    """From a base, or inside a package the page's section is about (`kinds/seated.py`)."""
    if any((base / path).exists() for base in [*BASES, page.parent]):
        return True
    return any(ROOT.glob(f"src/envharness/**/{path}")) or any(ROOT.glob(f"examples/**/{path}"))


def test_every_file_the_docs_name_exists():
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in PAGES
        for path in NAMED.findall(page.read_text(encoding="utf-8"))
        if not _exists(path, page)
    ]
    assert missing == []


def test_every_line_count_the_docs_give_for_a_file_is_its_count():
    claims = [
        (page.name, path, int(n))
        for page in PAGES
        for path, n in COUNTED.findall(page.read_text(encoding="utf-8").replace("\n", " "))
    ]
    assert len(claims) >= 2  # CONTRIBUTING.md and new_environment.md count the small example
    wrong = [
        f"{page}: {path} is said to have {n} lines, has {len((ROOT / path).read_text().splitlines())}"
        for page, path, n in claims
        if len((ROOT / path).read_text().splitlines()) != n
    ]
    assert wrong == []
