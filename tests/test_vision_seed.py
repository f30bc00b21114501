"""The vision GRPO seed's helpers (``seeds/002_*``) against `envharness serve browsergym`.

The seed configures OpenEnv's BrowserGym server with ``BROWSERGYM_*`` variables, reads the
screenshot with ``np.array(observation.screenshot, dtype=np.uint8)``, lists clickable
elements from ``metadata["browsergym_obs"]["extra_element_properties"]``, builds its prompt
and steps with ``BrowserGymAction(action_str=...)``. The helpers below are the seed's own,
unchanged; a scripted policy that reads the prompt stands in for its vLLM call.
"""

from __future__ import annotations

import re
import sys
import textwrap

import numpy as np
import pytest
from _jobs import run_tree
from PIL import Image

from envharness.core.launchers import ServerProcess
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv
from envharness.envs.browsergym.openenv_config import OpenEnvConfigError, options_from_environ

# --- the seed's helpers, verbatim ---------------------------------------------------------------
FALLBACK_ACTION = "noop()"
ACTION_PREFIX_RE = re.compile(r"^(action|next action)\s*[:\-]\s*", re.IGNORECASE)
ACTION_PATTERN = re.compile(r"[A-Za-z_]+\s*\(.*\)", re.DOTALL)


def build_history_lines(history: list[str]) -> str:
    if not history:
        return "None"
    return "\n".join(history[-4:])


def extract_screenshot_image(observation) -> Image.Image | None:
    screenshot = getattr(observation, "screenshot", None)
    array = np.array(screenshot, dtype=np.uint8)
    return Image.fromarray(array)


def extract_clickable_elements(observation) -> list[dict[str, str]]:
    metadata = getattr(observation, "metadata", {}) or {}
    obs_dict = metadata.get("browsergym_obs", {}) or {}
    extra_props = obs_dict.get("extra_element_properties", {}) or {}
    clickables: list[dict[str, str]] = []
    for bid, props in extra_props.items():
        if not props.get("clickable"):
            continue
        bbox = props.get("bbox") or []
        bbox_str = ", ".join(str(item) for item in bbox) if bbox else "?"
        clickables.append({"bid": str(bid), "bbox": bbox_str})
    clickables.sort(key=lambda item: item["bid"])
    return clickables


def build_user_prompt(step: int, observation, history: list[str]) -> str:
    goal = observation.goal or "(not provided)"
    url = observation.url or "(unknown)"
    error_note = "Yes" if observation.last_action_error else "No"
    clickables = extract_clickable_elements(observation)
    if clickables:
        actions_hint = "\n".join(f" - {item['bid']} (bbox: {item['bbox']})" for item in clickables)
    else:
        actions_hint = " (none detected)"
    prompt = textwrap.dedent(
        f"""
        Step: {step}
        Goal: {goal}
        Current URL: {url}
        Previous steps:
        {build_history_lines(history)}
        Last action error: {error_note}

        Available clickable element IDs: {actions_hint}

        Reply with exactly one BrowserGym action string.
        """
    ).strip()
    return prompt


def parse_model_action(response_text: str) -> str:
    if not response_text:
        return FALLBACK_ACTION
    lines = response_text.splitlines()
    for raw_line in lines:
        line = raw_line.strip()
        if not line:
            continue
        line = ACTION_PREFIX_RE.sub("", line)
        match = ACTION_PATTERN.search(line)
        if match:
            action = match.group(0).strip()
            action = re.sub(r"\s+", " ", action)
            return action
    return FALLBACK_ACTION


# --- the test -------------------------------------------------------------------------------------
def scripted_policy(prompt: str, image: Image.Image) -> str:
    """Stands in for the VLM: clicks the first clickable element the prompt lists."""
    assert image.mode == "RGB" and image.size[0] > 0
    bids = re.findall(r" - (\S+) \(bbox:", prompt)
    return f"Action: click('{bids[0]}')" if bids else "noop()"


OPENENV_VARS = {
    "BROWSERGYM_BENCHMARK": "miniwob",
    "BROWSERGYM_TASK_NAME": "click-test",
    "BROWSERGYM_HEADLESS": "true",
    "BROWSERGYM_INCLUDE_SCREENSHOT": "true",
    "BROWSERGYM_VIEWPORT_WIDTH": "400",
    "BROWSERGYM_VIEWPORT_HEIGHT": "300",
}


