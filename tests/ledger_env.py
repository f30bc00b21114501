"""A ledger kept in an in-memory sqlite database, written as an author would from
docs/new_environment.md: `reset` opens the connection, `step` and `state` use it, `close` closes
it. sqlite refuses a connection used from a thread other than the one that made it, so this
environment works only where a session's calls share one thread (`tests/test_session_threads.py`).

Add amounts until the balance reaches the target (reward 1); an amount of 0 is refused.
"""

from __future__ import annotations

import random
import re
import sqlite3
import threading

from pydantic import Field

from envharness import Action, Environment, InvalidAction, Observation, State, define_environment

TASKS = {"ledger-10": 10, "ledger-50": 50}


class AddAction(Action):
    """Add an amount to the ledger."""

    amount: int = Field(..., description="a positive or negative integer, not 0")


class LedgerObservation(Observation):
    text: str = ""


class LedgerState(State):
    rows: int = 0
    #: The thread that answered, so that a test sees where each call ran.
    thread: int = 0


class LedgerEnvironment(Environment[AddAction, LedgerObservation]):
    """Reach the target balance by adding amounts to a ledger in sqlite."""

    action_type, observation_type, state_type = AddAction, LedgerObservation, LedgerState

    def __init__(self) -> None:
        self.db: sqlite3.Connection | None = None
        self.episode_id: str | None = None
        self.steps = 0
        self.threads: set[int] = set()

    def reset(self, seed=None, episode_id=None, task="ledger-10", **options) -> LedgerObservation:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
        self.threads.add(threading.get_ident())
        if self.db is not None:
            self.db.close()
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE ledger (amount INTEGER)")
        self.target = random.Random(f"{task}|{seed}").randint(2, TASKS[task])
        self.episode_id, self.steps = episode_id, 0
        return LedgerObservation(text=f"balance 0; target {self.target}")

    def step(self, action: AddAction) -> LedgerObservation:
        self.threads.add(threading.get_ident())
        self.steps += 1
        if action.amount == 0:
            raise InvalidAction("an amount of 0 changes nothing: add a positive or negative integer")
        if abs(action.amount) > 10**9:
            raise InvalidAction("an amount lies between -1000000000 and 1000000000")
        self.db.execute("INSERT INTO ledger VALUES (?)", (action.amount,))
        balance = self.db.execute("SELECT SUM(amount) FROM ledger").fetchone()[0]
        done = balance == self.target
        return LedgerObservation(
            text=f"balance {balance}; target {self.target}", reward=1.0 if done else 0.0, done=done
        )

    @property
    def state(self) -> LedgerState:
        self.threads.add(threading.get_ident())
        rows = self.db.execute("SELECT COUNT(*) FROM ledger").fetchone()[0] if self.db else 0
        return LedgerState(
            episode_id=self.episode_id, step_count=self.steps, rows=rows, thread=len(self.threads)
        )

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


class EagerLedgerEnvironment(LedgerEnvironment):
    """Opens its connection in `__init__`, which runs where the server makes the instance (not
    on the session's thread): `check` must say which checklist item that breaks."""

    def __init__(self) -> None:
        super().__init__()
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE ledger (amount INTEGER)")

    def reset(self, seed=None, episode_id=None, task="ledger-10", **options) -> LedgerObservation:
        self.target = random.Random(f"{task}|{seed}").randint(2, TASKS[task])
        self.episode_id, self.steps = episode_id, 0
        return LedgerObservation(text=f"balance 0; target {self.target}")


def to_target(messages: list[dict]) -> str:
    """The scripted policy: add what is missing."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    balance, target = (int(n) for n in re.findall(r"balance (-?\d+); target (\d+)", text)[-1])
    return str(target - balance)


SPEC = define_environment(LedgerEnvironment, tasks=TASKS, scripted_policy=to_target)
EAGER = define_environment(EagerLedgerEnvironment, tasks=TASKS, scripted_policy=to_target)


def no_number(messages: list[dict]) -> str:
    """A reply with no amount in it: no action can be read from it."""
    return "I would rather not say."


MUTE = define_environment(LedgerEnvironment, tasks=TASKS, scripted_policy=no_number)
