"""An environment of several tools in the short form (`examples/custom_env/library.py`: `search`,
`open` and `answer` as typed methods, partial credit) goes through every surface: the tools
derived from the methods, `check` and the floor over every tool, `eval` with the scripted, tiny
and embedded models, `replay`, `serve` with OpenEnv's clients calling each tool, MCP and `/web`
listing them, and TRL's `environment_factory` training a step as docs/training.md writes it.
Also: what a reply's tool calls may look like, `ToolCall` from `envharness`, a parser that
returns something else refused in words, and every environment's sync client."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
from pathlib import Path
from typing import Annotated

import httpx
import pytest
from pydantic import Field

from envharness.cli import main as cli_main
from envharness.core.launchers import LocalServer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_env"
ENV = "library:SPEC"
TOOLS = ["search", "open", "answer"]
pytestmark = pytest.mark.timeout(900)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(autouse=True)
def importable(monkeypatch):
    """The example's module on the path here and in the servers started as child processes."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(EXAMPLE), *filter(None, [os.environ.get("PYTHONPATH")])])
    )


def _eval(out: Path, model: str, *more: str) -> int:
    argv = ["eval", "--env", ENV, "--model", model, "--tasks", "all", "--out", str(out), "--no-progress"]
    return cli_main([*argv, *more])


# -- the tools, from the methods --------------------------------------------------------------
def test_each_typed_method_is_a_tool_its_docstring_the_description_its_hints_the_schema():
    from library import SPEC

    factory = SPEC.harness.session_factory(lambda: None)
    assert [t["name"] for t in factory.tool_specs] == TOOLS
    search = factory.tool_specs[0]
    assert search == {
        "name": "search",
        "description": "Search the catalogue by words of a title, an author or a subject.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "words to look for, e.g. an author's name or a subject",
                }
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    }
    # the wire action is OpenEnv's CallToolAction; arguments are checked against the tool's schema
    action = SPEC.environment.action_type
    assert action(tool_name="open", arguments={"call_number": "QA-101"}).type == "call_tool"
    with pytest.raises(
        ValueError, match=r"unknown tool 'delete'; this environment's tools: search, open, answer"
    ):
        action.model_validate({"tool_name": "delete", "arguments": {}})
    with pytest.raises(ValueError, match=r"open: call_number: Field required"):
        action.model_validate({"tool_name": "open", "arguments": {}})
    schema = action.model_json_schema()
    assert [b["properties"]["tool_name"]["const"] for b in schema["oneOf"]] == TOOLS


def test_hints_annotated_fields_defaults_and_what_is_refused():
    from envharness import Environment, Observation, define_environment

    class Obs(Observation):
        text: str = ""

    class Lab(Environment):
        observation_type = Obs

        def reset(self, seed=None, episode_id=None, **options):
            return Obs(text="ready")

        def convert(
            self,
            value: float,
            unit: Annotated[str, Field(description="a unit, e.g. km")],
            exact: bool = False,
        ) -> str:
            """Convert a value."""
            return f"{value} {unit} {exact}"

        @property
        def state(self):
            return None

    async def measure(env: Lab, length: int) -> Obs:
        """Measure a length (an async function taking the environment first)."""
        return Obs(text=f"{length} m", reward=1.0, done=True)

    spec = define_environment(Lab, tools=["convert", measure])
    tool, measured = spec.harness.session_factory(lambda: None).tool_specs
    assert measured["name"] == "measure" and measured["description"].startswith("Measure a length")
    assert tool["inputSchema"]["properties"] == {
        "value": {"type": "number"},
        "unit": {"type": "string", "description": "a unit, e.g. km"},
        "exact": {"type": "boolean", "default": False},
    }
    assert tool["inputSchema"]["required"] == ["value", "unit"]
    served = spec.environment()
    result = served.step(served.action_type(tool_name="convert", arguments={"value": 3, "unit": "km"}))
    assert result.text == "3.0 km False"  # a string result is the observation's one text field
    awaited = asyncio.run(
        served.step_async(served.action_type(tool_name="measure", arguments={"length": "7"}))
    )
    assert (awaited.text, awaited.reward, awaited.done) == ("7 m", 1.0, True)  # "7": pydantic's lax int

    def untyped(env, value):
        return "x"

    with pytest.raises(ValueError, match=r"argument 'value' needs a type hint"):
        define_environment(Lab, tools=[untyped])
    with pytest.raises(ValueError, match=r"tool name 'reset'"):
        define_environment(Lab, tools=["reset"])
    with pytest.raises(
        ValueError, match=r"has no action_type: set one \(and step\), or name its tool methods"
    ):
        define_environment(Lab)