def test_seed_helpers_earn_the_scripted_reward_with_screenshots(monkeypatch):
    for name, value in OPENENV_VARS.items():
        monkeypatch.setenv(name, value)  # the served process inherits them, as a container would
    server = ServerProcess("browsergym")
    try:
        with BrowserGymEnv(base_url=server.base_url) as env:  # as the seed's alternative to from_hub
            result = env.reset()  # task, screenshots and viewport all come from the variables
            observation = result.observation
            history: list[str] = []
            rewards: list[float] = []
            for step in range(1, 4):
                array = np.array(observation.screenshot, dtype=np.uint8)
                assert array.shape == (450, 600, 3)  # the 400x300 viewport at MiniWoB's 1.5 scale
                assert array.std() > 0  # a page, not a blank frame
                assert observation.screenshot_bytes.startswith(b"\x89PNG")  # the encoded image, as sent
                image = extract_screenshot_image(observation)
                prompt = build_user_prompt(step, observation, history)
                assert "Goal: Click the button." in prompt and "(bbox: " in prompt
                action = parse_model_action(scripted_policy(prompt, image))
                result = env.step(BrowserGymAction(action_str=action))
                rewards.append(float(result.reward or 0.0))
                observation = result.observation
                history.append(f"Step {step}: {action} -> reward {rewards[-1]:+.2f}")
                if result.done:
                    break
            assert rewards == [1.0] and result.done, history
            assert env.state().task_name == "click-test"
    finally:
        server.stop()


def test_openenv_variables_map_onto_options():
    assert options_from_environ({}) == {}
    assert options_from_environ({**OPENENV_VARS, "BROWSERGYM_TIMEOUT": "10000"}) == {
        "benchmark": "miniwob",
        "task": "click-test",
        "headless": True,
        "screenshot": True,
        "viewport": {"width": 400, "height": 300},
        "page_timeout_ms": 10000,
    }
    # only one side given: the other is OpenEnv's default (1280x720)
    assert options_from_environ({"BROWSERGYM_VIEWPORT_HEIGHT": "500"})["viewport"] == {
        "width": 1280,
        "height": 500,
    }
    assert options_from_environ({"BROWSERGYM_INCLUDE_SCREENSHOT": "false", "BROWSERGYM_TASK_NAME": ""}) == {
        "screenshot": False
    }


@pytest.mark.parametrize(
    "name, value, reason",
    [
        ("BROWSERGYM_BENCHMARK", "webshop", "choose one of miniwob, openended, webarena"),
        ("BROWSERGYM_HEADLESS", "maybe", "expected true or false"),
        ("BROWSERGYM_VIEWPORT_WIDTH", "wide", "expected a number"),
        ("BROWSERGYM_TIMEOUT", "-5", "must be positive"),
    ],
)
def test_bad_openenv_variables_are_refused_clearly(name, value, reason):
    with pytest.raises(OpenEnvConfigError, match=reason):
        options_from_environ({name: value})


def test_serve_refuses_a_benchmark_it_cannot_run_in_one_line(monkeypatch):
    """webarena's package is an optional extra, not installed here: one line says which."""
    monkeypatch.setenv("BROWSERGYM_BENCHMARK", "webarena")
    done = run_tree(
        [
            sys.executable,
            "-c",
            "import sys; from envharness.cli import main; sys.exit(main())",
            "serve",
            "browsergym",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        "BrowserGym benchmark 'webarena' needs the browsergym-webarena package: pip install 'envharness[webarena]'"
        in done.stderr
    )


def test_explicit_options_win_over_variables():
    from envharness.envs.browsergym.factory import make_environment_factory

    factory = make_environment_factory(
        environ={"BROWSERGYM_TASK_NAME": "click-button", "BROWSERGYM_HEADLESS": "false"}, task="click-test"
    )
    assert factory.config.task == "click-test" and factory.engine.headless is False


def test_from_local_takes_the_seeds_env_vars():
    """`from_hub(repo_id, env_vars={...})` in the seed needs Docker; `from_local` takes the same
    variables for `envharness serve` started here."""
    with BrowserGymEnv.from_local(
        env_vars={"BROWSERGYM_TASK_NAME": "click-button", "BROWSERGYM_INCLUDE_SCREENSHOT": "true"}
    ) as env:
        observation = env.reset(seed=1).observation
        assert env.state().task_name == "click-button"
        assert np.array(observation.screenshot, dtype=np.uint8).shape == (321, 498, 3)
