"""One name, one thing: the names kept for old callers live in `envharness/_deprecated.py` and
warn with the import path that replaces them and the version that removes them; nothing in the
package uses them; and the light entry points load no torch, transformers or TRL."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import envharness
from envharness._deprecated import COMPUTED, MOVED, REMOVED_IN, USE_INSTEAD, EnvharnessDeprecationWarning

PACKAGE = Path(envharness.__file__).parent
OLD_NAMES = [(module, name) for module, names in MOVED.items() for name in names]
HEAVY = ("torch", "transformers", "trl")


def _python(code: str) -> str:
    """`code` in a fresh interpreter (-P: nothing imported from the folder it starts in)."""
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize(("module", "name"), OLD_NAMES, ids=[f"{m}.{n}" for m, n in OLD_NAMES])
def test_an_old_name_still_imports_and_warns_with_its_new_path_and_removal(module, name):
    old_module = importlib.import_module(module)
    with pytest.warns(EnvharnessDeprecationWarning) as caught:
        value = getattr(old_module, name)
    said = str(caught[0].message)
    assert caught[0].filename == __file__  # the warning points at the line that used the old name
    assert said.startswith(
        f"{module}.{name} is deprecated and will be removed in envharness {REMOVED_IN}: use "
    )
    target_module, _, attribute = MOVED[module][name].partition(":")
    old = f"{module}.{name}"
    if old in USE_INSTEAD:
        assert said.endswith(USE_INSTEAD[old])
        assert callable(value) or old in COMPUTED
    else:
        assert said.endswith(f"from {target_module} import {attribute}")
        assert value is getattr(importlib.import_module(target_module), attribute)


def test_the_browser_helpers_of_old_still_do_what_they_did():
    import envharness.integrations.trl as trl
    from envharness.integrations.trl.servers import train_server_options

    with pytest.warns(EnvharnessDeprecationWarning, match='build_env_rollout_func\\("browsergym"'):
        rollout_func = trl.build_browsergym_rollout_func(lambda: None)
    with pytest.warns(EnvharnessDeprecationWarning, match=REMOVED_IN):
        options = trl.TRAIN_SERVER_OPTIONS
    assert callable(rollout_func) and options == train_server_options("browsergym")
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = trl.no_such_name


def test_a_name_that_stayed_gives_no_warning():
    from envharness.envs.browsergym import harness

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert callable(harness.build_browsergym_action_tool_call)  # the harness uses it itself


def test_nothing_in_the_package_imports_an_old_name():
    """`from <old module> import <old name>` anywhere in src/ (at module level or in a function)."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in MOVED:
                bad += [
                    f"{path.relative_to(PACKAGE)}:{node.lineno} {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name in MOVED[node.module]
                ]
    assert bad == []


def test_deprecated_imports_nothing_of_the_package():
    """Any layer may use it because it names its targets as strings."""
    tree = ast.parse((PACKAGE / "_deprecated.py").read_text(encoding="utf-8"))
    modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in modules if m and m.startswith("envharness")] == []


def test_importing_the_package_and_every_commands_help_use_no_old_name():
    from envharness.cli import COMMANDS

    code = (
        "import contextlib, io, warnings\n"
        "from envharness._deprecated import EnvharnessDeprecationWarning\n"
        "warnings.simplefilter('error', EnvharnessDeprecationWarning)\n"
        "import envharness, envharness.harness, envharness.integrations.trl\n"
        "import envharness.integrations.trl.environment, envharness.integrations.trl.training\n"
        "import envharness.envs.browsergym.harness, envharness.envs.textarena.harness\n"
        "from envharness.cli import main\n"
        f"for argv in [['--help']] + [[c, '--help'] for c in {sorted(COMMANDS)!r}]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
        "print('ok')\n"
    )
    assert _python(code).split() == ["ok"]


#: The modules docs and docstrings call light: importing one loads no torch, transformers or TRL.
LIGHT = (
    "envharness",
    "envharness.harness",
    "envharness.integrations.trl",
    "envharness.integrations.trl.environment",
    "envharness.envs.browsergym.client",
    "envharness.envs.textarena.client",
    "envharness.envs.echo.client",
    "envharness.cli.serve",
)


@pytest.mark.parametrize("module", LIGHT)
def test_a_light_entry_point_loads_no_torch_transformers_or_trl(module):
    code = f"import sys, {module}\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    assert _python(code).split() == ["[]"]


#: What connecting to a server needs: no server framework (the server's own modules load it).
CLIENT_SIDE = (
    "envharness.harness",
    "envharness.integrations.trl.environment",
    "envharness.envs.browsergym.client",
    "envharness.envs.textarena.client",
    "envharness.envs.echo.client",
)
SERVER_FRAMEWORK = ("fastapi", "starlette", "uvicorn")


@pytest.mark.parametrize("module", CLIENT_SIDE)
def test_a_client_side_module_loads_no_server_framework(module):
    code = f"import sys, {module}\nprint(sorted(m for m in {SERVER_FRAMEWORK!r} if m in sys.modules))\n"
    assert _python(code).split() == ["[]"]


def test_a_named_reward_for_trls_tool_loop_loads_no_torch():
    """`environment_factory(..., reward="success")` looks the name up among the environment's
    reward functions, which live beside the prompts, not in `training` (torch, TRL)."""
    code = (
        "import sys\n"
        "from envharness.integrations.trl.environment_rewards import named_reward\n"
        "assert named_reward('textarena', 'success').__name__ == 'reward_success'\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    assert _python(code).split() == ["[]"]


def _documented_imports() -> list[tuple[str, str]]:
    """(module, name) of every `from envharness... import ...` in the docs' code blocks."""
    root = PACKAGE.parents[1]
    pages = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    found = set()
    for page in pages:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
            for statement in re.findall(
                r"^from envharness[\w.]* import (?:\([^)]*\)|.*)$", block, re.MULTILINE
            ):
                node = ast.parse(statement.strip()).body[0]
                found |= {(node.module, alias.name) for alias in node.names}
    return sorted(found)


def test_every_import_the_docs_write_resolves_to_where_the_name_lives():
    """The docs' code imports each name from a module that has it, and none through an old path."""
    documented = _documented_imports()
    assert len(documented) > 20  # the docs' code blocks were found
    code = (
        "import importlib, warnings\n"
        "from envharness._deprecated import EnvharnessDeprecationWarning\n"
        "warnings.simplefilter('error', EnvharnessDeprecationWarning)\n"
        f"for module, name in {documented!r}:\n"
        "    try:\n"
        "        getattr(importlib.import_module(module), name)\n"
        "    except (AttributeError, ImportError, EnvharnessDeprecationWarning) as exc:\n"
        "        print(f'{module}.{name}: {exc}')\n"
    )
    assert _python(code) == ""
