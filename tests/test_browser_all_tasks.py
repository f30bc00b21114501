"""Every one of the 125 MiniWoB++ tasks resets and steps without error (one browser, 4 sessions)."""

import asyncio

import pytest

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.models import BrowserGymAction

SESSIONS = 4


async def _check_task(env, task: str) -> list[str]:
    problems = []
    first = await env.reset_async(task=task, seed=7)  # loads the page
    if not first.goal or not first.url.endswith(f"/{task}.html") or not first.text:
        problems.append(f"{task}: reset gave goal={first.goal!r} url={first.url!r} text={len(first.text)} chars")
    obs = await env.step_async(BrowserGymAction(action_str="mouse_click(120, 150)"))
    if obs.last_action_error:
        problems.append(f"{task}: step failed: {obs.last_action_error}")
    if obs.reward not in (0.0, 1.0):
        problems.append(f"{task}: reward {obs.reward!r}")
    again = await env.reset_async(task=task, seed=7)  # restarts in place: same instance
    if again.goal != first.goal:
        problems.append(f"{task}: in-place restart changed the goal: {first.goal!r} -> {again.goal!r}")
    return problems


@pytest.mark.slow
async def test_all_125_tasks_reset_and_step():
    tasks = miniwob.all_tasks()
    assert len(tasks) == 125
    factory = make_environment_factory()
    envs = [factory() for _ in range(SESSIONS)]
    try:
        async def worker(env, mine):
            found = []
            for task in mine:
                found += await _check_task(env, task)
            return found

        results = await asyncio.gather(*(worker(env, tasks[i::SESSIONS]) for i, env in enumerate(envs)))
    finally:
        for env in envs:
            await env.close_async()
        await factory.aclose()
    problems = [p for found in results for p in found]
    assert not problems, "\n".join(problems)
