"""A MiniWoB agent written only against the `openai` SDK and the `mcp` SDK (no envharness).

It owns its loop: reset the page through MCP, show the model the page and a few tools, send
its whole history to the chat-completions API every turn, run the tool calls it gets back
through MCP, and stop when the episode is done. Point it at any OpenAI-compatible server and
any MCP server with MiniWoB's tools; `envharness train --agent` points it at envharness's
policy endpoint (which records the exact tokens for GRPO) and at `envharness serve
browsergym`'s `/mcp` (which records the reward):

    envharness serve browsergym --port 8000 &  envharness policy --model embedded --port 9000 &
    curl -s -X POST http://127.0.0.1:9000/rollouts          # {"rollout_id": "ID", "base_url": ".../rollouts/ID/v1"}
    python examples/openai_mcp_agent/agent.py --base-url http://127.0.0.1:9000/rollouts/ID/v1 \
        --mcp-url "http://127.0.0.1:8000/mcp?rollout=ID"
    curl -s http://127.0.0.1:9000/rollouts/ID/sample; curl -s http://127.0.0.1:8000/mcp/rollouts/ID
    envharness train --agent examples/openai_mcp_agent/agent.py:play --tasks click-test --steps 1
"""

from __future__ import annotations

import argparse
import asyncio
import json

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from openai import AsyncOpenAI

SYSTEM = (
    "You control a web page. Answer with one tool call as JSON, for example "
    '{"name": "click", "arguments": {"bid": "13"}}. Tools:\n'
)
NUDGE = 'That was not a tool call. Answer with JSON only, e.g. {"name": "click", "arguments": {"bid": "13"}}.'


def _text(result) -> str:
    return "\n".join(part.text for part in result.content if getattr(part, "type", "") == "text")


def _openai_tools(tools, names) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.inputSchema},
        }
        for t in tools
        if t.name in names
    ]


async def play(
    base_url: str,
    mcp_url: str,
    task: str | None = "click-test",
    seed: int | None = None,
    model: str = "policy",
    api_key: str = "none",
    max_turns: int = 3,
    max_tokens: int = 48,
    tools: tuple[str, ...] = ("click", "fill"),
) -> dict:
    """Play one episode; returns what the last tool result said (reward, done)."""
    llm = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    async with streamable_http_client(mcp_url) as (read, write, _), ClientSession(read, write) as mcp:
        await mcp.initialize()
        offered = _openai_tools((await mcp.list_tools()).tools, tools)
        reset_args = {k: v for k, v in {"task": task, "seed": seed}.items() if v is not None}
        page = await mcp.call_tool("reset", reset_args)
        signatures = "\n".join(
            f"- {t['function']['name']}({', '.join(t['function']['parameters'].get('properties', {}))})"
            for t in offered
        )
        messages = [
            {"role": "system", "content": SYSTEM + signatures},
            {"role": "user", "content": _text(page)},
        ]
        state = dict(page.structuredContent or {})
        for _ in range(max_turns):
            reply = await llm.chat.completions.create(
                model=model, messages=messages, tools=offered, max_tokens=max_tokens
            )
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                messages.append({"role": "user", "content": NUDGE})
                continue
            for call in message.tool_calls:
                result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
                state = dict(result.structuredContent or {})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": _text(result)[:2000]})
            if state.get("done"):
                break
        await llm.close()
    return {"reward": state.get("reward"), "done": state.get("done")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible /v1 URL")
    parser.add_argument(
        "--mcp-url", required=True, help="an MCP server with MiniWoB's tools (streamable HTTP)"
    )
    parser.add_argument("--task", default="click-test")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--model", default="policy")
    parser.add_argument("--api-key", default="none")
    args = parser.parse_args()
    print(asyncio.run(play(args.base_url, args.mcp_url, args.task, args.seed, args.model, args.api_key)))


if __name__ == "__main__":
    main()
