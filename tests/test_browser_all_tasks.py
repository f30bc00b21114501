"""Every one of the 125 MiniWoB++ tasks resets and steps without error. For 103 of them an
episode started without a page load shows what envharness's own page load shows (bids, element
boxes and all): the task switched into in place from another task's page, restarted in place
after text typed and boxes ticked, and switched back into from another task's page. The other 22 are compared less: the 19 tasks whose pages show images are loaded,
not switched, and compared without element boxes (two loads differ there too); the 3 pages that
change by themselves (`CHANGING_BY_ITSELF`) compare their goal only. The reference is envharness's
page load, not BrowserGym's. Each switch and restart is checked to be one in place: the session's
`episode_starts` counts it as such and the page fetches no document (a page load fetches one).

One test per task, so that each reports on its own and a slow machine meets no suite-wide limit.
The checks themselves run four at a time (one browser, four pairs of sessions) in the background
from the first test on; each test waits for its task's result.
"""

import asyncio
import difflib
import re

import pytest
import pytest_asyncio

from envharness.envs.browsergym import miniwob
from envharness.envs.browsergym.factory import make_environment_factory
from envharness.envs.browsergym.miniwob_pages import shows_images
from envharness.envs.browsergym.models import BrowserGymAction

SESSIONS = 4
#: Pages that change by themselves, so two observations differ anyway: stock-market redraws its
#: price every 100 ms, terminal blinks its caret, click-pie animates its wheel.
CHANGING_BY_ITSELF = {"stock-market", "terminal", "click-pie"}
#: The parts compared; `extra_element_properties` carries every element's box, so a style sheet
#: or layout that differs shows there.
COMPARED = ("goal", "url", "axtree_txt", "pruned_html", "focused_element_bid", "open_pages_urls")


def _parts(task: str, obs) -> dict:
    parts = {name: getattr(obs, name) for name in COMPARED}
    properties = obs.metadata["browsergym_obs"]["extra_element_properties"]
    if shows_images(task):  # loaded, never switched (see `shows_images`)
        # An image that has not arrived yet has no size, is not seen and catches no click: element
        # boxes, visibility and set-of-marks differ between two page loads too (email-inbox's
        # icons, order-food's pictures), so only the text parts are compared.
        properties = {}
    parts["extra_element_properties"] = properties
    return parts


def _compare(task: str, how: str, loaded, other) -> list[str]:
    if task in CHANGING_BY_ITSELF:
        return [] if other.goal == loaded.goal else [f"{task}: {how} changed the goal"]
    problems = []
    a, b = _parts(task, loaded), _parts(task, other)
    for name in a:
        if a[name] != b[name]:
            problems.append(
                f"{task}: {how} gave another {name} than a page load:\n"
                + "\n".join(_diff(_text(a[name]), _text(b[name]), how))
            )
    return problems


def _text(value) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v}" for k, v in sorted(value.items()))
    return value if isinstance(value, str) else repr(value)


async def _check_task(pair, task: str) -> list[str]:
    """`pair`: a session that loads every page (``fast_reset=False``) and one that starts episodes
    in place; the second comes from another task's page, so its reset switches task in place."""
    loading, in_place = pair
    problems = []
    loaded = await loading.reset_async(task=task, seed=7)
    if not loaded.goal or not loaded.url.endswith(f"/{task}.html") or not loaded.text:
        problems.append(
            f"{task}: reset gave goal={loaded.goal!r} url={loaded.url!r} text={len(loaded.text)} chars"
        )
    previous = in_place._loaded_task
    seen, starts = len(_document_requests(in_place)), in_place.episode_starts.copy()
    switched = await in_place.reset_async(task=task, seed=7)  # a page load for the tasks with images
    first = "restart" if previous == task and task not in miniwob.RELOAD_ON_RESET else "switch"
    problems += _in_place(task, f"switching from {previous}", in_place, seen, starts, first)
    problems += _compare(task, f"switching in place from {previous}", loaded, switched)
    problems += await _compare_documents(task, f"switching in place from {previous}", loading, in_place)
    for action in [*_leave_marks(switched.axtree_txt), "mouse_click(120, 150)"]:
        obs = await in_place.step_async(BrowserGymAction(action_str=action))
        if obs.last_action_error and not action.startswith(("fill", "click(")):  # a field may refuse
            problems.append(f"{task}: step failed: {obs.last_action_error}")
        if obs.reward not in (0.0, 1.0):
            problems.append(f"{task}: reward {obs.reward!r}")
        if obs.done:  # a click may end the episode
            break
    seen, starts = len(_document_requests(in_place)), in_place.episode_starts.copy()
    again = await in_place.reset_async(task=task, seed=7)  # restarts (or switches) in place
    how = "switch" if task in miniwob.RELOAD_ON_RESET else "restart"
    problems += _in_place(task, "restarting", in_place, seen, starts, how)
    problems += _compare(task, "restarting in place after typing and clicking", loaded, again)
    # Back from another task's page, whose window the switch keeps: what this task's scripts set up
    # in it the first time (a library that sets itself up once) must not carry over.
    await in_place.reset_async(task="click-test", seed=1)
    back = await in_place.reset_async(task=task, seed=7)
    problems += _compare(task, "switching back from click-test", loaded, back)
    return problems


