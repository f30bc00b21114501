"""`make_environment_factory`: what `envharness serve browsergym` calls.

The factory owns the one `BrowserEngine` (Chromium) of the server process and makes one
`BrowserGymEnvironment` per session; `await factory.aclose()` closes the browser.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from envharness.envs.browsergym.engine import BrowserEngine
from envharness.envs.browsergym.environment import (
    OBSERVATION_OPTIONS,
    BrowserGymConfig,
    BrowserGymEnvironment,
    guard_for,
    open_page,
)
from envharness.envs.browsergym.openenv_config import options_from_environ
from envharness.envs.browsergym.tasks import load_task_set
from envharness.envs.browsergym.warm_pool import WarmPage, WarmPool


class BrowserGymEnvironmentFactory:
    """Makes one `BrowserGymEnvironment` per session, all sharing one `BrowserEngine` and one
    pool of warm contexts (``warm_sessions``)."""

    def __init__(self, engine: BrowserEngine, config: BrowserGymConfig) -> None:
        self.engine = engine
        self.config = config
        task_set = load_task_set(config.tasks)
        guard = guard_for(config, task_set)
        self.pool = WarmPool(
            lambda task: open_page(engine, config, task_set, guard, task),
            alive=self._alive,
            size=config.warm_sessions,
            max_size=config.warm_sessions_max,
        )

    def __call__(self) -> BrowserGymEnvironment:
        return BrowserGymEnvironment(self.engine, dataclasses.replace(self.config), pool=self.pool)

    def _alive(self, warm: WarmPage) -> bool:
        return self.engine.holds(warm.context, warm.generation) and not warm.page.is_closed()

    def task_list(self) -> Any:
        """The tasks this server serves (the server's Task API): MiniWoB's, or the task set's."""
        from envharness.envs.browsergym.harness import served_task_list

        return served_task_list({"tasks": self.config.tasks} if self.config.tasks else {})

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self.engine.aclose()


def make_environment_factory(
    *,
    headless: bool | None = None,
    chromium_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> Any:
    """The server registry's entry point. ``engine=browsergym`` (or a ``benchmark`` other than
    miniwob) runs BrowserGym's own environments (`gym_engine`); otherwise `options` are `BrowserGymConfig` fields, plus the
    observation parts (``axtree``, ``pruned_html``, ``extra_properties``, ``screenshot``,
    ``screenshot_format``) as flat options. OpenEnv's ``BROWSERGYM_*`` variables in `environ`
    (default: this process's environment) fill in what the options leave unset (see
    `openenv_config`). The browser starts on the first reset."""
    from_environ = options_from_environ(os.environ if environ is None else environ)
    if headless is None:
        headless = from_environ.pop("headless", True)
    from_environ.pop("headless", None)
    options = {**from_environ, **options}
    engine = options.pop("engine", "envharness")
    if engine not in ("envharness", "browsergym"):
        raise ValueError(
            f"engine={engine!r}: choose envharness (the fast MiniWoB engine) or browsergym (BrowserGym's own code)"
        )
    browser = options.pop("browser", "local")
    if engine == "browsergym" or options.get("benchmark", "miniwob") != "miniwob":
        from envharness.envs.browsergym.gym_engine import make_gym_factory

        if browser != "local":
            raise ValueError(
                "browser=cdp://... runs with the envharness engine; BrowserGym's own code launches its browsers"
            )

        return make_gym_factory(headless=headless, **options)
    options.pop("benchmark", None)
    parts = {k: options.pop(k) for k in OBSERVATION_OPTIONS if k in options}
    fields = {f.name for f in dataclasses.fields(BrowserGymConfig)}
    unknown = set(options) - fields
    if unknown:
        raise ValueError(
            f"unknown browsergym option(s) {', '.join(sorted(unknown))}; "
            f"valid: browser, headless, chromium_path, {', '.join(sorted(fields | set(OBSERVATION_OPTIONS)))}"
        )
    if "allowed_hosts" in options:
        hosts = options["allowed_hosts"]
        options["allowed_hosts"] = tuple(hosts.split(",") if isinstance(hosts, str) else hosts)
    config = BrowserGymConfig(**options)
    config.observation = dataclasses.replace(config.observation, **parts)
    task_set = load_task_set(config.tasks)  # a task set that cannot load fails here, before serving
    config.task = task_set.check_task(config.task or task_set.default_tasks()[0])
    engine = browser_engine(
        browser,
        headless=headless,
        executable_path=chromium_path,
        allowed_hosts=(*config.allowed_hosts, *task_set.hosts),
    )
    return BrowserGymEnvironmentFactory(engine, config)


def browser_engine(browser: Any, **local: Any) -> Any:
    """`browser=local` (default): a Chromium launched here. `cdp://HOST:PORT[,cdp://...]`, a list
    of them, or `@FILE` (one per line, re-read as it changes): remote Chromiums over CDP."""
    if browser in (None, "", "local"):
        return BrowserEngine(**local)
    from envharness.envs.browsergym.remote_browsers import RemoteBrowsers

    return RemoteBrowsers(browser)
