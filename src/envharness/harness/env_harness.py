"""`EnvHarness`: how agents play one environment, as the environment registers it.

Eval, train, the scripted policy and the Eval Protocol processor are generic: everything
they need to know about a particular environment comes from its `EnvHarness`, found through
its `EnvSpec.harness` (`envharness.core.registry.env_harness(name)`). An environment's
specifics (tools, prompts, scripted solutions, task names, shaped rewards) live in
`envs/<name>/` and reach the generic layers only through this object.

`TaskList` has the shape of OpenEnv 0.10's Task API: task names, named splits, a count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envharness.harness.session import ResourceSessionFactory
from envharness.harness.tool_parsing import ToolCallParser
from envharness.harness.types import Message

#: ``(client_factory, *, default_task=None, tools=None, reset_kwargs=None, prompt_builder=None,
#: observation_text=None) -> ResourceSessionFactory``: one session (and client) per episode.
SessionFactoryBuilder = Callable[..., ResourceSessionFactory]
#: The scripted policy: the conversation so far -> the next reply's text (None: no move).
ScriptedPolicy = Callable[[list[Message]], "str | None"]


@dataclass(frozen=True)
class TaskList:
    """The tasks an environment serves: names in a stable order, and named splits of them."""

    tasks: tuple[str, ...]
    splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def expand(self, names: Iterable[str], check: Callable[[str], str] | None = None) -> list[str]:
        """Task names with ``all`` and split names replaced by their tasks (order kept, no
        repeats); every other name goes through `check` (normalise, or ValueError)."""
        out: list[str] = []
        for name in names:
            if name == "all":
                chosen: Sequence[str] = self.tasks
            elif name in self.splits:
                chosen = self.splits[name]
            else:
                chosen = [check(name) if check else name]
            out.extend(t for t in chosen if t not in out)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "tasks": list(self.tasks),
            "splits": {k: list(v) for k, v in self.splits.items()},
            "num_tasks": self.num_tasks,
        }


@dataclass(frozen=True)
class EnvHarness:
    """What the generic layers need to play one environment.

    Lazy parts are ``"module:attribute"`` strings (prompt styles import model-facing code that
    the server never needs)."""

    #: The registry name of the environment (`envharness serve NAME`).
    env: str
    #: Builds the episode's session factory around a client factory.
    session_factory: SessionFactoryBuilder
    #: A plain-text model reply -> its tool call(s) (models that do not emit JSON tool calls).
    tool_call_parser: ToolCallParser
    #: Every task served, and its splits.
    task_list: Callable[[], TaskList]
    #: A task name normalised, or ValueError naming the choices.
    check_task: Callable[[str], str]
    #: What `eval` and `train` run when no `--tasks` are given.
    default_tasks: tuple[str, ...]
    #: ``"module:attribute"`` of a ``dict[str, PromptStyle]`` (`envharness.prompts`), or the
    #: dict itself: the styles `--prompt` chooses from for this environment.
    prompt_styles: Any
    #: The style `eval` uses when none is given, and the one `train` uses.
    default_prompt: str = "default"
    train_prompt: str = "default"
    #: The tool names a model may call by default (None: all the session's tools).
    default_tools: tuple[str, ...] | None = None
    #: The scripted policy (`--model scripted`); None when the environment has none.
    scripted_policy: ScriptedPolicy | None = None
    #: ``"module:attribute"`` of a ``dict[str, reward_function]`` in TRL's form, picked with
    #: `train --rewards`; the environment's own reward is always there as ``env``.
    reward_functions: str | None = None
    #: Server options `train` starts its own server with (cheaper observations).
    train_server_options: Mapping[str, Any] = field(default_factory=dict)
    #: Options every eval/train reset sends (observation parts the prompts read).
    reset_kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The environment takes `screenshot` / `screenshot_format` reset options (eval saves them).
    screenshots: bool = False
    #: An observation -> (goal, page text) for eval's step records and report.
    describe_observation: Callable[[Any], tuple[str, str]] | None = None
    #: Server options -> the harness for a server started with them (the browser's ``tasks=``
    #: changes its task list and scripted solutions); None: options change nothing here.
    configure: Callable[[Mapping[str, Any]], EnvHarness] | None = None
    #: Why the same task, seed and actions may not give the same episode (live websites);
    #: `envharness replay` says so before it compares. None: they must.
    replay_caveat: str | None = None
    #: A task -> why its page changes with the clock, None when it does not (a price that moves
    #: every 100 ms): the same seed and actions start the same episode, but what a step sees
    #: depends on when it is taken, so `check` compares such a task's goal only. None: no such task.
    clock_driven: Callable[[str], str | None] | None = None
    #: (lowest, full score): every reward lies in it (`check` verifies); a session's verdict
    #: without its own ``success`` metric is the full score (`harness/success.py`).
    reward_range: tuple[float, float] = (0.0, 1.0)
    #: What the server's Task API lists when it is more than `task_list` (the tasks an agent
    #: plays alone), e.g. games that need an opponent; None: `task_list` (`check` compares).
    served_tasks: Callable[[], TaskList] | None = None
    #: A task -> (fewest, most) players it takes; None: every task is played by one agent.
    players: Callable[[str], tuple[int, int]] | None = None
    #: The opponents its server plays in the seats the agent does not (`--opponent`), and
    #: (opponent, seat) -> the server options that seat them (`harness/opponents.py`).
    server_opponents: tuple[str, ...] = ()
    opponent_options: Callable[[str, str], Mapping[str, Any]] | None = None
    #: (async client, a `seat_player.ModelSeats`, seat choice) -> a client that plays one seat
    #: and lets the `ModelSeats` play the others (`--opponent self` or a model); None: only
    #: `server_opponents` can sit in the other seats.
    seat_client: Callable[[Any, Any, str], Any] | None = None
    #: (async client, number of players) -> one game whose ``views[seat]`` are each an async
    #: client for one seat (`train --opponent self`: every seat played by the policy); None: no
    #: self-play training.
    seat_views: Callable[[Any, int], Any] | None = None

    def for_options(self, options: Mapping[str, Any] | None) -> EnvHarness:
        """This harness as it plays a server started with `options` (eval's and train's
        ``--env-option``): `configure` applied, or itself."""
        if not options or self.configure is None:
            return self
        return self.configure(options)


__all__ = ["EnvHarness", "ScriptedPolicy", "SessionFactoryBuilder", "TaskList"]
