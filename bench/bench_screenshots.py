"""What screenshots cost through `envharness serve browsergym`, side by side in one run.

Prints one table (medians; the machine is shared and noisy):

- a step (``noop()`` + observation) over the WebSocket with screenshots off, PNG and JPEG,
  and with the client decoding them into arrays (the default) or not;
- the screenshot's size on the wire: our base64 PNG/JPEG vs OpenEnv's nested JSON lists of
  the same pixels, and the client's cost to get an array from each (base64 + PNG decode vs
  ``json.loads`` + ``np.array``);
- encoding one screenshot as an OpenAI ``image_url`` data URL (what the remote backends send).

Usage: PLAYWRIGHT_BROWSERS_PATH=.venv/ms-playwright python bench/bench_screenshots.py [--steps N]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

from envharness.core.launchers import ServerProcess
from envharness.envs.browsergym import BrowserGymAction, BrowserGymEnv
from envharness.models.images import image_data_url


def median_ms(fn: Callable[[], Any], n: int) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    server = ServerProcess("browsergym", options={"pruned_html": False})
    rows: list[tuple[str, str]] = []
    try:
        settings = [
            ("off", False, "png", True),
            ("png, array", True, "png", True),
            ("png, base64 kept", True, "png", False),
            ("jpeg, array", True, "jpeg", True),
        ]
        clients = {
            name: BrowserGymEnv(server.base_url, screenshot_array=decode) for name, _, _, decode in settings
        }
        try:
            for name, shot, fmt, _ in settings:
                clients[name].reset(task="click-test", seed=0, screenshot=shot, screenshot_format=fmt)
            step_ms: dict[str, list[float]] = {name: [] for name, *_ in settings}
            for _ in range(args.steps):  # interleaved, so load changes hit every setting alike
                for name, *_ in settings:
                    start = time.perf_counter()
                    clients[name].step(BrowserGymAction(action_str="noop()"))
                    step_ms[name].append((time.perf_counter() - start) * 1000)
            for name, *_ in settings:
                rows.append((f"step noop(), screenshot {name}", f"{statistics.median(step_ms[name]):.1f} ms"))
            png = clients["png, base64 kept"].step(BrowserGymAction(action_str="noop()")).observation
            jpeg = clients["jpeg, array"].step(BrowserGymAction(action_str="noop()")).observation
        finally:
            for client in clients.values():
                client.close()
    finally:
        server.stop()

    array = png.screenshot_array()
    nested = json.dumps(array.tolist())  # what OpenEnv's server sends for the same pixels
    n = 20
    rows += [
        (
            f"screenshot {array.shape[1]}x{array.shape[0]} on the wire: base64 PNG",
            f"{len(png.screenshot) / 1024:.1f} KiB",
        ),
        ("  base64 JPEG", f"{len(base64.b64encode(jpeg.screenshot_bytes)) / 1024:.1f} KiB"),
        ("  OpenEnv nested JSON lists", f"{len(nested) / 1024:.1f} KiB"),
        ("to an array: base64 PNG -> np.array", f"{median_ms(png.screenshot_array, n):.2f} ms"),
        (
            "  OpenEnv nested lists: json.loads -> np.array",
            f"{median_ms(lambda: np.array(json.loads(nested), dtype=np.uint8), n):.2f} ms",
        ),
        (
            "image_url data URL of the screenshot (PNG)",
            f"{median_ms(lambda: image_data_url(Image.fromarray(array)), n):.2f} ms",
        ),
        ("  (JPEG)", f"{median_ms(lambda: image_data_url(Image.fromarray(array), 'JPEG'), n):.2f} ms"),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'what':{width}s}  median")
    for what, value in rows:
        print(f"{what:{width}s}  {value}")


if __name__ == "__main__":
    main()