# -- a reply's tool calls ---------------------------------------------------------------------
def test_the_forms_of_a_reply_the_docs_show_are_read():
    """docs/new_environment.md, "A reply's tool calls": the template's form, the JSON shape, and
    the plain-text fallback of a one-argument tool (the guessing game)."""
    from guess import SPEC as GUESS
    from library import SPEC

    parse = SPEC.harness.tool_call_parser
    template = '<tool_call>\n{"name": "open", "arguments": {"call_number": "QA-102"}}\n</tool_call>'
    assert [(c.name, c.args) for c in parse(template)] == [("open", {"call_number": "QA-102"})]
    plain_json = 'I will search. {"name": "search", "arguments": {"query": "Otto Fenn"}}'
    assert [(c.name, c.args) for c in parse(plain_json)] == [("search", {"query": "Otto Fenn"})]
    assert parse("QA-102") == []  # three tools: a plain reply names none
    assert GUESS.harness.tool_call_parser("I think 42").args == {"number": 42}


def test_toolcall_is_exported_from_envharness():
    import envharness
    from envharness.harness.types import ToolCall

    assert envharness.ToolCall is ToolCall and "ToolCall" in envharness.__all__


def test_a_parser_returning_dicts_is_refused_in_words_at_the_first_reply(tmp_path, monkeypatch, capsys):
    (tmp_path / "dict_parser.py").write_text(
        "from guess import GuessEnvironment, bisect\n"
        "from envharness import define_environment\n"
        "SPEC = define_environment(GuessEnvironment, tasks=['guess-10'], scripted_policy=bisect,\n"
        "    tool_call_parser=lambda text: [{'name': 'guess', 'arguments': {'number': 5}}])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]]))
    argv = ["eval", "--env", "dict_parser:SPEC", "--model", "scripted", "--episodes", "1", "--no-progress"]
    assert cli_main([*argv, "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    (episode,) = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert episode["error"].startswith(
        "TypeError: the tool_call_parser returned dict ({'name': 'guess', 'arguments': {'number': 5}}); "
        "it must return a ToolCall, a list of ToolCall, or None: from envharness import ToolCall"
    )
    assert episode["tool_calls"] == []  # refused at the first reply, before any call


# -- check and the floor ----------------------------------------------------------------------
def test_check_and_the_floor_pass_and_cover_every_tool(capsys):
    from envharness.check import run_floor

    assert cli_main(["check", ENV, "--tasks", "all", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "9 passed, 0 failed" in out
    assert "12 bad action(s) refused" in out  # each tool's wrong arguments among them, on the wire
    report = run_floor(ENV, tasks=["author-year", "oldest-on-subject"], episodes=3)
    assert not any(e.success for e in report.episodes)
    called = {a.split("(")[0] for e in report.episodes for a in e.actions}
    assert set(TOOLS) <= called
    assert cli_main(["check", ENV, "--floor", "--no-progress"]) == 0


# -- eval, replay -----------------------------------------------------------------------------
def test_eval_scripted_with_partial_credit_then_replay_says_identical(tmp_path, capsys):
    out = tmp_path / "scripted"
    assert _eval(out, "scripted", "--episodes", "3", "--max-turns", "8") == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {t["task"]: t["success_rate"] for t in summary["tasks"]} == {
        "author-year": 1.0,
        "oldest-on-subject": 1.0,
        "all": 1.0,
    }
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert {c["name"] for e in episodes for c in e["tool_calls"]} == set(TOOLS)
    capsys.readouterr()
    assert cli_main(["replay", str(out)]) == 0
    assert "6/6 episodes identical" in capsys.readouterr().out


def test_partial_credit_is_half_and_not_a_success():
    from library import BOOKS, SPEC

    from envharness.harness.success import judge

    env = SPEC.environment()
    author, year = re.search(
        r"book by (.+) first published in (\d+)", env.reset(seed=0, task="author-year").text
    ).groups()
    other = next(n for n, b in BOOKS.items() if b[1] == author and b[2] != int(year))
    result = env.step(env.action_type(tool_name="answer", arguments={"call_number": other}))
    assert (result.reward, result.done) == (0.5, True)
    assert judge(0.5, result).metrics() == {"success": False, "partial_credit": True}


def test_eval_with_the_tiny_and_embedded_models_runs_every_episode(tmp_path):
    for model in ("tiny", "embedded"):
        out = tmp_path / model
        code = _eval(out, model, "--episodes", "1", "--max-turns", "2", "--max-new-tokens", "24")
        assert code == 0
        episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        assert len(episodes) == 2 and not any(e.get("error") for e in episodes)


def test_a_reply_in_the_templates_tool_call_form_reaches_the_right_tool():
    """What the embedded model writes when it calls a tool (its tool template's `<tool_call>`
    form, rendered by the template itself) reaches that tool on a served environment."""
    from library import SPEC

    from envharness.integrations.trl.tool_opening import render_tool_call
    from envharness.models.embedded import load_tokenizer
    from envharness.models.tool_template import with_tool_template

    tokenizer = with_tool_template(load_tokenizer())
    reply = render_tool_call(tokenizer, "open", {"call_number": "QA-102"})
    assert "<tool_call>" in reply
    (call,) = SPEC.harness.tool_call_parser(reply)

    async def play(url: str) -> str:
        factory = SPEC.harness.session_factory(
            functools.partial(SPEC.client, url), default_task="author-year"
        )
        session = await factory.create_async("author-year", 0, "e1")
        try:
            await session.initial_messages_async()
            result = await session.call_tool_async(call.name, call.args)
        finally:
            await session.close_async()
        return result.data

    with LocalServer(ENV) as server:
        assert (
            asyncio.run(play(server.base_url))
            == "QA-102: The Salt Atlas by Mara Quell, 1974; subjects: maps, trade"
        )


# -- serve: OpenEnv's clients, MCP, /web --------------------------------------------------------
def test_openenv_clients_call_each_tool_and_mcp_and_web_list_them():
    from openenv.core.generic_client import GenericEnvClient
    from openenv.core.mcp_client import MCPToolClient

    with LocalServer(ENV, web=True) as server:
        with GenericEnvClient(base_url=server.base_url).sync() as env:
            first = env.reset(seed=0, task="author-year")
            assert "Find the book by" in first.observation["text"]
            found = env.step({"type": "call_tool", "tool_name": "search", "arguments": {"query": "Quell"}})
            assert "QA-101: Tides of the Inner Sea (Mara Quell)" in found.observation["text"]
            opened = env.step({"tool_name": "open", "arguments": {"call_number": "BT-201"}})
            assert opened.observation["text"].startswith("BT-201: A Grammar of Bees by Otto Fenn, 1952")
            with pytest.raises(RuntimeError, match=r"no book 'ZZ-999'.*\(code: EXECUTION_ERROR\)"):
                env.step({"tool_name": "open", "arguments": {"call_number": "ZZ-999"}})
            with pytest.raises(RuntimeError, match=r"unknown tool 'drop'"):
                env.step({"tool_name": "drop", "arguments": {}})
            answered = env.step({"tool_name": "answer", "arguments": {"call_number": "BT-201"}})
            assert answered.done and answered.reward in (0.0, 0.5, 1.0)
            assert env.state()["step_count"] == 4  # the refused open counted; the unknown tool was not a step
        with MCPToolClient(base_url=server.base_url).sync() as env:  # OpenEnv's tool client, over /ws
            env.reset(seed=0, task="author-year")
            found = env.call_tool("search", query="bees")  # (it returns the step's payload)
            assert found["observation"]["text"] == "BT-201: A Grammar of Bees (Otto Fenn)"

        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        tools = httpx.post(f"{server.base_url}/mcp", json=body, headers=headers).json()["result"]["tools"]
        assert [t["name"] for t in tools if t["name"] not in ("reset", "state")] == TOOLS
        assert "step" not in {t["name"] for t in tools}
        info = httpx.get(f"{server.base_url}/web/info").json()
        assert [a["name"] for a in info["actions"]] == TOOLS
        assert json.loads(info["actions"][1]["example"]) == {
            "tool_name": "open",
            "arguments": {"call_number": "..."},
        }


def test_mcp_calls_each_tool_on_one_session():
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def play(url: str) -> list[str]:
        async with streamablehttp_client(f"{url}/mcp") as (read, write, _), ClientSession(read, write) as mcp:
            await mcp.initialize()
            await mcp.call_tool("reset", {"seed": 0, "task": "author-year"})
            texts = []
            for name, arguments in [
                ("search", {"query": "Ravi Osei"}),
                ("open", {"call_number": "CL-302"}),
                ("answer", {"call_number": "CL-302"}),
            ]:
                result = await mcp.call_tool(name, arguments)
                assert not result.isError, result
                texts.append(result.structuredContent["observation"]["text"])
            return texts

    with LocalServer(ENV) as server:
        texts = asyncio.run(play(server.base_url))
    assert "CL-302: The Patient Engine (Ravi Osei)" in texts[0] and "1958" in texts[1]
    assert texts[2] == "You answered CL-302."


# -- the sync client and TRL --------------------------------------------------------------------
def test_every_environment_has_a_sync_client_and_the_async_one_is_refused_with_the_remedy():
    from guess import SPEC as GUESS

    from envharness.core.registry import get_spec
    from envharness.integrations.trl.environment import environment_factory

    assert GUESS.sync_client is GUESS.sync_client and not asyncio.iscoroutinefunction(GUESS.sync_client.reset)
    assert get_spec("echo").sync_client.async_client_class.__name__ == "AsyncEchoEnv"
    with LocalServer("guess:SPEC") as server, GUESS.sync_client(server.base_url) as env:
        assert "from 1 to 100" in env.reset(seed=0, task="guess-100").observation.text
        with pytest.raises(TypeError, match=r"needs a synchronous client .*SPEC\.sync_client"):
            environment_factory("guess:SPEC", functools.partial(GUESS.client, base_url=server.base_url))
        # the harness's own session, given an async client and called without an event loop
        session = GUESS.harness.session_factory(functools.partial(GUESS.client, server.base_url)).create(
            "guess-100", 0
        )
        with pytest.raises(TypeError, match=r"call its \*_async methods .*SPEC\.sync_client"):
            session.initial_messages()


def test_trl_environment_factory_as_the_docs_write_it_trains_a_step_and_replays(tmp_path):
    from library import SPEC
    from trl import GRPOTrainer

    from envharness.harness.records import read_records
    from envharness.integrations.trl.environment import (
        EpisodeLog,
        close_at_train_end,
        environment_factory,
        load_model,
    )
    from envharness.integrations.trl.grpo_args import grpo_config
    from envharness.integrations.trl.training import TrainConfig
    from envharness.replay import replay_run

    model, tokenizer = load_model("tiny", tools=True)
    with LocalServer("library:SPEC") as server:
        factory = environment_factory(
            "library:SPEC",
            functools.partial(SPEC.sync_client, base_url=server.base_url),
            tokenizer=tokenizer,
            num_generations=2,
            log=EpisodeLog(tmp_path / "run"),
        )
        with factory() as env:  # one method per tool, as TRL reads them
            assert "Find the book" in env.reset(seed=5)
            assert "Otto Fenn" in env.search(query="Otto Fenn")
            assert env.open(call_number="nope").startswith("Error: ")
        config = TrainConfig(
            model="tiny", output_dir=str(tmp_path), max_steps=1, num_generations=2, groups_per_step=1,
            max_completion_length=8, learning_rate=1e-2,
        )  # fmt: skip
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            environment_factory=factory,
            args=grpo_config(config, save_strategy="no"),
            callbacks=[close_at_train_end(factory)],
        )
        assert {tool.__name__ for tool in trainer._env_tools[None]} == set(TOOLS)
        trainer.train()
    assert trainer.state.global_step == 1
    records = read_records(tmp_path / "run" / "episodes.jsonl")
    assert len(records) == 3 and {r.task for r in records} == {"author-year"}
    report = replay_run(tmp_path / "run")
    assert report.identical == len(report.episodes) == 3


def test_the_web_page_lists_each_tool_and_plays_one_in_chromium():
    from playwright.async_api import async_playwright

    from envharness.envs.browsergym.engine import CHROMIUM_ARGS, DEFAULT_CHROMIUM

    async def play(url: str) -> None:
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=DEFAULT_CHROMIUM, args=list(CHROMIUM_ARGS))
            page = await browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{url}/web")
            await page.wait_for_selector("#conn.live")
            assert await page.locator("#actions code").all_text_contents() == [
                "search(query: string)",
                "open(call_number: string)",
                "answer(call_number: string)",
            ]
            await page.select_option("#task", "oldest-on-subject")
            await page.click("#reset")
            await page.wait_for_function(
                "document.getElementById('axtree').textContent.includes('oldest book')"
            )
            await page.locator("#actions .ex").nth(1).click()  # the open tool's example fills the box
            example = await page.input_value("#action")
            await page.fill("#action", example.replace("...", "DM-401"))
            await page.press("#action", "Enter")
            await page.wait_for_function("document.getElementById('step-count').textContent === '1'")
            assert "Bread of the Nine Cities by Lena Brask, 1970" in await page.text_content("#axtree")
            assert await page.text_content("#error") == "" and not errors, errors
            await browser.close()

    with LocalServer(ENV, web=True) as server:
        asyncio.run(play(server.base_url))
