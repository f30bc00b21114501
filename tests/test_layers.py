"""Imports point one way: down the layers of docs/ARCHITECTURE.md, never up or across.

Every `import envharness.X` in the package (at module level or inside a function: a lazy
import is still a dependency) is checked against the layer order. What an environment
registers reaches the generic layers as "module:attribute" strings (core/registry.py), which
are not imports; that is the point.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envharness

PACKAGE = Path(envharness.__file__).parent
#: Deeper layers first; a module may import its own package and any package of a lower rank.
LAYERS = {
    "core": 0,
    "models": 1,
    "harness": 2, "mcp": 2,
    "envs": 3, "policy": 3,
    "prompts": 4, "web": 4, "fleet": 4,
    "eval": 5, "integrations": 5, "replay": 5,
    "cli": 6,
}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "envharness" else None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) < 2:
            continue  # envharness/__init__.py: the version only
        own = relative.parts[0]
        for line, module in _imports(path):
            other = _package(module)
            if other is None or other == own:
                continue
            if other not in LAYERS or own not in LAYERS:
                bad.append(f"{relative}:{line} imports {module}: a package missing from LAYERS")
            elif LAYERS[other] >= LAYERS[own]:
                direction = "across" if LAYERS[other] == LAYERS[own] else "up"
                bad.append(f"{relative}:{line} imports {module} ({own} -> {other}: {direction})")
    return bad


def test_every_import_points_down_the_layers():
    assert _violations() == []


def test_environments_do_not_know_each_other():
    bad = []
    for path in sorted((PACKAGE / "envs").rglob("*.py")):
        relative = path.relative_to(PACKAGE / "envs")
        if len(relative.parts) < 2:
            continue
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["envharness", "envs"] and len(parts) > 2 and parts[2] != relative.parts[0]:
                bad.append(f"envs/{relative}:{line} imports {module}")
    assert bad == []