def _leave_marks(axtree_txt: str) -> list[str]:
    """Actions that leave what a task's own restart may not clear: text in up to four fields, up
    to four boxes, options or tabs clicked (BrowserGym starts every episode on a fresh page)."""
    fields = re.findall(r"\[(\w+)\] (?:textbox|searchbox|spinbutton|combobox)\b", axtree_txt)[:4]
    boxes = re.findall(r"\[(\w+)\] (?:checkbox|radio|option|tab|treeitem|slider|menuitem)\b", axtree_txt)[:4]
    return [f"fill('{bid}', '7')" for bid in fields] + [f"click('{bid}')" for bid in boxes]


def _document_requests(env) -> list[str]:
    """The documents the session's page has fetched so far (a page load fetches one through the
    context's route; a switch or restart in place fetches none)."""
    page = env._main_page
    if not hasattr(page, "_test_documents"):
        page._test_documents = []
        page.on(
            "request", lambda r: page._test_documents.append(r.url) if r.resource_type == "document" else None
        )
    return page._test_documents


def _in_place(task: str, how: str, env, seen: int, starts, expected: str) -> list[str]:
    """Problems if the reset just made was not `expected` (switch or restart) without a page load:
    `env.episode_starts` must say so, and the page must have fetched no document since `seen`.
    A task whose page shows images is loaded instead of switched (see `shows_images`)."""
    fetched, started = _document_requests(env)[seen:], env.episode_starts - starts
    if shows_images(task) and expected == "switch":
        return (
            [] if started == {"load": 1} else [f"{task}: {how}: started {dict(started)}, not by a page load"]
        )
    if started != {expected: 1} or fetched:
        return [f"{task}: {how}: started {dict(started)}, fetched {fetched}: not a {expected} in place"]
    return []


async def _compare_documents(task: str, how: str, loading, in_place) -> list[str]:
    """The documents' markup, text nodes included (which no observation text shows, but every DOM
    snapshot carries: a switch once left the inlined scripts' text in the page, ~850 kB per step)."""
    if task in CHANGING_BY_ITSELF or shows_images(task):  # images: loaded, boxes differ (`_parts`)
        return []
    markup = "() => document.documentElement.outerHTML"
    loaded, other = [await env._main_page.evaluate(markup) for env in (loading, in_place)]
    if loaded == other:
        return []
    return [f"{task}: {how} gave another document than a page load:\n" + "\n".join(_diff(loaded, other, how))]


def _diff(before: str, after: str, how: str) -> list[str]:
    return list(
        difflib.unified_diff(before.splitlines(), after.splitlines(), "page load", how, n=1, lineterm="")
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
    pairs = [(factory(), factory()) for _ in range(min(SESSIONS, len(todo)) or 1)]
    envs = [env for pair in pairs for env in pair]

    setup_errors: list[str] = []

    async def worker(pair):
        try:
            pair[0].config.fast_reset = False  # every reset loads the page: the reference
            await pair[1].reset_async(task="click-test", seed=1)  # so that the first task is switched to
        except Exception as e:  # this pair checks nothing; `settle` fails what no pair checked
            setup_errors.append(f"{type(e).__name__}: {e}")
            return
        while todo:
            task = todo.pop(0)
            try:
                futures[task].set_result(await _check_task(pair, task))
            except Exception as e:  # reported by that task's test
                futures[task].set_exception(e)

    async def settle():
        """Once every worker has stopped, a task none could check fails at once, with the reason
        (never a wait for its test's timeout)."""
        await asyncio.gather(*workers, return_exceptions=True)
        for task, future in futures.items():
            if not future.done():
                future.set_exception(RuntimeError(f"no session could check {task}: {setup_errors[:1]}"))

    workers = [asyncio.create_task(worker(pair)) for pair in pairs]
    settler = asyncio.create_task(settle())
    try:
        yield futures
    finally:
        for w in [*workers, settler]:
            w.cancel()
        await asyncio.gather(*workers, settler, return_exceptions=True)
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
    assert set(miniwob.all_tasks()) >= miniwob.RELOAD_ON_RESET


def test_seed_drawn_as_browsergym_does():
    import browsergym.miniwob.all as bg

    task = bg.ClickTestTask(seed=123, base_url="http://x/")
    assert miniwob.episode_seed(123) == task.random.randint(0, 1000000)
