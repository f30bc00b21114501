"""What each environment registers, and the lookup every generic layer uses.

An environment is one `EnvSpec`: its name, the server-side factory, and where the generic
layers find the parts that are specific to it (its client, how an agent plays it, its MCP
tools, its `/web` page info). Every part is a lazy ``"module.path:attribute"`` string, so
`echo` never imports Playwright and the core never imports an environment: eval, train,
MCP, `/web` and the fleet ask the spec, never test an environment by name.

A registry target (`EnvSpec.environment`) is either an `Environment` subclass (options
become constructor arguments) or a function taking the options and returning an environment
factory (any callable returning an `Environment`; an async `aclose()` on it runs at
shutdown). Besides the registered names, `module.path:attribute` serves any importable
target, or an `EnvSpec` of the user's own.

    register_environment(EnvSpec(
        name="mygame",
        environment="mypkg.env:MyGameEnvironment",
        client="mypkg.client:AsyncMyGameEnv",
        harness="mypkg.harness:HARNESS",        # an `envharness.harness.EnvHarness`
    ))
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import inspect
import os
import sys
import types
from dataclasses import dataclass
from typing import Any

from envharness.core.environment import Environment
from envharness.core.sessions import EnvFactory


@dataclass(frozen=True)
class EnvSpec:
    """One environment as the generic layers see it. Parts are ``"module:attribute"`` strings
    (imported when first needed), or the objects themselves (`harness.define.define_environment`)."""

    name: str
    #: Server side: an `Environment` subclass, or ``options -> factory``.
    environment: Any
    #: The async client class (`AsyncEnvClient` subclass) that parses its observations.
    client: Any = "envharness.core.client:AsyncEnvClient"
    #: How an agent plays it (`envharness.harness.EnvHarness`): sessions, tool-call parser,
    #: tasks, prompt styles, scripted policy, reward functions. None: no eval/train support.
    harness: Any = None
    #: ``(EnvDescription) -> EnvToolset`` for `/mcp`; None: the generic reset/step/state tools.
    mcp_toolset: str | None = None
    #: ``() -> dict`` merged into `/web/info` (``tasks``, ``actions`` with examples).
    web_info: str | None = None
    #: One line for `--help` and listings.
    summary: str = ""
    #: Commands of its own, ``(name, "module.path", help)``: `envharness NAME` runs the module's
    #: `add_arguments(parser)` and `run(args)` (the browser's `envharness browser` node).
    commands: tuple[tuple[str, str, str], ...] = ()

    @property
    def sync_client(self) -> Any:
        """The synchronous client (`EnvClient` over `client`): what TRL's `environment_factory`
        and a script without an event loop use, e.g. ``functools.partial(SPEC.sync_client,
        base_url=url)``."""
        client = self.load("client")
        if not inspect.iscoroutinefunction(getattr(client, "reset", None)):
            return client
        # named, not imported: the client module imports this one (its launchers start servers by name)
        return load_target("envharness.core.client:sync_client_class")(client)

    def load(self, part: str) -> Any:
        """The object a part names (None when the spec leaves it out)."""
        target = getattr(self, part)
        return load_target(target) if isinstance(target, str) else target


def load_target(target: str) -> Any:
    """Import ``"module.path:attribute"`` (dotted attributes allowed)."""
    module_name, sep, attribute = target.partition(":")
    if not sep or not _dotted(module_name) or not _dotted(attribute):
        raise KeyError(f"{target!r} is not module.path:attribute (Python names joined by dots)")
    value: Any = _import_here_too(module_name)
    for name in attribute.split("."):
        if not hasattr(value, name):
            raise AttributeError(_no_attribute(value, name))
        value = getattr(value, name)
    return value


def _dotted(name: str) -> bool:
    """Python names joined by dots: never a path or a relative import (`../../etc`)."""
    return all(part.isidentifier() for part in name.split("."))


def _no_attribute(owner: Any, name: str) -> str:
    """Python's words for a missing attribute, and the close name when there is one."""
    what = (
        f"module {owner.__name__!r}"
        if isinstance(owner, types.ModuleType)
        else f"{type(owner).__name__!r} object"
    )
    close = difflib.get_close_matches(name, [n for n in dir(owner) if not n.startswith("__")], n=1)
    return f"{what} has no attribute {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")


#: Set (to anything) where code from the current folder must never be imported: `replay` of a
#: folder someone else wrote sets it for itself and the servers it starts (docs/security.md).
NO_CWD_IMPORT_ENV = "ENVHARNESS_NO_CWD_IMPORT"


def cwd_import_allowed() -> bool:
    return not os.environ.get(NO_CWD_IMPORT_ENV)


