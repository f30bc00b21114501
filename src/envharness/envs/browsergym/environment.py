"""`BrowserGymEnvironment`: MiniWoB++ (or the user's web tasks) in a shared Chromium, BrowserGym's
actions and observations.

One instance per session. It holds one browser context (from the shared `BrowserEngine`)
with the task page; the tasks come from a `TaskSet` (``tasks=``: MiniWoB by default, or a
module of `WebTask`s, see tasks.py and webtasks.py), and:

- ``reset(task=..., seed=..., **options)`` chooses the task per episode (``task_name`` is
  accepted too, as OpenEnv's harness sends it). The same task restarts in place (a few ms),
  with focus, scroll, bids and the accessibility cache cleared, so that its observation is
  the one a freshly loaded page gives (BrowserGym's); another task is switched to in place
  when the task set can (MiniWoB: the document rewritten, no page load); a page an earlier
  episode navigated away from, or a task the set cannot start in place, is loaded afresh.
  Options: the observation parts (``axtree``, ``pruned_html``, ``extra_properties``,
  ``screenshot``, ``screenshot_format``), ``max_steps`` and ``time_limit_s``.
- ``step(BrowserGymAction(action_str=...))`` parses the string (never executes it as code),
  runs it, and reports reward/done as the task set reads them (MiniWoB: as BrowserGym's ``validate``). A bad action
  costs a step and comes back as ``last_action_error``, never as a crash.

If the browser dies, the session's next step raises `BrowserSessionLost`; its next reset
gets a new context from the relaunched browser. A session that ends having never left the task
set's pages gives its context, cleared, back to the warm pool for the next session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import typing
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from envharness.core.environment import Environment, InvalidOptions
from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.actions import ActionParseError, parse_actions
from envharness.envs.browsergym.engine import BrowserEngine, BrowserUnavailable, HostGuard
from envharness.envs.browsergym.executor import STATEFUL_ACTIONS, ActionContext, execute, release_held
from envharness.envs.browsergym.models import (
    MAX_SEED,
    BrowserGymAction,
    BrowserGymObservation,
    BrowserGymState,
)
from envharness.envs.browsergym.observation import ObservationParts, extract_page_observation, forget_marks
from envharness.envs.browsergym.task_set import StartMode
from envharness.envs.browsergym.tasks import TaskStatus, load_task_set
from envharness.envs.browsergym.warm_pool import WarmPage, WarmPool, clear_for_reuse, close_quietly

logger = logging.getLogger(__name__)

OBSERVATION_OPTIONS = tuple(f.name for f in dataclasses.fields(ObservationParts))


#: BrowserGym's chat opens with this message before the goal.
_GREETING = "Hi! I am your UI assistant, I can perform web tasks for you. What can I help you with?"


class BrowserSessionLost(RuntimeError):
    """The browser (or this session's page) died; call reset() to start a new episode. An
    infrastructure failure: the episode is counted apart, never as a reward."""

    infrastructure = True


@dataclass
class BrowserGymConfig:
    """Server-wide options (``envharness serve browsergym --option ...``)."""

    task: str | None = None  # None: the task set's first default task (MiniWoB: click-test)
    #: The task set: "miniwob", or a module path of web tasks ("mypkg.webtasks[:TASKS]").
    tasks: str = "miniwob"
    viewport: dict[str, int] | None = None  # None: the task set's (MiniWoB's 332x214, as BrowserGym)
    observation: ObservationParts = field(default_factory=ObservationParts)
    allowed_hosts: tuple[str, ...] = ()
    max_steps: int | None = None
    time_limit_s: float | None = None
    episode_max_time_ms: int = miniwob.EPISODE_MAX_TIME_MS
    noop_wait_ms: float = 0.0  # what noop() without argument waits (BrowserGym: 1000)
    pre_observation_delay_ms: float = 0.0  # BrowserGym: 500
    page_timeout_ms: int = 5000
    # How long element actions wait for their element to become actionable. BrowserGym uses
    # 500 ms, which busy machines (many sessions on few cores) exceed for ordinary clicks.
    action_timeout_ms: float = 3000.0
    fast_reset: bool = True
    # Check element actions in one round trip and fail at once with the reason when the element
    # can never become actionable (actionability.py); False: Playwright's polling checks only.
    fast_actions: bool = True
    # Contexts kept open and loaded, ready for new sessions (warm_pool.py); 0: each session opens its own.
    warm_sessions: int = 2
    # What the pool may grow to while sessions are taken faster than it refills (~30 MB each);
    # None: max(warm_sessions, 8).
    warm_sessions_max: int | None = None


@dataclass
class _Episode:
    task: str
    seed: int | None
    goal: str
    parts: ObservationParts
    max_steps: int | None
    time_limit_s: float | None
    started: float = field(default_factory=time.monotonic)
    done: bool = False


class BrowserGymEnvironment(Environment[BrowserGymAction, BrowserGymObservation]):
    """MiniWoB++ tasks with BrowserGym's action strings and observation fields."""

    action_type = BrowserGymAction
    observation_type = BrowserGymObservation
    state_type = BrowserGymState
    supports_concurrent_sessions = True

    def __init__(
        self, engine: BrowserEngine, config: BrowserGymConfig | None = None, pool: WarmPool | None = None
    ) -> None:
        self.engine = engine
        self.config = config or BrowserGymConfig()
        self.task_set = load_task_set(self.config.tasks)
        self.config.task = self.task_set.check_task(self.config.task or self.task_set.default_tasks()[0])
        self._guard = guard_for(self.config, self.task_set)
        self._pool = pool
        self._context: Any = None
        self._generation = 0
        self._actx: ActionContext | None = None
        self._main_page: Any = None
        self._loaded_task: str | None = None  # task whose page is loaded and reusable in place
        self._page_crashed = False
        self._left_task_pages = False  # a stateful action (navigation, tabs) was taken in this context
        self._pointer_moving: asyncio.Future | None = None  # the pointer leaving the page (episode over)
        self._episode: _Episode | None = None
        self._state = BrowserGymState()
        #: How this session's episodes started (`StartMode`): in place (``restart``, ``switch``)
        #: or by a page load (``load``, also a switch that fell back to one).
        self.episode_starts: Counter[str] = Counter()

    # -- reset ---------------------------------------------------------------------------
    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task: str | None = None,
        task_name: str | None = None,
        **options: Any,
    ) -> BrowserGymObservation:
        chosen = self.task_set.check_task(
            task or task_name or (self._episode.task if self._episode else self.config.task)
        )
        next_task = options.get("next_task")
        if next_task is not None:
            next_task = self.task_set.check_task(next_task)
        parts, max_steps, time_limit_s = episode_options(
            options,
            observation=self.config.observation,
            max_steps=self.config.max_steps,
            time_limit_s=self.config.time_limit_s,
        )
        checked_seed(seed)
        try:
            page = await self._fresh_page(chosen)
            await release_held(self._actx)
            start = self._start_mode(chosen, page.url)
            self._loaded_task = None
            if start != "load":  # observe the page afresh, as BrowserGym does after its (fresh-page) reset,
                # with no pointer over it (nothing hovered)
                await asyncio.gather(forget_marks(page), self._pointer_off(page))
            goal = await self.task_set.start_episode(
                page, chosen, seed, start=start, episode_max_time_ms=self.config.episode_max_time_ms
            )
            self.episode_starts[getattr(page, "_envharness_started", start)] += 1
            self._loaded_task = chosen
        except BrowserUnavailable:  # no browser to be had (none launches, none answers): said as it is
            raise
        except Exception as e:
            self._raise_if_lost(e)
            raise
        self._episode = _Episode(chosen, seed, goal, parts, max_steps, time_limit_s)
        self._actx.chat_messages[:] = [
            {"role": "assistant", "message": _GREETING},
            {"role": "user", "message": goal},
        ]
        self._actx.infeasible = False
        self._state = BrowserGymState(
            episode_id=episode_id or str(uuid.uuid4()),
            step_count=0,
            task_name=chosen,
            seed=seed,
            goal=goal,
            max_steps=max_steps,
        )
        observation = await self._observe(reward=0.0, done=False, last_action="", error="", info={})
        if self._pool is not None:
            # A next task the page can be switched to in place costs less than a context swap.
            if (
                next_task is not None
                and next_task != chosen
                and not self.task_set.can_switch(next_task, page.url)
            ):
                self._pool.prepare(next_task)
            self._pool.refill()
        return observation

    async def _pointer_off(self, page: Any) -> None:
        """Move the pointer off the page, unless it is off already: moved there when the last
        episode ended (`_move_pointer_later`), or never on this page. A move waits for the
        renderer's next frame (~17 ms), which a reset should not."""
        moving, self._pointer_moving = self._pointer_moving, None
        if moving is not None:
            await asyncio.gather(moving, return_exceptions=True)
        if not getattr(page, "_envharness_pointer_off", False):
            await page.mouse.move(-1, -1)
            page._envharness_pointer_off = True

    def _move_pointer_later(self) -> None:
        """The episode is over: move the pointer off the page now, while the client decides, so
        that the next reset does not wait for it."""
        page = self._main_page
        if self._pointer_moving is None and not getattr(page, "_envharness_pointer_off", False):

            async def move() -> None:
                await page.mouse.move(-1, -1)
                page._envharness_pointer_off = True

            self._pointer_moving = asyncio.ensure_future(move())

    def _start_mode(self, task: str, url: str) -> StartMode:
        """The cheapest way to a fresh episode of `task` in the page at `url` (see `StartMode`)."""
        if not self.config.fast_reset:
            return "load"
        if self._loaded_task == task and self.task_set.can_restart(task, url):
            return "restart"
        return "switch" if self.task_set.can_switch(task, url) else "load"

    async def _fresh_page(self, task: str) -> Any:
        """The session's main page, in a live context, with any extra tabs closed. A new context
        comes from the warm pool when one is ready (its page may show `task` already); so does a
        task change for which the pool has a page prepared (``next_task``)."""
        if not self._alive():
            await self._close_context()
            warm = self._pool.take(task) if self._pool is not None else None
            self._attach(warm or await open_page(self.engine, self.config, self.task_set, self._guard))
        elif task != self._loaded_task and self._pool is not None:
            warm = self._pool.take(task, exact=True)
            if warm is not None:
                self._pool.close_later(self._context)  # off the reset's path
                self._attach(warm)
        for page in list(self._context.pages):
            if page is not self._main_page:
                await page.close()
        self._actx.page = self._main_page
        return self._main_page

    def _attach(self, warm: WarmPage) -> None:
        """Make `warm`'s context and page this session's."""
        self._context, self._generation, self._main_page = warm.context, warm.generation, warm.page
        self._page_crashed = False
        self._main_page.on("crash", self._on_crash)
        self._context.on("page", self._on_new_page)
        self._actx = ActionContext(
            self._context,
            self._main_page,
            self._guard,
            noop_wait_ms=self.config.noop_wait_ms,
            element_timeout_ms=self.config.action_timeout_ms,
            fast_actions=self.config.fast_actions,
        )
        self._loaded_task = warm.task
        self._left_task_pages = False

    def _on_crash(self, _page: Any) -> None:
        self._page_crashed = True

    def _on_new_page(self, page: Any) -> None:
        # A page opened by the task (popup, target=_blank) becomes the active one, as in BrowserGym.
        if self._actx is not None:
            self._actx.page = page

    # -- step ----------------------------------------------------------------------------
    async def step_async(self, action: BrowserGymAction) -> BrowserGymObservation:
        if self._episode is None:
            raise RuntimeError("call reset() before step()")
        if not self._alive():
            raise BrowserSessionLost(self._lost_message())
        action_str = action.action_str
        if self._episode.done:
            return await self._observe(
                reward=0.0,
                done=True,
                last_action=action_str,
                error="the episode is over; call reset() to start a new one",
                info={},
            )
        self._state.step_count += 1
        error = ""
        try:
            actions = parse_actions(action_str)
            if any(a.name in STATEFUL_ACTIONS for a in actions):
                self._loaded_task = None  # the next reset reloads the page
                self._left_task_pages = True  # and the context is not given to another session
            self._main_page._envharness_pointer_off = False  # an action may have moved it
            await execute(self._actx, actions)
            self._actx.guard.take_blocked(self._actx.page)  # a link or a redirect the browser was refused
        except ActionParseError as e:
            error = f"ValueError: invalid action: {e}"
        except Exception as e:  # the action failed in the page: report it, as BrowserGym does
            self._raise_if_lost(e)
            error = f"{type(e).__name__}: {_first_line(e)}"
        try:
            if self.config.pre_observation_delay_ms > 0:
                await self._actx.page.wait_for_timeout(self.config.pre_observation_delay_ms)
            # Reward and observation are read together (one round trip's wait, not three); when the
            # page is still loading a document (a navigation), wait for its DOM as BrowserGym does
            # and read again.
            status, captured = await asyncio.gather(self._validate(), self._capture(), return_exceptions=True)
            if isinstance(status, BaseException):
                raise status
            if not status.ready:  # what was captured may be of the old document, or have failed
                await self._actx.page.wait_for_load_state("domcontentloaded")
                status, captured = await asyncio.gather(self._validate(), self._capture())
            elif isinstance(captured, BaseException):
                raise captured
        except Exception as e:
            self._raise_if_lost(e)
            raise
        ep = self._episode
        elapsed = time.monotonic() - ep.started
        truncated = not status.done and (
            (ep.max_steps is not None and self._state.step_count >= ep.max_steps)
            or (ep.time_limit_s is not None and elapsed >= ep.time_limit_s)
        )
        done = status.done or truncated or self._actx.infeasible
        ep.done = done
        if done:
            self._move_pointer_later()
        self._state.cum_reward += status.reward
        return self._build(
            captured,
            reward=status.reward,
            done=done,
            last_action=action_str,
            error=error,
            info=status.info,
            truncated=truncated,
        )

    async def _validate(self) -> TaskStatus:
        if self._actx.page is not self._main_page or self._main_page.is_closed():
            return TaskStatus(0.0, True, {"error": "invalid page, terminating task"}, ready=False)
        try:
            return await self.task_set.task_status(self._main_page, self._episode.task)
        except Exception:
            if self._alive():  # the task's own check failed (a web task's reward raised): the episode ends
                self._episode.done = True
            raise

    # -- observation -----------------------------------------------------------------------
    async def _observe(
        self,
        *,
        reward: float,
        done: bool,
        last_action: str,
        error: str,
        info: dict[str, Any],
        truncated: bool = False,
    ) -> BrowserGymObservation:
        try:
            captured = await self._capture()
        except Exception as e:
            self._raise_if_lost(e)
            raise
        return self._build(
            captured,
            reward=reward,
            done=done,
            last_action=last_action,
            error=error,
            info=info,
            truncated=truncated,
        )

    async def _capture(self) -> tuple[Any, dict[str, Any], list[Any], list[str]]:
        """What the page shows: (active page, observation parts, pages, their titles)."""
        page = self._actx.page
        pages = list(self._context.pages)
        raw, *titles = await asyncio.gather(
            extract_page_observation(page, self._episode.parts), *(p.title() for p in pages)
        )
        return page, dict(raw), pages, titles

    def _build(
        self,
        captured: tuple[Any, dict[str, Any], list[Any], list[str]],
        *,
        reward: float,
        done: bool,
        last_action: str,
        error: str,
        info: dict[str, Any],
        truncated: bool = False,
    ) -> BrowserGymObservation:
        ep = self._episode
        page, raw, pages, titles = captured
        axtree_txt = raw.pop("axtree_txt", "") or ""
        pruned_html = raw.pop("pruned_html", "") or ""
        screenshot = raw.pop("screenshot", None)
        elapsed = time.monotonic() - ep.started
        active_index = pages.index(page) if page in pages else 0
        browsergym_obs = {
            **raw,
            "chat_messages": [dict(m) for m in self._actx.chat_messages],
            "goal": ep.goal,
            "goal_object": [{"type": "text", "text": ep.goal}],
            "url": page.url,
            "open_pages_urls": [p.url for p in pages],
            "open_pages_titles": titles,
            "active_page_index": active_index,
            "last_action": last_action,
            "last_action_error": error,
            "elapsed_time": elapsed,
        }
        self._state.current_url = page.url
        self._state.elapsed = elapsed
        self._state.done = done
        return BrowserGymObservation(
            text=axtree_txt or pruned_html,
            url=page.url,
            screenshot=screenshot,
            screenshot_format=ep.parts.screenshot_format if screenshot is not None else None,
            goal=ep.goal,
            axtree_txt=axtree_txt,
            pruned_html=pruned_html,
            error=error,
            last_action=last_action,
            last_action_error=error,
            focused_element_bid=str(raw.get("focused_element_bid") or ""),
            open_pages_urls=browsergym_obs["open_pages_urls"],
            active_page_index=active_index,
            elapsed_time=elapsed,
            truncated=truncated,
            done=done,
            reward=reward,
            metadata={
                "browsergym_obs": browsergym_obs,
                "browsergym_info": {"task_info": info, "truncated": truncated},
            },
        )

    # -- liveness ------------------------------------------------------------------------------
    def _alive(self) -> bool:
        return (
            self._context is not None
            and self.engine.holds(self._context, self._generation)
            and not self._page_crashed
            and not self._main_page.is_closed()
        )

    def _lost_message(self) -> str:
        return (
            "this session's browser page is gone (the browser crashed or was restarted); "
            "call reset() to start a new episode"
        )

    def _raise_if_lost(self, error: BaseException) -> None:
        if not self._alive():
            raise BrowserSessionLost(self._lost_message()) from error

    # -- state and clean-up ----------------------------------------------------------------------
    @property
    def state(self) -> BrowserGymState:
        if self._episode is not None:
            self._state.elapsed = time.monotonic() - self._episode.started
        return self._state

    async def _close_context(self) -> None:
        context, self._context = self._context, None
        if context is not None:
            await close_quietly(context)

    async def close_async(self) -> None:
        moving, self._pointer_moving = self._pointer_moving, None
        if moving is not None:
            await asyncio.gather(moving, return_exceptions=True)
        if self._reusable():
            warm = WarmPage(self._context, self._main_page, self._loaded_task, self._generation)
            self._context = None
            if await clear_for_reuse(warm.context, warm.page):
                self._pool.give_back(warm)
            else:
                self._pool.close_later(warm.context)
        await self._close_context()
        self._episode = None

    def _reusable(self) -> bool:
        """Whether the next session may have this context (see `WarmPool.give_back`): the session
        never left the task set's pages (no navigation, tab or upload action), and its page holds
        a task that can be switched in place, which the next reset rewrites or restarts."""
        return (
            self._pool is not None
            and self._alive()
            and not self._left_task_pages
            and self._loaded_task is not None
            and self.task_set.can_switch(self._loaded_task, self._main_page.url)
        )

    def close(self) -> None:
        """Contexts are closed by `close_async` (the server calls it) or with the engine."""


