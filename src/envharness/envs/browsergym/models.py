"""Wire models of the browser environment, with the field names of OpenEnv's BrowserGym env.

The seeds' prompt builders read `goal`, `url`, `text`, `last_action_error` and
``metadata["browsergym_obs"]["extra_element_properties"]``; all keep their OpenEnv
names. Two deliberate changes: on the wire `screenshot` is a base64 PNG/JPEG string (never
nested lists; the clients decode it into an array, `BrowserGymImageObservation`), and
`last_action_error` holds the reason in words ("" when the action succeeded) -- still
falsy/truthy as OpenEnv's boolean was. Either way `screenshot_bytes` is the encoded image
and `screenshot_image()` a PIL image (what vision prompts put in the chat).
"""

from __future__ import annotations

import base64
import io
from typing import Any

from pydantic import Field, PrivateAttr, field_serializer

from envharness.core.types import Action, Observation, State


class BrowserGymAction(Action):
    """One BrowserGym action string, e.g. ``click('13')`` or ``fill('7', "hello")``.

    Several calls on separate lines run in order. See `envharness.envs.browsergym.actions`.
    """

    action_str: str = Field(..., description="BrowserGym high-level action, e.g. \"click('13')\"")


class BrowserGymObservation(Observation):
    """What the agent sees after reset and each step."""

    text: str = Field(default="", description="Text of the page for prompts: the accessibility tree")
    url: str = Field(default="", description="URL of the active page")
    screenshot: str | None = Field(
        default=None, description="Base64 PNG/JPEG of the viewport, when requested"
    )
    screenshot_format: str | None = Field(
        default=None, description="'png' or 'jpeg' when a screenshot is present"
    )
    goal: str = Field(default="", description="The task's instruction")
    axtree_txt: str = Field(default="", description="Accessibility tree as text, elements marked [bid]")
    pruned_html: str = Field(default="", description="Pruned HTML with bid attributes")
    error: str = Field(default="", description="Why the last action failed ('' if it did not)")
    last_action: str = Field(default="", description="The action string of the last step")
    last_action_error: str = Field(
        default="", description="Why the last action failed, in words ('' if none)"
    )
    focused_element_bid: str = Field(default="", description="bid of the focused element ('' if none)")
    open_pages_urls: list[str] = Field(default_factory=list, description="URLs of the open tabs")
    active_page_index: int = Field(default=0, description="Index of the active tab in open_pages_urls")
    elapsed_time: float = Field(default=0.0, description="Seconds since the episode started")
    truncated: bool = Field(default=False, description="The episode ended by a step or time limit")

    @property
    def screenshot_bytes(self) -> bytes | None:
        """The encoded screenshot (PNG or JPEG, see `screenshot_format`), or None."""
        return None if self.screenshot is None else base64.b64decode(self.screenshot)

    def screenshot_image(self) -> Any:
        """The screenshot as an RGB `PIL.Image.Image`, or None."""
        data = self.screenshot_bytes
        if data is None:
            return None
        from PIL import Image

        return Image.open(io.BytesIO(data)).convert("RGB")

    def screenshot_array(self) -> Any:
        """The screenshot as a ``(height, width, 3)`` uint8 numpy array, or None."""
        image = self.screenshot_image()
        if image is None:
            return None
        import numpy as np

        return np.asarray(image)


class BrowserGymImageObservation(BrowserGymObservation):
    """A client-side observation whose `screenshot` is decoded: a ``(height, width, 3)`` uint8
    numpy array, as code written for OpenEnv's screenshots expects
    (``np.array(observation.screenshot, dtype=np.uint8)``); the encoded PNG/JPEG stays
    reachable as `screenshot_bytes` (no re-encoding to store or send it). What the browser
    clients return unless made with ``screenshot_array=False``. Dumped (`model_dump`, JSON or
    not: records, tool results), `screenshot` is the base64 string again, never nested lists."""

    screenshot: Any = Field(default=None, description="The viewport as a (height, width, 3) uint8 array")
    _encoded: bytes | None = PrivateAttr(default=None)

    @classmethod
    def from_encoded(cls, observation: BrowserGymObservation) -> BrowserGymImageObservation:
        """Decode `observation`'s base64 screenshot once, keeping its bytes."""
        fields = {name: getattr(observation, name) for name in type(observation).model_fields}
        encoded = observation.screenshot_bytes
        array = None
        if encoded is not None:
            import numpy as np
            from PIL import Image

            array = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB"))
        decoded = cls(**{**fields, "screenshot": array})
        decoded._encoded = encoded
        return decoded

    @property
    def screenshot_bytes(self) -> bytes | None:
        return None if self.screenshot is None else self._encoded  # a screenshot set to None is gone

    def screenshot_image(self) -> Any:
        if self.screenshot is None:
            return None
        from PIL import Image

        return Image.fromarray(self.screenshot)

    def screenshot_array(self) -> Any:
        return self.screenshot

    @field_serializer("screenshot")
    def _screenshot_as_base64(self, value: Any) -> str | None:
        encoded = self.screenshot_bytes
        return None if encoded is None else base64.b64encode(encoded).decode("ascii")


#: The largest seed a BrowserGym episode takes: its tasks draw each episode with numpy's
#: `RandomState(seed)`, which holds 32 bits (the wire's own limit, 2**63 - 1, is wider).
MAX_SEED = 2**32 - 1


class BrowserGymState(State):
    """Episode bookkeeping (OpenEnv's fields plus seed and timing)."""

    benchmark: str = "miniwob"
    task_name: str = Field(default="", description="MiniWoB task of the episode, e.g. 'click-test'")
    seed: int | None = None
    goal: str = ""
    current_url: str = ""
    max_steps: int | None = None
    cum_reward: float = 0.0
    elapsed: float = Field(default=0.0, description="Seconds since reset")
    done: bool = False
