"""The code's shape, as the closing notes of refactoring issues report it: the largest modules,
the longest functions, imports inside functions and `getattr(x, "name", default)` probes.

    python scripts/code_shape.py [src/envharness] [--top 10] [--under integrations/trl]
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function, nested ones included."""
    found: list[tuple[str, int]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.end_lineno - child.lineno + 1))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(tree, "")
    return found


def lazy_imports(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += sum(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node) if n is not node)
    return count


def getattr_defaults(tree: ast.AST) -> int:
    return sum(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "getattr"
        and len(n.args) == 3
        for n in ast.walk(tree)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default="src/envharness")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--under", default="", help="only modules under this folder of the root")
    args = parser.parse_args()
    root = Path(args.root)
    files, funcs, lazy, probes = [], [], 0, 0
    for path in sorted((root / args.under).rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        rel = path.relative_to(root)
        files.append((len(text.splitlines()), str(rel)))
        funcs += [(n, f"{rel}:{name}") for name, n in functions(tree)]
        lazy += lazy_imports(tree)
        probes += getattr_defaults(tree)
    print(
        f"{len(files)} modules, {len(funcs)} functions, {lazy} imports inside functions, "
        f"{probes} getattr(x, name, default) calls"
    )
    print(
        f"functions over 60 lines: {sum(n > 60 for n, _ in funcs)}, over 80: {sum(n > 80 for n, _ in funcs)}"
    )
    print("\nlargest modules:")
    for n, name in sorted(files, reverse=True)[: args.top]:
        print(f"  {n:5d}  {name}")
    print("\nlongest functions:")
    for n, name in sorted(funcs, reverse=True)[: args.top]:
        print(f"  {n:5d}  {name}")


if __name__ == "__main__":
    main()
