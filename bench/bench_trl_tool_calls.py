#!/usr/bin/env python3
"""How often does a model's first turn on TRL's tool loop make a valid tool call? (MiniWoB)

The prompt is exactly what `GRPOTrainer(environment_factory=...)` renders: the dataset row's
user message with `reset()`'s text appended, the environment's methods as `tools=`, through
the tokenizer's chat template; the reply is parsed by the tokenizer's response template, as
TRL parses it. A call is valid when it names one of the tools with arguments its signature
takes; it solves when playing it ends the episode with reward 1.

Side by side, one run, same seeds and sampling:
- before:   the adapter's old opening (the environment's plain-text instructions and page,
            "Reply with exactly one action ... Action: click('13')"), Qwen2.5's template;
- template: the same old opening with the shipped tool template (`load_model(tools=True)`);
- after:    the tool opening (`PromptStyle.tool_opening`, the call shown in the template's
            form) with the shipped tool template.

    python bench/bench_trl_tool_calls.py --model embedded --episodes 16
    python bench/bench_trl_tool_calls.py --model embedded,runs/tool-sft --conditions after   # and an SFT model
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import random
import sys

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def first_turn(model, tokenizer, env, row, temperature: float, max_new_tokens: int) -> tuple[bool, bool]:
    """(valid call, solved) for one episode's first model turn."""
    import torch

    prompt = [{"role": "user", "content": "" + _as_text(env.reset(**row))}]
    tools = [getattr(env, t["name"]) for t in env.tools]
    text = tokenizer.apply_chat_template(prompt, tools=tools, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, **sampling
        )
    reply = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
    try:
        calls = tokenizer.parse_response(reply, prefix=text).get("tool_calls") or []
    except Exception:  # unparseable JSON inside <tool_call>: not a valid call
        return False, False
    if not calls:
        return False, False
    function = calls[0].get("function", {})
    method = getattr(env, str(function.get("name")), None)
    arguments = function.get("arguments")
    if method is None or function.get("name") not in tools_names(env) or not isinstance(arguments, dict):
        return False, False
    try:
        inspect.signature(method).bind(**arguments)
    except TypeError:
        return False, False
    method(**arguments)
    return True, env.get_reward() >= 1.0


def tools_names(env) -> set[str]:
    return {t["name"] for t in env.tools}


def _as_text(opening) -> str:
    return opening if isinstance(opening, str) else "\n".join(b.get("text", "") for b in opening)


def old_opening(messages):
    """The adapter's opening before the tool openings: the user messages' text."""
    return "\n\n".join(str(m["content"]) for m in messages if m.get("role") == "user")


def run_model(spec: str, rows: list[dict], names: list[str], base_url: str, args) -> dict[str, list]:
    """Each condition's (valid, solved) outcomes for one model, same seeds and sampling."""
    import torch
    from trl.chat_template_utils import qwen2_5_chat_template

    from envharness.envs.browsergym import BrowserGymEnv
    from envharness.envs.browsergym.prompts import harness_prompt
    from envharness.integrations.trl.environment import environment_factory, load_model

    model, tokenizer = load_model(spec, tools=True)
    tool_template = tokenizer.chat_template
    conditions = {
        "before": (qwen2_5_chat_template, {"opening": old_opening, "prompt_builder": harness_prompt}),
        "template": (tool_template, {"opening": old_opening, "prompt_builder": harness_prompt}),
        "after": (tool_template, {}),
    }
    clients = functools.partial(BrowserGymEnv, base_url=base_url)
    results = {}
    for name in names:
        template, extra = conditions[name]
        tokenizer.chat_template = template
        with environment_factory("browsergym", clients, tokenizer=tokenizer, **extra) as factory:
            env = factory()
            random.seed(0)
            torch.manual_seed(0)
            outcomes = [
                first_turn(model, tokenizer, env, row, args.temperature, args.max_new_tokens) for row in rows
            ]
        results[name] = outcomes
        print(
            f"{spec} {name}: {sum(v for v, _ in outcomes)}/{len(outcomes)} valid", file=sys.stderr, flush=True
        )
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="embedded, tiny or a model directory; several: a,b")
    p.add_argument("--tasks", default="click-test,click-button,click-link,focus-text")
    p.add_argument("--conditions", default="before,template,after", help="of before, template, after")
    p.add_argument("--episodes", type=int, default=16, help="per condition, spread over the tasks")
    p.add_argument("--temperature", type=float, default=1.0, help="TRL's default sampling temperature")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)

    import torch

    from envharness.core.launchers import LocalServer
    from envharness.core.registry import env_harness

    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = args.tasks.split(",")
    names = args.conditions.split(",")
    unknown = set(names) - {"before", "template", "after"}
    if unknown:
        p.error(f"unknown conditions: {', '.join(sorted(unknown))}")
    rows = [{"task": tasks[i % len(tasks)], "seed": 1_000_000 + i} for i in range(args.episodes)]
    results = {}
    options = dict(env_harness("browsergym").train_server_options)
    with LocalServer("browsergym", **options) as server:
        for spec in args.model.split(","):
            for name, outcomes in run_model(spec, rows, names, server.base_url, args).items():
                results[(spec, name)] = outcomes
    n = len(rows)
    print(f"\ntasks {args.tasks}, {n} first turns each, temperature {args.temperature}\n")
    print("| model | condition | valid tool calls | solved in one call |")
    print("|---|---|---|---|")
    for (spec, name), outcomes in results.items():
        valid, solved = sum(v for v, _ in outcomes), sum(s for _, s in outcomes)
        print(f"| {spec} | {name} | {valid}/{n} ({valid / n:.0%}) | {solved}/{n} ({solved / n:.0%}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
