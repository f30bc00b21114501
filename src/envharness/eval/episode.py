"""One eval episode's tape: what the model was shown and did at every step, with screenshots.

Two small pieces fill it while the harness runs the episode:

- `RecordingClient` wraps the episode's browser client: each observation (after reset and
  after every step) is noted on the tape, its JPEG screenshot is written to the run folder,
  and the screenshot is dropped from the observation before the harness sees it.
- `EvalModelStep` is the episode's model step: it ignores the harness's running chat and
  builds a fresh prompt from the tape (goal, url, AXTree, last steps, last error) with the
  prompt builder, asks the shared batcher for a completion, and parses it into one action.
  For vision policies the page's screenshot goes into the prompt's last user turn
  (`prompts/screenshot.py`); the step's record names the image file the model was shown.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envharness.harness.model_step import BatchingModelStep
from envharness.harness.tool_parsing import ToolCallParser
from envharness.harness.types import LLMResponse, Message, ModelStepResult, Tool
from envharness.models.base import GenerationRequest, SamplingParams
from envharness.prompts.screenshot import add_screenshot
from envharness.prompts.text import PromptBuilder, PromptContext, StepSummary, approximate_tokens


@dataclass
class StepRecord:
    """One step: the prompt, the model's reply, the action it became and what the page did."""

    index: int
    prompt: list[Message]
    completion: str
    action: str
    parse_error: str | None = None
    #: Screenshot (path relative to the run folder) and URL of the page the model saw.
    screenshot: str | None = None
    url: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_s: float = 0.0
    env_s: float | None = None
    reward: float | None = None
    done: bool = False
    #: Why the action failed: the env's last_action_error, or the harness's refusal.
    error: str = ""
    executed: bool = False


@dataclass
class _Page:
    goal: str = ""
    url: str = ""
    text: str = ""
    error: str = ""
    screenshot: str | None = None