def guard_for(config: BrowserGymConfig, task_set: Any) -> HostGuard:
    """The hosts a session may reach: what the task set serves or names, and `allowed_hosts`."""
    return HostGuard((*config.allowed_hosts, *task_set.hosts), served=task_set.served)


async def open_page(
    engine: BrowserEngine, config: BrowserGymConfig, task_set: Any, guard: HostGuard, task: str | None = None
) -> WarmPage:
    """A new context and its page; with `task`, the page shows that task, an episode started
    (the warm pool's way: a session's reset then restarts it in place, as a same-task reset)."""
    context = await engine.new_context(
        viewport=config.viewport or task_set.viewport, guard=guard, timeout_ms=config.page_timeout_ms
    )
    generation = engine.generation
    try:
        page = await context.new_page()
        page._envharness_pointer_off = True  # a new page has had no pointer over it
        if task is not None:
            await task_set.start_episode(
                page, task, None, start="load", episode_max_time_ms=config.episode_max_time_ms
            )
    except BaseException:
        await close_quietly(context)
        raise
    return WarmPage(context, page, task, generation)


@functools.lru_cache(maxsize=8)
def _options_schema(also: tuple[str, ...]) -> type[BaseModel]:
    """The reset options as pydantic checks them: the observation parts' own types (strict: a
    string is not a bool), finite positive limits, and the caller's other options as strings."""
    hints = typing.get_type_hints(ObservationParts)
    fields: dict[str, Any] = {name: (hints[name] | None, None) for name in OBSERVATION_OPTIONS}
    fields["screenshot_format"] = (Literal["png", "jpeg"] | None, None)
    fields["max_steps"] = (Annotated[int, Field(ge=1)] | None, None)
    fields["time_limit_s"] = (Annotated[float, Field(gt=0, allow_inf_nan=False)] | None, None)
    fields.update({name: (str | None, None) for name in ("next_task", *also)})
    config = ConfigDict(extra="forbid", strict=True)
    return create_model("ResetOptions", __config__=config, **fields)


