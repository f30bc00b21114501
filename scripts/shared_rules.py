"""Rules written more than once, and old names kept alive, as the closing notes of refactoring
issues count them: each refusal message raised in more than one place, the three shared rules
the issue names, and the places that keep a name importable from where it no longer lives.

    python scripts/shared_rules.py [src/envharness]
"""

from __future__ import annotations

import argparse
import ast
import collections
import re
from pathlib import Path

#: A rule the configs share -> a pattern of its refusal's words.
NAMED_RULES = {
    "one of --env-url, --env-urls, --servers": r"give (one of|either).*(env-url|servers)",
    "--ray-address needs --servers": r"--ray-address needs",
    "a model opponent trains on one process": r"trains on one process; it cannot run as --processes",
}


def refusal_text(node: ast.Raise) -> str | None:
    """The first argument of `raise SomeError(...)` with its f-string fields as `{}`."""
    if not (isinstance(node.exc, ast.Call) and node.exc.args):
        return None
    arg = node.exc.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value.strip()
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in arg.values).strip()
    return None


def refusals(root: Path) -> dict[str, list[str]]:
    """Refusal text -> where it is raised."""
    seen: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = refusal_text(node) if isinstance(node, ast.Raise) else None
            if text and text != "{}":
                seen[text].append(f"{path.relative_to(root)}:{node.lineno}")
    return seen


def _imported_names(tree: ast.Module) -> set[str]:
    return {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}


def _all_names(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
    return []


def alias_sites(root: Path) -> list[str]:
    """Where a name stays importable from a module it does not live in: modules called
    old_names/compat, `import x as x` and `# noqa: F401 (re-exported)` imports, names a module
    (not a package's `__init__`) lists in `__all__` but imports, and `__getattr__` hooks that
    hand out old names (a package's lazy `__getattr__`, which loads its own names, is not one)."""
    sites = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if path.stem in ("old_names", "compat"):
            sites.append(f"{rel}: a module of old names")
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any(a.asname and a.asname == a.name for a in node.names):
                sites.append(f"{rel}:{node.lineno} re-exports {len(node.names)} name(s) as themselves")
            hook = isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__getattr__" for t in node.targets
            )
            if hook and "deprecated_names" in ast.unparse(node.value):
                sites.append(f"{rel}:{node.lineno} __getattr__ of old names (warns)")
            if (
                isinstance(node, ast.FunctionDef)
                and node.name == "__getattr__"
                and "compat" in ast.unparse(node)
            ):
                sites.append(f"{rel}:{node.lineno} __getattr__ of old names")
        imported = sorted(set(_all_names(tree)) & _imported_names(tree))
        if imported and path.name != "__init__.py":
            sites.append(f"{rel}: __all__ lists {len(imported)} imported name(s): {', '.join(imported)}")
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"noqa: F401.*re-export", line):
                sites.append(f"{rel}:{number} re-exported import")
    return sites


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="src/envharness")
    root = Path(parser.parse_args().root)
    seen = refusals(root)
    for rule, pattern in NAMED_RULES.items():
        places = [where for text, wheres in seen.items() if re.search(pattern, text) for where in wheres]
        print(f"{rule}: written in {len(places)} place(s) {places}")
    twice = {text: wheres for text, wheres in seen.items() if len(wheres) > 1}
    print(f"\nrefusals raised in more than one place: {len(twice)}")
    for text, wheres in sorted(twice.items(), key=lambda item: (-len(item[1]), item[0])):
        print(f"  {len(wheres)}  {text[:70]!r}  {', '.join(wheres)}")
    sites = alias_sites(root)
    print(f"\nplaces that keep a name importable where it no longer lives: {len(sites)}")
    for site in sites:
        print(f"  {site}")


if __name__ == "__main__":
    main()
