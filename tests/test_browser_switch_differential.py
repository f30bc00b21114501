"""A task changed in place leaves nothing of the last episode behind: differential against BrowserGym.

One envharness session plays task after task; before each task change it plays random actions
(mostly wrong ones: Tab presses, fills, scrolls, clicks on hidden elements, a held key, the mouse
moved or held down), so the next task is switched into in place from a page an agent has used.
BrowserGym 0.14.3 in this process plays the same tasks, seeds and actions, each reset on its own
fresh page. After every reset the two must agree on the goal, the URL, the AXTree (the
`RootWebArea`'s ``focused`` included) and the focused element; after every step on the AXTree, the
focused element, reward, done and whether the action failed.

The BrowserGym side and the mapping between the two AXTree texts come from `test_browser_fidelity`.
"""

from __future__ import annotations

import random
from urllib.parse import urlsplit

import pytest
from test_browser_fidelity import browsergym_make, browsergym_step, normalize  # noqa: F401

from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # ~2-3 min on a busy 2-core machine

#: Tasks whose pages show no image files (so the session switches into them in place) and do not
#: change by themselves between two observations (no timers, animations or random draws of their
#: own), in a fixed shuffled order so each is switched into from a different task.
TASKS = (
    "click-button",
    "enter-text-2",
    "click-checkboxes-soft",
    "focus-text-2",
    "login-user",
    "click-tab-2",
    "choose-list",
    "enter-password",
    "click-test-2",
    "read-table",
    "click-dialog-2",
    "multi-orderings",
    "enter-time",
    "click-link",
    "text-transform",
    "click-option",
    "simple-arithmetic",
    "click-widget",
    "focus-text",
    "navigate-tree",
    "click-checkboxes",
    "enter-text-dynamic",
    "guess-number",
    "click-test",
    "multi-layouts",
    "unicode-test",
    "login-user-popup",
    "click-button-sequence",
    "simple-algebra",
    "enter-date",
    "click-tab",
)
STEPS = 3
#: Actions that change nothing a later observation checks, or change it the same way on both sides.
FIXED_ACTIONS = (
    "keyboard_press('Tab')",
    "keyboard_down('Shift')",
    "keyboard_type('ab')",
    "scroll(0, 150)",
    "mouse_move(100, 120)",
    "mouse_down(60, 90)",
    "noop()",
)


def random_action(rng: random.Random, obs, episode: list[str]) -> str:
    """A random action on any element of the page, shown or hidden, or one of `FIXED_ACTIONS`.

    No Shift+Tab (nor Tab while this episode holds Shift): from the start of a page, BrowserGym's
    Chromium takes it to the last element, ours out of the page, after a page load as after a
    switch (a difference of its own, not a trace of the last episode)."""
    bids = sorted(obs.metadata["browsergym_obs"]["extra_element_properties"])
    bid = rng.choice(bids)
    action = rng.choice(
        [
            f"click('{bid}')",
            f"fill('{bid}', 'xy')",
            f"press('{bid}', 'Tab')",
            f"focus('{bid}')",
            *FIXED_ACTIONS,
        ]
    )
    if "Tab" in action and "keyboard_down('Shift')" in episode:
        return "keyboard_type('ab')"
    return action


def _all_actions():
    """BrowserGym's action set with the coordinate and keyboard actions too (ours takes them all)."""
    from browsergym.core.action.highlevel import HighLevelActionSet

    return HighLevelActionSet(subsets=["chat", "infeas", "bid", "coord", "nav", "tab"]).to_python_code


def _page(url: str) -> str:
    return urlsplit(url).path


def _differences(what: str, obs, bg_obs, properties: bool = False) -> list[str]:
    """What differs; `properties`: element boxes and visibility too (after a reset: BrowserGym's
    step widens its page's <html> box, a difference of its own that has nothing to do with resets)."""
    ours = {
        "goal": obs.goal,
        "url": _page(obs.url),
        "axtree": normalize(obs.axtree_txt),
        "focused bid": obs.focused_element_bid,
    }
    if properties:
        ours["element properties"] = obs.metadata["browsergym_obs"]["extra_element_properties"]
    theirs = {
        "goal": bg_obs["goal"],
        "url": _page(bg_obs["url"]),
        "axtree": normalize(_browsergym_axtree(bg_obs)),
        "focused bid": bg_obs["focused_element_bid"],
    }
    if properties:
        theirs["element properties"] = bg_obs["extra_element_properties"]
    problems = []
    for key in ours:
        if ours[key] != theirs[key]:
            problems.append(
                f"{what}: {key} differs\n  ours:       {ours[key]!r}\n  BrowserGym: {theirs[key]!r}"
            )
    return problems


def _browsergym_axtree(bg_obs) -> str:
    from browsergym.utils.obs import flatten_axtree_to_str

    return flatten_axtree_to_str(bg_obs["axtree_object"])


def _play(bg, ours, rng: random.Random, task: str, obs, history: list[str]) -> list[str]:
    """Random steps on both sides from `obs`, compared after each; stops at the episode's end."""
    problems = []
    for _ in range(STEPS):
        action = random_action(rng, obs, history)
        history.append(action)
        bg_obs, bg_reward, bg_terminated, bg_truncated = browsergym_step(bg, action)
        result = ours.step(BrowserGymAction(action_str=action))
        obs = result.observation
        what = f"{task} after {history[-3:]}"
        problems += _differences(what, obs, bg_obs)
        if bool(obs.last_action_error) != bool(bg_obs["last_action_error"]):
            problems.append(
                f"{what}: error {obs.last_action_error!r} vs BrowserGym's {bg_obs['last_action_error']!r}"
            )
        if (result.reward, result.done) != (bg_reward, bg_terminated or bg_truncated):
            problems.append(f"{what}: reward/done {(result.reward, result.done)} vs BrowserGym's")
        if result.done or problems:
            break
    return problems


def test_task_change_in_place_gives_browsergym_page_after_random_actions(browsergym_make, browser_server):  # noqa: F811
    rng = random.Random(45)
    ours = BrowserGymEnv(browser_server.base_url)
    problems: list[str] = []
    history: list[str] = []
    try:
        for seed, task in enumerate(TASKS):
            bg = browsergym_make(task, action_mapping=_all_actions())
            try:
                bg_obs, _ = bg.reset(seed=seed)
                obs = ours.reset(task=task, seed=seed).observation
                found = _differences(f"reset to {task} (seed {seed}) after {history[-3:]}", obs, bg_obs, True)
                history.clear()
                problems += found or _play(bg, ours, rng, task, obs, history)
            finally:
                bg.close()
    finally:
        ours.close()
    assert not problems, "\n".join(problems)


def test_page_has_the_focus_again_after_tabbing_out_of_it(browsergym_make, browser_server):  # noqa: F811
    """Tab past the last element takes the focus out of the page; the next task, switched into in
    place, has it again, as BrowserGym's fresh page has (``RootWebArea ..., focused``)."""
    with BrowserGymEnv(browser_server.base_url) as ours:
        ours.reset(task="click-test-2", seed=1)
        for _ in range(3):  # two buttons, then out of the page
            obs = ours.step(BrowserGymAction(action_str="keyboard_press('Tab')")).observation
        assert ", focused" not in obs.axtree_txt.splitlines()[0]  # the focus has left the page
        bg = browsergym_make("focus-text")
        try:
            bg_obs, _ = bg.reset(seed=2)
            obs = ours.reset(task="focus-text", seed=2).observation
        finally:
            bg.close()
    assert ", focused" in obs.axtree_txt.splitlines()[0]
    assert not _differences("reset after tabbing out of the page", obs, bg_obs, True)
