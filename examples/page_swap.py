#!/usr/bin/env python3
"""Does the policy read the page? Swap the page under its first action and see whether the action follows.

    python examples/page_swap.py --model runs/sft/final --run runs/base-eval
    python examples/page_swap.py --model runs/sft/final --run runs/base-eval --tasks enter-text --json out.json

For every held-out episode A of `--run` (an `eval --prompt compact` run folder: its episodes hold
the conversations the model was shown) and the next seed B of the same task whose first page
differs, the model's first action is generated greedily twice, with everything fixed but the
page: the conversation up to A's first page, then the same conversation with B's first page in
its place. Reported per task:

- `depends`: the share of pairs whose first action changes when the page is swapped;
- `follows`: the share whose action on B uses B's own target text (a quoted string of B's goal:
  the text to type, the username) and none of A's. A policy that ignores the page, or that
  produces page-dependent noise, scores 0 here; one that reads the target scores 1.

Why first actions: they are generated from the page alone (no earlier action of the model), so
a change can only come from the page. The prompts are the recorded messages, rendered by the
same backend `eval --model` uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from envharness.models import GenerationRequest, SamplingParams, load_backend

_QUOTED = re.compile(r'"([^"]+)"')


def first_page_prompts(
    run: Path, tasks: list[str] | None
) -> dict[str, list[tuple[int, list[dict[str, Any]]]]]:
    """task -> [(seed, messages up to and including the first page)], seeds in order."""
    by_task: dict[str, list[tuple[int, list[dict[str, Any]]]]] = {}
    for line in (run / "episodes.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        episode = json.loads(line)
        if tasks and episode["task"] not in tasks:
            continue
        messages = episode["messages"]
        last_user = max(
            i for i, m in enumerate(messages) if m["role"] == "user"
        )  # the first page (after any worked example)
        by_task.setdefault(episode["task"], []).append((int(episode["seed"]), messages[: last_user + 1]))
    return {task: sorted(rows, key=lambda r: r[0]) for task, rows in by_task.items()}


def targets(page: dict[str, Any]) -> set[str]:
    """The quoted strings of a page's goal: what a policy that reads the page has to type."""
    return set(_QUOTED.findall(page["content"].split("\n", 1)[0]))


def pairs(
    rows: list[tuple[int, list[dict[str, Any]]]],
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(A's prompt, the same prompt with B's page in its place) for each A and the next B whose page differs."""
    out = []
    for i, (_, a) in enumerate(rows):
        for step in range(1, len(rows)):
            b = rows[(i + step) % len(rows)][1]
            if b[-1]["content"] != a[-1]["content"]:
                out.append((a, [*a[:-1], b[-1]]))
                break
    return out


def first_action(text: str) -> str:
    """The reply's first line: the action eval's parser would take first."""
    return text.strip().split("\n", 1)[0].strip()


async def generate(backend: Any, prompts: list[list[dict[str, Any]]], max_tokens: int) -> list[str]:
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    out = []
    for start in range(0, len(prompts), 8):
        batch = [GenerationRequest(messages=p, sampling=sampling) for p in prompts[start : start + 8]]
        out.extend(first_action(g.text) for g in await backend.generate(batch))
    return out


def swap_stats(
    actions_a: list[str], actions_b: list[str], pages: list[tuple[dict[str, Any], dict[str, Any]]]
) -> dict[str, Any]:
    """`depends` and `follows` (see the module docstring) over the pairs."""
    depends = sum(a != b for a, b in zip(actions_a, actions_b))
    follows = 0
    for act_b, (page_a, page_b) in zip(actions_b, pages):
        own, other = targets(page_b) - targets(page_a), targets(page_a) - targets(page_b)
        follows += bool(own) and any(t in act_b for t in own) and not any(t in act_b for t in other)
    n = max(1, len(actions_a))
    return {"pairs": len(actions_a), "depends": depends / n, "follows": follows / n}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a model directory (e.g. runs/sft/final) or `embedded`")
    p.add_argument(
        "--run",
        required=True,
        type=Path,
        help="an eval run folder (--prompt compact) whose first pages are swapped",
    )
    p.add_argument("--tasks", default="", help="comma-separated tasks of the run (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--json", type=Path, default=None, help="also write the results (and every pair's actions) here"
    )
    p.add_argument("--show", type=int, default=2, help="example pairs printed per task")
    args = p.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    backend = load_backend(args.model)
    results: dict[str, Any] = {"model": args.model, "run": str(args.run), "tasks": {}}
    for task, rows in first_page_prompts(args.run, [t for t in args.tasks.split(",") if t] or None).items():
        swapped = pairs(rows)
        on_a = asyncio.run(generate(backend, [a for a, _ in swapped], args.max_new_tokens))
        on_b = asyncio.run(generate(backend, [b for _, b in swapped], args.max_new_tokens))
        stats = swap_stats(on_a, on_b, [(a[-1], b[-1]) for a, b in swapped])
        stats["examples"] = [
            {
                "page_a": a[-1]["content"].split("\n", 1)[0],
                "action_a": x,
                "page_b": b[-1]["content"].split("\n", 1)[0],
                "action_b": y,
            }
            for (a, b), x, y in zip(swapped, on_a, on_b)
        ]
        results["tasks"][task] = stats
        print(
            f"{task:16s} pairs {stats['pairs']:3d}  first action depends on the page {stats['depends']:.2f}"
            f"  follows the swapped page's target {stats['follows']:.2f}"
        )
        for ex in stats["examples"][: args.show]:
            print(
                f"    {ex['page_a'][:70]!r} -> {ex['action_a']!r}\n    {ex['page_b'][:70]!r} -> {ex['action_b']!r}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