def checked_seed(seed: Any) -> None:
    """A reset's seed, refused in words unless None or an integer in 0..MAX_SEED (both engines)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidOptions(f"seed must be an integer, got {seed!r}")
    if not 0 <= seed <= MAX_SEED:
        raise InvalidOptions(
            f"seed must be between 0 and {MAX_SEED} (BrowserGym's tasks draw an episode from 32 bits), got {seed}"
        )


def episode_options(
    options: dict[str, Any],
    *,
    observation: ObservationParts,
    max_steps: int | None,
    time_limit_s: float | None,
    also: tuple[str, ...] = (),
) -> tuple[ObservationParts, int | None, float | None]:
    """A reset's own options checked (both engines): observation parts over the server's
    defaults, ``max_steps`` and ``time_limit_s``; `also` names the caller's other options."""
    # next_task: a hint, the task the session's next reset will ask for (the warm pool prepares its
    # page); an engine with nothing to prepare ignores it.
    known = {*OBSERVATION_OPTIONS, "max_steps", "time_limit_s", "next_task"}
    unknown = set(options) - known - set(also)
    if unknown:
        raise InvalidOptions(
            f"unknown reset option(s) {', '.join(sorted(unknown))}; valid: task, seed, "
            f"episode_id, {', '.join(sorted(known | set(also)))}"
        )
    try:
        _options_schema(also).model_validate(options)
    except ValidationError as exc:
        words = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InvalidOptions(words) from None
    parts = dataclasses.replace(
        observation, **{k: options[k] for k in OBSERVATION_OPTIONS if options.get(k) is not None}
    )
    max_steps = options.get("max_steps", max_steps)
    time_limit_s = options.get("time_limit_s", time_limit_s)
    return parts, max_steps, time_limit_s


def _first_line(error: BaseException) -> str:
    """Playwright appends a multi-line call log to its messages; keep the reason."""
    text = str(error).strip()
    return text.split("\n=", 1)[0].split("\nCall log:", 1)[0].strip()[:500]