@dataclass
class EpisodeTape:
    """Filled during one episode; `steps_as_dicts()` goes into its JSONL record."""

    run_dir: Path
    episode_id: str | None = None
    task: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    page: _Page = field(default_factory=_Page)
    #: Screenshot after the last step (the page the episode ended on).
    final_screenshot: str | None = None
    #: Leave the screenshot on the observation (a conversation prompt that shows it, "vision");
    #: otherwise the harness and its records never carry the image, only the saved file.
    keep_screenshots: bool = False
    #: An observation -> (goal, page text): the environment's `EnvHarness.describe_observation`.
    describe: Callable[[Any], tuple[str, str]] | None = None
    #: A model in the other seats (`--opponent self|<model>`): its moves, never the episode's messages.
    opponent_moves: list[dict[str, Any]] | None = None
    #: The other seats' moves the environment played, as each observation's metadata listed them
    #: (`opponent_moves`), each with the agent's moves before it (`after_step`).
    env_opponent_moves: list[dict[str, Any]] = field(default_factory=list)
    _shots: int = 0

    def _save_screenshot(self, observation: Any) -> str | None:
        data = getattr(observation, "screenshot_bytes", None)
        if not data:
            return None
        ext = "jpg" if (getattr(observation, "screenshot_format", None) or "jpeg") == "jpeg" else "png"
        relative = Path("screenshots") / (self.episode_id or "episode") / f"{self._shots:03d}.{ext}"
        self._shots += 1
        target = self.run_dir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if not self.keep_screenshots:
            observation.screenshot = None  # the harness and its records never carry the image
        return relative.as_posix()

    def observe(self, result: Any, *, step_elapsed_s: float | None = None) -> None:
        """Note a reset/step result: the page now shown, and the outcome of the pending step."""
        obs = result.observation
        shot = self._save_screenshot(obs)
        error = getattr(obs, "last_action_error", "") or ""
        goal, text = (self.describe or describe_observation)(obs)
        self.page = _Page(
            goal=goal or self.page.goal,
            url=getattr(obs, "url", "") or "",
            text=text,
            error=error,
            screenshot=shot,
        )
        self.final_screenshot = shot
        self._note_env_moves(result)
        if step_elapsed_s is not None and self.steps and not self.steps[-1].executed:
            last = self.steps[-1]
            last.executed, last.env_s = True, step_elapsed_s
            last.reward, last.done, last.error = result.reward, bool(result.done), error

    def _note_env_moves(self, result: Any) -> None:
        metadata = getattr(result.observation, "metadata", None)
        moves = metadata.get("opponent_moves") if isinstance(metadata, dict) else None
        if self.opponent_moves is not None or not isinstance(moves, list):
            return  # a model in the other seats records its own moves
        noted = [dict(m, after_step=len(self.steps), done=False) for m in moves if isinstance(m, dict)]
        if noted and result.done:
            noted[-1]["done"] = True
        self.env_opponent_moves.extend(noted)

    def note_action(self, action_str: str) -> None:
        if self.steps and not self.steps[-1].executed:
            self.steps[-1].action = action_str

    def note_refusal(self, messages: list[Message]) -> None:
        """Close the pending step if it never reached the env: the harness refused it (its
        error is that step's tool message; one tool call per turn, so the Nth tool message
        answers step N) or the episode ended first."""
        last = self.steps[-1] if self.steps else None
        if last is None or last.executed:
            return
        tool_messages = [m for m in messages if m.get("role") == "tool"]
        last.executed = len(tool_messages) >= len(self.steps)
        last.error = (
            str(tool_messages[len(self.steps) - 1].get("content", ""))
            if last.executed
            else "the action was not executed"
        )

    def page_image(self) -> Any:
        """The screenshot of the page now shown, as an RGB PIL image (None without one)."""
        if not self.page.screenshot:
            return None
        from PIL import Image

        with Image.open(self.run_dir / self.page.screenshot) as image:
            return image.convert("RGB")

    def prompt_for_record(self, messages: list[Message], page_image: Any) -> list[Message]:
        """`messages` as JSON can hold them: each image part names its file in the run folder
        (the page's screenshot, or the resized copy the model was actually shown)."""
        out = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, list):
                content = [
                    {"type": "image", "image": self._image_file(p["image"], page_image)}
                    if isinstance(p, dict) and p.get("type") == "image"
                    else p
                    for p in content
                ]
                message = {**message, "content": content}
            out.append(message)
        return out

    def conversation_for_record(self, messages: list[Message]) -> list[Message]:
        """A conversation's messages as JSON can hold them: its images are the episode's
        screenshots in order (one per observation, shrunk for the model), so the i-th image part
        names the i-th saved screenshot."""
        out, shots = [], 0
        for message in messages:
            content = message.get("content")
            if isinstance(content, list):
                parts = []
                for part in content:
                    if isinstance(part, dict) and part.get("type") == "image":
                        name = Path("screenshots") / (self.episode_id or "episode")
                        found = (
                            sorted(p.name for p in (self.run_dir / name).glob(f"{shots:03d}.*"))
                            if self.run_dir
                            else []
                        )
                        part = {
                            "type": "image",
                            "image": (name / found[0]).as_posix() if found else "(screenshot)",
                        }
                        shots += 1
                    parts.append(part)
                message = {**message, "content": parts}
            out.append(dict(message))
        return out

    def _image_file(self, image: Any, page_image: Any) -> str:
        if image is page_image and self.page.screenshot:
            return self.page.screenshot
        relative = (
            Path("screenshots") / (self.episode_id or "episode") / f"prompt-{len(self.steps) + 1:03d}.png"
        )
        (self.run_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        image.save(self.run_dir / relative, format="PNG")
        return relative.as_posix()

    def history(self) -> list[StepSummary]:
        summaries = []
        for step in self.steps:
            error = step.error or (
                f"could not read an action from the reply: {step.parse_error}" if step.parse_error else ""
            )
            summaries.append(StepSummary(action=step.action, reward=step.reward, error=error))
        return summaries

    def steps_as_dicts(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.steps]


class RecordingClient:
    """An async env client that notes every observation on a tape (and registers the tape
    under its episode id at reset, so the runner finds it when the episode ends)."""

    def __init__(
        self,
        client: Any,
        run_dir: Path,
        registry: dict[str, EpisodeTape],
        *,
        keep_screenshots: bool = False,
        describe: Callable[[Any], tuple[str, str]] | None = None,
    ):
        self.client = client
        self.tape = EpisodeTape(run_dir=run_dir, keep_screenshots=keep_screenshots, describe=describe)
        self._registry = registry

    async def reset(self, **kwargs: Any) -> Any:
        self.tape.episode_id = kwargs.get("episode_id")
        self.tape.task = kwargs.get("task")
        if self.tape.episode_id is not None:
            self._registry[self.tape.episode_id] = self.tape
        result = await self.client.reset(**kwargs)
        self.tape.observe(result)
        return result

    async def step(self, action: Any) -> Any:
        self.tape.note_action(action_text(action))
        started = time.perf_counter()
        result = await self.client.step(action)
        self.tape.observe(result, step_elapsed_s=time.perf_counter() - started)
        return result

    async def state(self) -> Any:
        return await self.client.state()

    async def close(self) -> None:
        await self.client.close()


@dataclass
class PromptSettings:
    """How `EvalModelStep` fills a `PromptContext`."""

    builder: PromptBuilder
    count_tokens: Callable[[str], int] = approximate_tokens
    text_token_budget: int = 1024
    history_steps: int = 4
    tool_names: tuple[str, ...] = ()
    #: The model's reply -> its action (`EnvHarness.tool_call_parser`).
    tool_call_parser: ToolCallParser | None = None
    #: Put the page's screenshot into the last user turn (vision policies).
    vision: bool = False
    screenshot_max_side: int | None = None

    def context(self, tape: EpisodeTape) -> PromptContext:
        """The context of the next step of a running episode."""
        history = tape.history()
        error = history[-1].error if history else tape.page.error
        return self.make(tape.page.goal, tape.page.url, tape.page.text, error, history, tape.task)

    def make(
        self,
        goal: str,
        url: str,
        text: str,
        error: str = "",
        history: list[StepSummary] | None = None,
        task: str | None = None,
    ) -> PromptContext:
        history = list(history or [])
        return PromptContext(
            goal=goal,
            url=url,
            text=text,
            last_action_error=error,
            history=history,
            step=len(history) + 1,
            task=task,
            tool_names=self.tool_names,
            count_tokens=self.count_tokens,
            text_token_budget=self.text_token_budget,
            history_steps=self.history_steps,
        )


class EvalModelStep:
    """The model step of one eval episode: a fresh prompt per step, batched with the other episodes."""

    def __init__(self, batcher: BatchingModelStep, tape: EpisodeTape, prompts: PromptSettings):
        self._batcher = batcher
        self._live = batcher.for_episode()  # batches wait for this episode until close()
        self.tape = tape
        self.prompts = prompts

    def close(self) -> None:
        self._live.close()

    async def __call__(
        self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]
    ) -> ModelStepResult:
        self.tape.note_refusal(messages)
        prompt = list(self.prompts.builder(self.prompts.context(self.tape)))
        recorded = prompt
        if self.prompts.vision:
            image = self.tape.page_image()
            if image is None:
                raise RuntimeError(
                    "a vision prompt needs the page's screenshot, and the environment sent none"
                )
            prompt = add_screenshot(prompt, image, max_side=self.prompts.screenshot_max_side)
            recorded = self.tape.prompt_for_record(prompt, image)
        params = SamplingParams.from_dict(sampling)
        if params.seed is None and params.temperature > 0:
            # Reproducible sampling, whatever batch the request lands in.
            params.seed = zlib.crc32(f"{self.tape.episode_id}/{len(self.tape.steps)}".encode())
        started = time.perf_counter()
        gen = await self._batcher.generate(GenerationRequest(messages=prompt, sampling=params))
        call = self.prompts.tool_call_parser(gen.text)
        call = call[0] if isinstance(call, list) else call
        self.tape.steps.append(
            StepRecord(
                index=len(self.tape.steps) + 1,
                prompt=recorded,
                completion=gen.text,
                action=_call_text(call.name, call.args),
                parse_error=call.metadata.get("parse_error"),
                screenshot=self.tape.page.screenshot,
                url=self.tape.page.url,
                prompt_tokens=len(gen.prompt_ids),
                completion_tokens=len(gen.completion_ids),
                model_s=time.perf_counter() - started,
            )
        )
        return ModelStepResult(
            response=LLMResponse(content=gen.text, tool_calls=[call]),
            prompt_ids=list(gen.prompt_ids),
            completion_ids=list(gen.completion_ids),
            logprobs=list(gen.logprobs),
            metadata={"finish_reason": gen.finish_reason, **gen.metadata},
        )


def describe_observation(observation: Any) -> tuple[str, str]:
    """(goal, page text) of any observation: the common field names, else its fields as JSON."""
    get = observation.get if isinstance(observation, dict) else (lambda k, d=None: getattr(observation, k, d))
    goal = get("goal", "") or ""
    text = get("text", "") or get("prompt", "") or ""
    if not text and hasattr(observation, "model_dump"):
        import json

        text = json.dumps(observation.model_dump(exclude={"reward", "done", "metadata"}), default=str)
    return goal, text


def action_text(action: Any) -> str:
    """An action as the step record shows it: its one field's value (`action_str`, `message`),
    else its fields as JSON."""
    if hasattr(action, "model_dump"):
        fields = action.model_dump(exclude={"metadata"}, exclude_defaults=True)
        if len(fields) == 1:
            return str(next(iter(fields.values())))
        import json

        return json.dumps(fields, default=str)
    return str(action)


def _call_text(name: str, args: dict[str, Any]) -> str:
    """A readable call for a step the env has not run yet (replaced by the env's action string)."""
    return f"{name}({', '.join(repr(v) for v in args.values())})"
