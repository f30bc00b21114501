"""The soak's cycles (`bench/bench_soak.py`), short: each server in a child process takes open/act/
close cycles with every hostile input kind mixed in, and ends with no unexpected error, a clear
refusal for every hostile input, the server still serving, no session left open and no more fds
or processes than after warm-up. No timings are asserted.

BrowserGym's own engine (`gym-engine`: a worker process and two browsers per session, seconds a
cycle) is soaked by the benchmark only."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_soak  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("surface", "cycles", "every"),
    [
        ("echo", 30, 2),
        ("textarena", 30, 2),
        ("warm-pool", 24, 2),  # the browser server as it runs by default: warm contexts taken and refilled
        ("policy", 30, 3),
    ],
)
def test_cycles_with_hostile_input_leave_the_server_serving_and_flat(
    surface: str, cycles: int, every: int
) -> None:
    soaked = bench_soak.SURFACES[surface]()
    tally = asyncio.run(bench_soak.soak(soaked, cycles, warmup=cycles // 3, every=every))

    assert tally.errors == []
    assert tally.cycles == cycles
    assert tally.hostile_sent == tally.hostile_clear == cycles // every, tally.replies
    assert {kind for kind, _ in tally.replies} == set(
        soaked.kinds
    )  # every kind was sent, each got a clear error
    assert tally.end is not None and tally.warm is not None  # the server was alive and quiet at the end
    assert tally.sessions_left in (0, None)
    assert tally.end.fds - tally.warm.fds <= 2, (tally.warm, tally.end)
    assert tally.end.children <= tally.warm.children, (tally.warm, tally.end)
    if surface == "warm-pool":
        assert any(took for took, _ in soaked.first_resets)
