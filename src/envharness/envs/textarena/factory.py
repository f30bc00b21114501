"""`make_environment_factory`: what `envharness serve textarena` calls.

Options (``--option env_id=Mastermind-v0``, ``ENVHARNESS_OPTION_*``) win over OpenEnv's
variables, which are read from the server's environment as OpenEnv's textarena_env reads them:

==========================  ===========================================================
``TEXTARENA_ENV_ID``        ``env_id``, the default game (default ``Wordle-v0``)
``TEXTARENA_NUM_PLAYERS``   ``num_players``: players per game (default: the fewest the game
                            takes, 1 for the single-player games); checked against the game
``TEXTARENA_MAX_TURNS``     ``max_turns``: the episode ends (``info["truncated"]``) after
                            that many moves (OpenEnv stores it without enforcing it)
``opponent``, ``seat``       options only: who plays the seats of a multi-player game that the
                            client does not (``random``, ``scripted``, ``model``; `seats.py`)
``opponent_model``          option only: the model ``opponent=model`` seats (a ``--model`` spec,
                            loaded once when the server starts; `model_player.py`)
``TEXTARENA_KW_<name>``     ``game_kwargs[name]``, passed to ``ta.make``; values are JSON
                            when they parse (``5``, ``true``, ``[1, 2]``), text otherwise
==========================  ===========================================================

The default game is made (and its keyword arguments checked) when the factory is built, so
a bad ``TEXTARENA_ENV_ID`` or ``TEXTARENA_KW_*`` stops ``serve`` with the reason instead of
failing every session. ``MAX_CONCURRENT_ENVS`` is a server setting: ``serve --max-sessions``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from envharness.core.declared import json_or_text as _json_or_text
from envharness.envs.textarena import games, seats
from envharness.envs.textarena.environment import TextArenaConfig, TextArenaEnvironment

KW_PREFIX = "TEXTARENA_KW_"


class TextArenaConfigError(ValueError):
    """A TEXTARENA_* variable or option this server cannot honour."""


def _positive_int(name: str, value: Any) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise TextArenaConfigError(f"{name}={value!r}: expected a whole number") from None
    if number < 1:
        raise TextArenaConfigError(f"{name}={value!r}: must be at least 1")
    return number


def options_from_environ(environ: Mapping[str, str]) -> dict[str, Any]:
    """The textarena options OpenEnv's TEXTARENA_* variables in `environ` ask for."""
    get = lambda name: (environ.get(name) or "").strip() or None  # noqa: E731 - empty means unset
    options: dict[str, Any] = {}
    if (env_id := get("TEXTARENA_ENV_ID")) is not None:
        options["env_id"] = env_id
    if (players := get("TEXTARENA_NUM_PLAYERS")) is not None:
        options["num_players"] = _positive_int("TEXTARENA_NUM_PLAYERS", players)
    if (turns := get("TEXTARENA_MAX_TURNS")) is not None:
        options["max_turns"] = _positive_int("TEXTARENA_MAX_TURNS", turns)
    kwargs = {
        key[len(KW_PREFIX) :]: _json_or_text(value)
        for key, value in environ.items()
        if key.startswith(KW_PREFIX) and key[len(KW_PREFIX) :]
    }
    if kwargs:
        options["game_kwargs"] = kwargs
    return options


class TextArenaEnvironmentFactory:
    """Makes one `TextArenaEnvironment` per session, all sharing the process's game prototypes."""

    def __init__(self, config: TextArenaConfig) -> None:
        self.config = config

    def task_list(self) -> Any:
        """The server's Task API: every game it plays, the multi-player ones included with their
        player counts as splits (`harness.game_catalog`, the harness's `served_tasks`)."""
        from envharness.envs.textarena.harness import game_catalog

        return game_catalog()

    def __call__(self) -> TextArenaEnvironment:
        return TextArenaEnvironment(
            TextArenaConfig(
                env_id=self.config.env_id,
                num_players=self.config.num_players,
                max_turns=self.config.max_turns,
                game_kwargs=dict(self.config.game_kwargs),
                opponent=self.config.opponent,
                seat=self.config.seat,
                model_player=self.config.model_player,
            )
        )


