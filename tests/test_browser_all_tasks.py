"""Every one of the 125 MiniWoB++ tasks resets and steps without error, and restarting a task in
place shows what loading its page shows (bids included).

One test per task, so that each reports on its own and a slow machine meets no suite-wide limit.
The checks themselves run four at a time (one browser, four sessions) in the background from
the first test on; each test waits for its task's result.
"""

import asyncio
import difflib

import pytest
import pytest_asyncio

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction

SESSIONS = 4
#: Pages that change by themselves, so two observations differ anyway: stock-market redraws its
#: price every 100 ms, terminal blinks its caret, click-pie animates its wheel.
CHANGING_BY_ITSELF = {"stock-market", "terminal", "click-pie"}


async def _check_task(env, task: str) -> list[str]:
    problems = []
    first = await env.reset_async(task=task, seed=7)  # loads the page
    if not first.goal or not first.url.endswith(f"/{task}.html") or not first.text:
        problems.append(
            f"{task}: reset gave goal={first.goal!r} url={first.url!r} text={len(first.text)} chars"
        )
    obs = await env.step_async(BrowserGymAction(action_str="mouse_click(120, 150)"))
    if obs.last_action_error:
        problems.append(f"{task}: step failed: {obs.last_action_error}")
    if obs.reward not in (0.0, 1.0):
        problems.append(f"{task}: reward {obs.reward!r}")
    again = await env.reset_async(task=task, seed=7)  # restarts in place: what a fresh page shows
    if again.goal != first.goal:
        problems.append(f"{task}: in-place restart changed the goal: {first.goal!r} -> {again.goal!r}")
    for part in ("axtree_txt", "pruned_html") if task not in CHANGING_BY_ITSELF else ():
        if getattr(again, part) != getattr(first, part):
            problems.append(
                f"{task}: in-place restart gave another {part} than a page load:\n"
                + "\n".join(_diff(getattr(first, part), getattr(again, part)))
            )
    return problems


def _diff(before: str, after: str) -> list[str]:
    return list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), "page load", "in place", n=1, lineterm=""
        )
    )[:20]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def task_checks(request):
    """task -> future of its problems, checked by SESSIONS workers in the background (only the
    tasks whose tests were selected)."""
    selected = [
        item.callspec.params["task"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_task_resets_and_steps"
    ]
    loop = asyncio.get_running_loop()
    futures = {task: loop.create_future() for task in selected}
    todo = list(selected)
    factory = make_environment_factory()
    envs = [factory() for _ in range(min(SESSIONS, len(todo)) or 1)]

    async def worker(env):
        while todo:
            task = todo.pop(0)
            try:
                futures[task].set_result(await _check_task(env, task))
            except Exception as e:  # reported by that task's test
                futures[task].set_exception(e)

    workers = [asyncio.create_task(worker(env)) for env in envs]
    try:
        yield futures
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for env in envs:
            await env.close_async()
        await factory.aclose()


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("task", miniwob.all_tasks())
async def test_task_resets_and_steps(task_checks, task):
    problems = await task_checks[task]
    assert not problems, "\n".join(problems)


def test_task_list_equals_browsergym_registry():
    import browsergym.miniwob

    registered = {task.get_task_id() for task in browsergym.miniwob.ALL_MINIWOB_TASKS}
    assert {f"miniwob.{t}" for t in miniwob.all_tasks()} == registered
    assert len(miniwob.all_tasks()) == 125
    nondeterministic = {t.subdomain for t in browsergym.miniwob.ALL_MINIWOB_TASKS if t.nondeterministic}
    assert nondeterministic == miniwob.NONDETERMINISTIC_TASKS
    assert miniwob.RELOAD_ON_RESET <= set(miniwob.all_tasks())


def test_seed_drawn_as_browsergym_does():
    import browsergym.miniwob.all as bg

    task = bg.ClickTestTask(seed=123, base_url="http://x/")
    assert miniwob.episode_seed(123) == task.random.randint(0, 1000000)
