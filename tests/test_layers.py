"""Imports point one way: down the layers of docs/ARCHITECTURE.md, never up or across.

Every `import envharness.X` in the package (at module level or inside a function: a lazy
import is still a dependency) is checked against the layer order. What an environment
registers reaches the generic layers as "module:attribute" strings (core/registry.py), which
are not imports; that is the point.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import envharness

PACKAGE = Path(envharness.__file__).parent
#: Deeper layers first; a module may import its own package and any package of a lower rank.
LAYERS = {
    "_deprecated": -1,  # old names, their targets written as strings: it imports nothing of ours
    "core": 0,
    "models": 1,
    "harness": 2,
    "curriculum": 2,
    "mcp": 2,
    "prompts": 3,
    "policy": 3,
    "envs": 4,
    "web": 4,
    "fleet": 4,
    "eval": 5,
    "integrations": 5,
    "check": 5,
    "replay": 5,
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


def test_contributing_draws_the_layers_as_they_are():
    """CONTRIBUTING.md's chain `core → models → ... → cli`, rank by rank, is LAYERS."""
    text = (PACKAGE.parents[1] / "CONTRIBUTING.md").read_text(encoding="utf-8")
    chain = next(line for line in text.splitlines() if line.startswith("core → "))
    drawn = [sorted(name.strip() for name in rank.split(",")) for rank in chain.split("→")]
    ranks = sorted({rank for rank in LAYERS.values() if rank >= 0})
    assert drawn == [sorted(n for n, r in LAYERS.items() if r == rank) for rank in ranks]


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


ENVIRONMENT_NAMES = ("browsergym", "textarena", "echo")


def test_generic_layers_import_no_environment():
    """What an environment registers reaches eval, train, MCP and the fleet through the registry,
    never through an import of `envharness.envs.<name>`."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "envs":
            continue
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["envharness", "envs"] and len(parts) > 2:
                bad.append(f"{relative}:{line} imports {module}")
    assert bad == []


def test_generic_layers_name_no_environment():
    """An environment's name is written where users choose one (cli/) and where it registers
    (core/registry.py); a generic layer that tests for a name has forgotten to ask the registry.
    The one other place is _deprecated.py: browser-named helpers kept for old code."""
    bad = []
    allowed = {"core/registry.py", "_deprecated.py"}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ("envs", "cli") or relative.as_posix() in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in ENVIRONMENT_NAMES
            ):
                bad.append(f"{relative}:{node.lineno} names {node.value!r}")
    assert bad == []


def _imported_modules(path: Path) -> list[str]:
    """Modules `path` imports; `from pkg import mod` imports the module `pkg.mod`, not only `pkg`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_imports_itself_back():
    """No circle between modules (a lazy import inside a function counts too): each module can
    be read knowing only what it imports."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for module in _imported_modules(path):
            while module and module not in modules:  # `from pkg.mod import name`: the module itself
                module = module.rpartition(".")[0]
            if (
                module and module != name and not name.startswith(module + ".")
            ):  # a package's own __init__ is not a circle
                targets.add(module)
        graph[name] = targets
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                circles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert circles == []


def test_a_run_looks_its_environment_up_once(tmp_path, monkeypatch):
    """`run_eval` resolves the environment at its start and hands the object down: the prompts,
    the client, the harness and the scripted policy never look the name up again (the server it
    starts, another process, gets the name)."""
    from envharness.core import registry
    from envharness.eval import EvalConfig, run_eval

    calls = []
    real = registry.get_spec
    monkeypatch.setattr(registry, "get_spec", lambda name: calls.append(name) or real(name))
    result = run_eval(
        EvalConfig(
            out=str(tmp_path / "run"),
            env="echo",
            model="scripted",
            episodes=1,
            max_steps=1,
            progress=False,
            screenshots=False,
        )
    )
    assert result.ran == 1 and result.stats[0].successes == 1
    assert calls == ["echo"]


#: Words of one environment (the browser's) that generic modules must not speak.
ENVIRONMENT_WORDS = re.compile(r"axtree|miniwob|browser|(?<![a-z])bids?(?![a-z])", re.IGNORECASE)
#: Modules allowed to speak them, and why.
VOCABULARY_ALLOWED = {
    "core/registry.py": "where the environments register",
    "_deprecated.py": "old names kept for old callers: browser-named helpers, PromptContext's fields, --axtree-tokens",
    "integrations/eval_protocol/processor.py": "Eval Protocol's OpenEnv processor keeps its upstream parameters",
    "models/tiny_vlm.py": "the tiny test VLM's tokenizer corpus: the text it must tokenize",
    "mcp/server.py": "the MCP server's instructions to clients, an example in words",
}


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.add(first.lineno)
    return lines


def test_generic_modules_speak_no_environments_words():
    """Names and strings in generic modules (comments and docstrings may explain an example)
    use the environment's words as it supplies them, never the browser's: no `axtree`,
    `miniwob`, `bid` or `browser` in code outside envs/ and cli/."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in ("envs", "cli") or relative.as_posix() in VOCABULARY_ALLOWED:
            continue
        text = path.read_text(encoding="utf-8")
        docstrings = _docstring_lines(ast.parse(text))
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in (tokenize.NAME, tokenize.STRING) or not ENVIRONMENT_WORDS.search(
                token.string
            ):
                continue
            if token.type == tokenize.STRING and token.start[0] in docstrings:
                continue
            bad.append(f"{relative}:{token.start[0]} {token.string[:50]}")
    assert bad == []


def test_one_load_model_and_the_light_adapter_loads_no_torch():
    """`load_model` is one function wherever it is imported from (the one from `training` used to
    refuse `tools=`), and the environment adapter imports nothing heavy to load."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from envharness.integrations.trl.environment import load_model\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules)\n"
        "from envharness.integrations.trl.training import load_model as from_training\n"
        "import inspect\n"
        "print(heavy, load_model is from_training, 'tools' in inspect.signature(from_training).parameters)\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True", "True"], out.stdout + out.stderr