def _model_player(spec: str) -> Any:
    """The server's model for ``opponent=model``, loaded once (None without ``opponent_model``)."""
    if not spec:
        return None
    from envharness.envs.textarena.model_player import ModelPlayer

    try:
        return ModelPlayer(spec)
    except (ValueError, OSError, RuntimeError, ImportError) as exc:
        raise TextArenaConfigError(f"opponent_model={spec}: {exc}") from None


def make_environment_factory(
    *, environ: Mapping[str, str] | None = None, **options: Any
) -> TextArenaEnvironmentFactory:
    """The server registry's entry point. `options`: ``env_id`` (alias ``task``), ``num_players``,
    ``max_turns``, ``game_kwargs`` (a dict or JSON text), or any other name as one game keyword
    argument; OpenEnv's TEXTARENA_* variables fill in what the options leave unset."""
    merged = options_from_environ(os.environ if environ is None else environ)
    if "task" in options:
        options["env_id"] = options.pop("task")
    kwargs = dict(merged.pop("game_kwargs", {}))
    explicit = options.pop("game_kwargs", None)
    if isinstance(explicit, str):
        explicit = _json_or_text(explicit)
    if explicit is not None and not isinstance(explicit, dict):
        raise TextArenaConfigError(f"game_kwargs must be a JSON object, got {explicit!r}")
    if explicit is not None:  # an explicit game_kwargs replaces the TEXTARENA_KW_* ones
        kwargs = dict(explicit)
    for name in ("env_id", "num_players", "max_turns"):
        if name in options:
            merged[name] = options.pop(name)
    seating = {name: options.pop(name) for name in ("opponent", "seat") if name in options}
    model_spec = str(options.pop("opponent_model", "") or "").strip()
    kwargs.update({k: _json_or_text(v) if isinstance(v, str) else v for k, v in options.items()})
    env_id = games.check_env_id(str(merged.get("env_id") or "Wordle-v0"))
    num_players = _positive_int("num_players", merged.get("num_players", games.player_counts(env_id)[0]))
    try:
        games.check_players(env_id, num_players)
    except games.GameRefused as exc:
        hint = "" if merged.get("env_id") else _games_for(num_players)
        raise TextArenaConfigError(f"{exc}; TEXTARENA_NUM_PLAYERS / --option num_players{hint}") from None
    max_turns = merged.get("max_turns")
    config = TextArenaConfig(
        env_id=env_id,
        num_players=num_players,
        max_turns=None if max_turns is None else _positive_int("max_turns", max_turns),
        game_kwargs=kwargs,
        model_player=_model_player(model_spec),
        **seating,
    )
    if config.opponent is not None:  # checked here whatever the default game is
        try:
            seats.seat_table("KuhnPoker-v0", 2, 0, config.opponent, config.seat, config.model_player)
        except ValueError as exc:
            raise TextArenaConfigError(f"{exc} (--option opponent / seat)") from None
    try:
        # the game named, or keyword arguments given, fail now rather than at the first reset; a
        # server given neither serves the games its resets name, so the default one is not made
        # here (Wordle's dictionaries cost ~4 s of CPU that a server of other games never needs)
        if kwargs or merged.get("env_id"):
            TextArenaEnvironment(config).reset(seed=0)
    except ValueError as exc:
        names = ", ".join(f"{KW_PREFIX}{k}" for k in kwargs) or "none"
        raise TextArenaConfigError(f"{exc} (game keyword arguments given: {names})") from None
    return TextArenaEnvironmentFactory(config)


def _games_for(num_players: int) -> str:
    """A hint for a player count asked without a game (the default game, Wordle, is one player's)."""
    fitting = [
        g for g in games.multi_player_ids() if g.endswith("-v0") and games.takes_players(g, num_players)
    ]
    if not fitting:
        return ""
    more = f" and {len(fitting) - 6} more" if len(fitting) > 6 else ""
    return (
        f". No game was named, so the default Wordle-v0 was checked: name one with --option task=GAME "
        f"(games for {num_players} players: {', '.join(fitting[:6])}{more})"
    )
