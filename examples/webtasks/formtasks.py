"""Three small web tasks with seeded variations (docs/web_tasks.md walks through them).

- ``fill-form``: type the seed's name, pick its city, submit (Python reward over what the
  page reported in ``window.WEBTASK_STATE``);
- ``find-item``: search the catalogue for the seed's item and open it (a JS check);
- ``tick-boxes``: tick exactly the topics the goal names, save (Python reward over the
  checkboxes' states, ``PageState.fields``).

Serve them: ``cd examples && envharness serve browsergym --option tasks=webtasks.formtasks``.
Each task also has a scripted solution (``solve``), so ``eval --model scripted`` plays them.
"""

from __future__ import annotations

import random
import re

from envharness.envs.browsergym.webtasks import PageState, WebTask, find_nodes

NAMES = [
    "Ada Lovelace",
    "Alan Turing",
    "Grace Hopper",
    "Edsger Dijkstra",
    "Barbara Liskov",
    "Donald Knuth",
    "Frances Allen",
    "John McCarthy",
]
CITIES = ["Berlin", "Lagos", "Lima", "Osaka", "Oslo", "Toronto"]
ITEMS = [
    "Anchor",
    "Banjo",
    "Compass",
    "Drum",
    "Easel",
    "Fiddle",
    "Globe",
    "Harp",
    "Inkwell",
    "Jigsaw",
    "Kettle",
    "Lantern",
    "Mandolin",
    "Notebook",
    "Oboe",
    "Piccolo",
    "Quill",
    "Rucksack",
    "Sextant",
    "Telescope",
]
TOPICS = ["art", "books", "cooking", "music", "science", "travel"]


# -- fill-form: Python reward ------------------------------------------------------------------
def form_params(rng: random.Random) -> dict:
    return {"name": rng.choice(NAMES), "city": rng.choice(CITIES)}


def form_reward(state: PageState) -> tuple[float, bool]:
    """(reward, done): nothing submitted yet -> go on; submitted -> 1 if both fields match."""
    submitted = (state.data or {}).get("submitted")
    if not submitted:
        return 0.0, False
    right = submitted["name"].strip() == state.params["name"] and submitted["city"] == state.params["city"]
    return float(right), True


_FORM_GOAL = re.compile(r"^Enter the name (.+) and choose the city (.+), then press Submit\.$")


def solve_form(goal: str, axtree_txt: str) -> str | None:
    match = _FORM_GOAL.match(goal)
    if not match:
        return None
    name, city = match.groups()
    textbox = find_nodes(axtree_txt, "textbox")[0]
    if textbox.prop("value") != name:
        return f"fill({textbox.bid!r}, {name!r})"
    radio = find_nodes(axtree_txt, "radio", city)[0]
    if radio.prop("checked") != "true":
        return f"click({radio.bid!r})"
    return f"click({find_nodes(axtree_txt, 'button', 'Submit')[0].bid!r})"


# -- find-item: JS check ------------------------------------------------------------------------
def item_params(rng: random.Random) -> dict:
    return {"item": rng.choice(ITEMS)}


#: Evaluated in the page with `params` and `seed` bound: a number, or {reward, done}.
FIND_ITEM_CHECK = """(() => {
  const opened = window.WEBTASK_STATE && window.WEBTASK_STATE.opened;
  if (!opened) return {reward: 0, done: false};
  return {reward: opened === params.item ? 1 : 0, done: true};
})()"""

_ITEM_GOAL = re.compile(r"^Search the catalogue for (.+) and open it\.$")


def solve_item(goal: str, axtree_txt: str) -> str | None:
    match = _ITEM_GOAL.match(goal)
    if not match:
        return None
    item = match.group(1)
    buttons = find_nodes(axtree_txt, "button", item)
    if buttons:
        return f"click({buttons[0].bid!r})"
    return f"fill({find_nodes(axtree_txt, ('searchbox', 'textbox'))[0].bid!r}, {item!r})"


# -- tick-boxes: Python reward over the checkboxes ------------------------------------------------
def topic_params(rng: random.Random) -> dict:
    return {"topics": sorted(rng.sample(TOPICS, rng.randint(1, 3)))}


def topics_goal(params: dict) -> str:
    return f"Tick {', '.join(params['topics'])} and nothing else, then press Save."


def topics_reward(state: PageState) -> tuple[float, bool]:
    if not (state.data or {}).get("saved"):
        return 0.0, False
    ticked = {topic for topic in TOPICS if state.fields.get(topic)}
    return float(ticked == set(state.params["topics"])), True


_TOPICS_GOAL = re.compile(r"^Tick (.+) and nothing else, then press Save\.$")


def solve_topics(goal: str, axtree_txt: str) -> str | None:
    match = _TOPICS_GOAL.match(goal)
    if not match:
        return None
    wanted = set(match.group(1).split(", "))
    for box in find_nodes(axtree_txt, "checkbox"):
        if (box.prop("checked") == "true") != (box.name in wanted):
            return f"click({box.bid!r})"
    return f"click({find_nodes(axtree_txt, 'button', 'Save')[0].bid!r})"


TASKS = [
    WebTask(
        name="fill-form",
        page="pages/form.html",
        params=form_params,
        reward=form_reward,
        solve=solve_form,
        goal="Enter the name {name} and choose the city {city}, then press Submit.",
        splits=("forms",),
    ),
    WebTask(
        name="find-item",
        page="pages/catalogue.html",
        params=item_params,
        js_check=FIND_ITEM_CHECK,
        solve=solve_item,
        goal="Search the catalogue for {item} and open it.",
        splits=("search",),
    ),
    WebTask(
        name="tick-boxes",
        page="pages/preferences.html",
        params=topic_params,
        reward=topics_reward,
        solve=solve_topics,
        goal=topics_goal,
        splits=("forms",),
    ),
]
