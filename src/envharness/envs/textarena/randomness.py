"""Each session's own randomness inside textarena's games, for `random` and for numpy.

textarena draws from the process-global ``random`` module (``State`` calls ``random.seed``) and
some games from numpy's global generator (SpellingBee's ``numpy.random.choice``), which no one
seeds. The ``random``, ``numpy`` and ``numpy.random`` names inside textarena's modules are
replaced by proxies that send each draw to the calling session's own generators (a context
variable set around every reset and step): a `random.Random` and a numpy ``RandomState``, both
seeded from the session's seed. Concurrent sessions neither see nor disturb each other, the same
seed replays the same game, moves included, and the process's own generators are untouched.
Every other name (``random.Random``, ``np.array``, ``np.random.default_rng``) is the real one.
"""

from __future__ import annotations

import contextvars
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy

T = TypeVar("T")


def _numpy_state(seed: Any) -> numpy.random.RandomState:
    """A numpy generator seeded from `seed` (any seed `random.seed` takes)."""
    entropy = random.Random(seed).getrandbits(128)
    return numpy.random.RandomState(numpy.random.MT19937(numpy.random.SeedSequence(entropy)))


@dataclass
class _Streams:
    """The generators of one session."""

    py: random.Random = field(default_factory=random.Random)
    np: numpy.random.RandomState = field(default_factory=numpy.random.RandomState)


_CURRENT: contextvars.ContextVar[_Streams | None] = contextvars.ContextVar(
    "textarena_session_rng", default=None
)
#: The module-level functions of `random` that are methods of its hidden global instance.
_RNG_FUNCTIONS = frozenset(
    name for name in dir(random) if getattr(getattr(random, name), "__self__", None) is random._inst
)
_NP_GLOBAL = numpy.random.mtrand._rand
#: The functions of `numpy.random` that draw from (or seed) its global ``RandomState``.
_NP_FUNCTIONS = frozenset(
    name for name in dir(numpy.random) if getattr(getattr(numpy.random, name), "__self__", None) is _NP_GLOBAL
) | {"seed"}


class _SessionRandomModule:
    """Stands in for the `random` module inside textarena's modules: ``random.choice(...)``
    runs on the calling session's own `random.Random` (outside a session, on the global one);
    every other name (``random.Random``) is the real module's."""

    def __getattr__(self, name: str) -> Any:
        streams = _CURRENT.get()
        if streams is not None and name in _RNG_FUNCTIONS:
            return getattr(streams.py, name)
        return getattr(random, name)


class _SessionNumpyRandom:
    """Stands in for `numpy.random`: ``choice``, ``randint``, ``seed``... run on the calling
    session's own ``RandomState`` (outside a session, on numpy's global one); every other name
    (``default_rng``, ``Generator``) is numpy's."""

    def __getattr__(self, name: str) -> Any:
        streams = _CURRENT.get()
        if streams is not None and name in _NP_FUNCTIONS:
            return getattr(streams.np, name)
        return getattr(numpy.random, name)


class _SessionNumpy:
    """Stands in for the `numpy` module: its ``random`` is the session's, the rest numpy's."""

    random = _SessionNumpyRandom()

    def __getattr__(self, name: str) -> Any:
        return getattr(numpy, name)


_PROXY = _SessionRandomModule()
_NP_PROXY = _SessionNumpy()
_STAND_INS = {id(random): _PROXY, id(numpy): _NP_PROXY, id(numpy.random): _NP_PROXY.random}


def route_randomness() -> None:
    """Point the names of `random`, `numpy` and `numpy.random` in every imported textarena module
    at the proxies (games are imported lazily, so this runs again after each new game class)."""
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "textarena" or module_name.startswith("textarena.")):
            continue
        for attr, value in list(vars(module).items()):
            stand_in = _STAND_INS.get(id(value))
            if stand_in is not None:
                setattr(module, attr, stand_in)


def _session_function(name: str, numpy_draw: bool) -> Callable[..., Any]:
    proxy = _NP_PROXY.random if numpy_draw else _PROXY

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(proxy, name)(*args, **kwargs)

    call.__name__ = name
    return call


def route_captured(game: Any) -> None:
    """A game that kept a generator's function as an attribute (Secretary's ``value_sampler =
    random.random``) gets one that calls the session's generator instead."""
    for attr, value in list(vars(game).items()):
        owner, name = getattr(value, "__self__", None), getattr(value, "__name__", "")
        if owner is random._inst and name in _RNG_FUNCTIONS:
            setattr(game, attr, _session_function(name, numpy_draw=False))
        elif owner is _NP_GLOBAL and name in _NP_FUNCTIONS:
            setattr(game, attr, _session_function(name, numpy_draw=True))


class SessionRandom:
    """One session's randomness: textarena's ``random`` and ``numpy.random`` calls made while
    `run` runs go to this session's own generators, so concurrent sessions never share state,
    the same seed replays the same game (moves included), and the process's RNGs are untouched."""

    def __init__(self) -> None:
        self._streams = _Streams()

    def run(self, seed: int | None, fn: Callable[[], T]) -> T:
        """Run `fn` with this session's generators (both re-seeded first when `seed` is given)."""
        if seed is not None:
            self._streams.py.seed(seed)
            self._streams.np = _numpy_state(seed)
        token = _CURRENT.set(self._streams)
        try:
            return fn()
        finally:
            _CURRENT.reset(token)


__all__ = ["SessionRandom", "route_captured", "route_randomness"]
