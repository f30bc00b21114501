"""A library catalogue with three tools, `search`, `open` and `answer`, and partial credit.

The agent is asked for one book (by an author in a given year, or the oldest on a subject),
searches the catalogue, opens records to read their years, and answers with a call number:
reward 1 for the book asked for, 0.5 for a book that fits half the question (the right
author or subject, the wrong year), 0 otherwise. Each tool is a typed method: its docstring
is the tool's description, its type hints the tool's JSON schema.

    envharness serve library:SPEC --port 8000 --web       # (run from this folder)
    envharness eval --env library:SPEC --model scripted --tasks all --out runs/library
    envharness check library:SPEC

Walkthrough: docs/new_environment.md ("Several tools").
"""

import json
import random
import re

from envharness import Environment, InvalidAction, Observation, State, define_environment

BOOKS = {  # call number: (title, author, year, subjects)
    "QA-101": ("Tides of the Inner Sea", "Mara Quell", 1961, ("oceans", "maps")),
    "QA-102": ("The Salt Atlas", "Mara Quell", 1974, ("maps", "trade")),
    "QA-103": ("Harbours at Night", "Mara Quell", 1988, ("oceans", "cities")),
    "BT-201": ("A Grammar of Bees", "Otto Fenn", 1952, ("insects", "language")),
    "BT-202": ("Hive and Hearth", "Otto Fenn", 1967, ("insects", "cooking")),
    "BT-203": ("Moths of the Lantern Coast", "Ines Varga", 1979, ("insects", "oceans")),
    "CL-301": ("Clockwork Orchards", "Ines Varga", 1993, ("machines", "gardens")),
    "CL-302": ("The Patient Engine", "Ravi Osei", 1958, ("machines", "trade")),
    "CL-303": ("Gears for Gardeners", "Ravi Osei", 1982, ("machines", "gardens")),
    "DM-401": ("Bread of the Nine Cities", "Lena Brask", 1970, ("cooking", "cities")),
    "DM-402": ("A Map of Kitchens", "Lena Brask", 1999, ("cooking", "maps")),
    "DM-403": ("Night Markets", "Ravi Osei", 2004, ("trade", "cities")),
}
TASKS = ["author-year", "oldest-on-subject"]


class LibraryObservation(Observation):
    text: str = ""


class LibraryEnvironment(Environment):
    """Find a book in a library catalogue with search, open and answer; partial credit."""

    observation_type = LibraryObservation

    def reset(self, seed=None, episode_id=None, task="author-year", **options) -> LibraryObservation:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")
        rng, self._state = random.Random(seed), State(episode_id=episode_id, step_count=0)
        if task == "author-year":
            self._wanted = rng.choice(sorted(BOOKS))
            _, author, year, _ = BOOKS[self._wanted]
            self._half = {n for n, b in BOOKS.items() if b[1] == author}
            goal = f"Find the book by {author} first published in {year}."
        else:
            subject = rng.choice(sorted({s for b in BOOKS.values() for s in b[3]}))
            self._half = {n for n, b in BOOKS.items() if subject in b[3]}
            self._wanted = min(self._half, key=lambda n: BOOKS[n][2])
            goal = f"Find the oldest book about {subject}."
        return LibraryObservation(text=f"{goal} Answer with its call number.")

    def search(self, query: str) -> str:
        """Search the catalogue by words of a title, an author or a subject.

        Args:
            query: words to look for, e.g. an author's name or a subject
        """
        self._state.step_count += 1
        words = query.lower().split()
        found = [
            n
            for n, (t, a, _, s) in BOOKS.items()
            if words and all(w in f"{t} {a} {' '.join(s)}".lower() for w in words)
        ]
        return "\n".join(f"{n}: {BOOKS[n][0]} ({BOOKS[n][1]})" for n in found) or f"nothing matches {query!r}"

    def open(self, call_number: str) -> str:
        """Open a book's record: its title, author, year and subjects.

        Args:
            call_number: the book's call number, e.g. QA-101
        """
        self._state.step_count += 1
        title, author, year, subjects = self._book(call_number)
        return f"{call_number.upper()}: {title} by {author}, {year}; subjects: {', '.join(subjects)}"

    def answer(self, call_number: str) -> LibraryObservation:
        """Answer with the call number of the book asked for (ends the episode).

        Args:
            call_number: the book's call number
        """
        self._state.step_count += 1
        self._book(call_number)
        number = call_number.upper()
        reward = 1.0 if number == self._wanted else 0.5 if number in self._half else 0.0
        return LibraryObservation(text=f"You answered {number}.", reward=reward, done=True)

    def _book(self, call_number: str) -> tuple:
        if call_number.upper() not in BOOKS:
            raise InvalidAction(f"no book {call_number!r}; call numbers look like QA-101 (search finds them)")
        return BOOKS[call_number.upper()]

    @property
    def state(self) -> State:
        return self._state


def librarian(messages: list[dict]) -> str:
    """The scripted policy: search for the author or subject, open every book found, answer."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    asked = re.search(r"book by (.+?) first published in (\d+)|oldest book about (\w+)", text)
    found = re.findall(r"^([A-Z]{2}-\d{3}): .+ \(.+\)$", text, flags=re.M)
    opened = {
        n: (int(y), s)
        for n, y, s in re.findall(r"^(\S+): .+ by .+, (\d{4}); subjects: (.+)$", text, flags=re.M)
    }
    if not found:
        call = {"name": "search", "arguments": {"query": asked.group(1) or asked.group(3)}}
    elif unopened := [n for n in found if n not in opened]:
        call = {"name": "open", "arguments": {"call_number": unopened[0]}}
    else:
        year, subject = asked.group(2), asked.group(3)
        fits = [
            n for n in found if (year and opened[n][0] == int(year)) or (subject and subject in opened[n][1])
        ]
        call = {"name": "answer", "arguments": {"call_number": min(fits, key=lambda n: opened[n][0])}}
    return json.dumps(call)


SPEC = define_environment(
    LibraryEnvironment, tools=["search", "open", "answer"], tasks=TASKS, scripted_policy=librarian
)