def _import_here_too(module_name: str) -> Any:
    """Import a module, also from the current folder: `envharness serve guess:SPEC` run where
    guess.py is finds it, as `python -m` would (a console script's path leaves the folder out)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if (
            exc.name != module_name.partition(".")[0]
            or here in sys.path
            or "" in sys.path
            or not cwd_import_allowed()
        ):
            raise
        sys.path.append(here)
        return importlib.import_module(module_name)


ENVIRONMENTS: dict[str, EnvSpec] = {}
#: What `eval`, `train` and the Python API play when no environment is named: the browser,
#: the first environment envharness had.
DEFAULT_ENV = "browsergym"


def register_environment(spec: EnvSpec, *, replace: bool = False) -> EnvSpec:
    """Make `spec.name` servable (`envharness serve NAME`) and playable (eval, train, MCP)."""
    if spec.name in ENVIRONMENTS and not replace:
        raise ValueError(f"environment {spec.name!r} is already registered")
    if not spec.name or ":" in spec.name:
        raise ValueError(f"an environment name must be non-empty and have no ':' (got {spec.name!r})")
    ENVIRONMENTS[spec.name] = spec
    return spec


register_environment(
    EnvSpec(
        name="echo",
        environment="envharness.envs.echo.environment:EchoEnvironment",
        client="envharness.envs.echo.client:AsyncEchoEnv",
        harness="envharness.envs.echo.spec:SPEC.harness",
        summary="echoes each message back (the template for new environments)",
    )
)
register_environment(
    EnvSpec(
        name="browsergym",
        environment="envharness.envs.browsergym.factory:make_environment_factory",
        client="envharness.envs.browsergym.client:AsyncBrowserGymEnv",
        harness="envharness.envs.browsergym.harness:HARNESS",
        mcp_toolset="envharness.envs.browsergym.mcp_tools:BrowserGymToolset",
        web_info="envharness.envs.browsergym.harness:web_info",
        summary="MiniWoB++ in Chromium, BrowserGym's actions and observations",
        commands=(
            (
                "browser",
                "envharness.envs.browsergym.node_command",
                "Run a browser node: a Chromium that browsergym servers elsewhere connect to over CDP",
            ),
        ),
    )
)
register_environment(
    EnvSpec(
        name="textarena",
        environment="envharness.envs.textarena.factory:make_environment_factory",
        client="envharness.envs.textarena.client:AsyncTextArenaEnv",
        harness="envharness.envs.textarena.harness:HARNESS",
        mcp_toolset="envharness.envs.textarena.mcp_tools:TextArenaToolset",
        web_info="envharness.envs.textarena.harness:web_info",
        summary="TextArena's single-player text games (Wordle-v0 by default)",
    )
)


#: What is registered when envharness is imported: a fresh process (a server started with
#: `envharness serve NAME`) knows it too; what a program registers or replaces later it does not.
_BUILT_IN: dict[str, EnvSpec] = dict(ENVIRONMENTS)


def servable_elsewhere(name: str) -> bool:
    """Whether a new Python process can serve `name` as this one would: registered when
    envharness is imported (and not replaced since), or a `module:attribute` (importable there
    with this process's `sys.path`)."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name] is _BUILT_IN.get(name)
    return ":" in name


def get_spec(name: str) -> EnvSpec:
    """The spec of a registered name, or of ``module:attribute`` (an `EnvSpec` there is
    used as it is; anything else is the server-side target of a spec with no other parts)."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    if ":" not in name:
        raise KeyError(
            f"Unknown environment {name!r}; known: {', '.join(sorted(ENVIRONMENTS))} (or module.path:attribute)"
        )
    target = load_target(name)
    if isinstance(target, EnvSpec):  # known by the name it is served as (`module:SPEC`)
        return target if target.name == name else dataclasses.replace(target, name=name)
    return EnvSpec(name=name, environment=name)


def resolve(name: str) -> Any:
    """The server-side registry target for `name` (a registered name or `module:attribute`)."""
    return get_spec(name).load("environment")


@dataclass(frozen=True)
class ResolvedEnv:
    """An environment as one run plays it, looked up once: the entry point (a command, `run_eval`,
    `train`) resolves the name and hands this down, so nothing below looks it up again. Only
    what crosses a process boundary (a server to start) travels as `name` and `options`."""

    name: str
    spec: EnvSpec
    #: The server options the run's servers get (the harness follows them).
    options: dict[str, Any]
    #: How agents play it on such a server (`EnvHarness.for_options`); None when it registers none.
    harness: Any

    @property
    def client_class(self) -> Any:
        """The async client that parses its observations."""
        return self.spec.load("client")

    def require_harness(self) -> Any:
        """The harness, or a clear error for an environment that can only be served."""
        if self.harness is None:
            raise KeyError(
                f"environment {self.name!r} registers no harness (tasks, tools, prompts): it can be served, "
                "not evaluated or trained"
            )
        return self.harness


def resolve_environment(name: str, options: dict[str, Any] | None = None) -> ResolvedEnv:
    """Look `name` up once, with the server options the run uses."""
    spec = get_spec(name)
    harness = spec.load("harness")
    if harness is not None:
        if not getattr(
            harness, "env", name
        ):  # a harness defined with its environment knows it by the name served
            harness = dataclasses.replace(harness, env=name)
        if options and hasattr(harness, "for_options"):
            harness = harness.for_options(options)
    return ResolvedEnv(name=name, spec=spec, options=dict(options or {}), harness=harness)


def resolved(env: str | ResolvedEnv, options: dict[str, Any] | None = None) -> ResolvedEnv:
    """`env` as it is when already resolved, else looked up (the Python API takes either)."""
    return env if isinstance(env, ResolvedEnv) else resolve_environment(env, options)


def env_harness(name: str | ResolvedEnv, options: dict[str, Any] | None = None) -> Any:
    """How agents play `name` (an `EnvHarness`), on a server started with `options` (its tasks
    may depend on them: `EnvHarness.for_options`); a clear error when it has none."""
    return resolved(name, options).require_harness()


def make_factory(name: str, **options: Any) -> EnvFactory:
    """The environment factory for `name`; bad options fail here, not at the first session."""
    target = resolve(name)
    if isinstance(target, type) and issubclass(target, Environment):
        if not options:
            return target
        try:
            inspect.signature(target).bind(**options)
        except TypeError as exc:
            raise ValueError(f"Bad options for {name}: {exc}") from None
        return functools.partial(target, **options)
    return target(**options)


__all__ = [
    "ENVIRONMENTS",
    "EnvSpec",
    "env_harness",
    "get_spec",
    "load_target",
    "make_factory",
    "register_environment",
    "resolve",
    "servable_elsewhere",
]
