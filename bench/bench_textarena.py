"""How fast is TextArena behind the server? envharness over WebSocket vs textarena in-process.

Prints one table, measured in one run on this machine, for Wordle-v0:

- reset p50 and step p50 (a valid guess and its feedback): over the WebSocket on loopback to
  ``envharness serve textarena`` (a child process) with our async client, and textarena's own
  ``reset``/``step``/``get_observation`` called in this process;
- aggregate steps/s with 1, 8 and 64 concurrent sessions, each playing episodes (reset, then
  five guesses or until the game ends): envharness with one client per session on one server;
  in-process, the same number of games stepped in turn in one thread (textarena is pure Python,
  threads would not add speed); errors counted;
- memory per session: the server's PSS with 64 sessions open minus with 1, over 63; in-process,
  what ``ta.make("Wordle-v0")`` adds per game (each loads its own dictionaries), and what the
  server's shared prototypes add per session.

Usage: python bench/bench_textarena.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import os
import statistics
import time
from pathlib import Path

GUESSES = ["heart", "cover", "screw", "table", "night"]
ENV_ID = "Wordle-v0"


def pss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def p50_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f} ms" if values else "-"


# -- in-process ---------------------------------------------------------------------------------
def inprocess_game(proto: object) -> object:
    from envharness.envs.textarena import games

    memo: dict[int, object] = {}
    games._shared(games.unwrap(proto), memo)
    return copy.deepcopy(proto, memo)


def reset_game(game: object, seed: int) -> None:
    """textarena's reset, plus what OpenEnv's wrapper adds: its LLMObservationWrapper keeps every
    past episode's messages (`full_observations`), which would make each step slower."""
    env = game
    while env is not None:
        if hasattr(env, "full_observations"):
            env.full_observations = {}
        env = env.__dict__.get("env")
    game.reset(num_players=1, seed=seed)


def inprocess_latency(proto: object, episodes: int) -> tuple[list[float], list[float]]:
    game = inprocess_game(proto)
    resets, steps = [], []
    for seed in range(episodes):
        t = time.perf_counter()
        reset_game(game, seed)
        game.get_observation()
        resets.append(time.perf_counter() - t)
        for word in GUESSES:
            t = time.perf_counter()
            done, _ = game.step(f"[{word}]")
            game.get_observation()
            steps.append(time.perf_counter() - t)
            if done:
                break
    return resets, steps


def inprocess_throughput(proto: object, sessions: int, seconds: float) -> tuple[float, int]:
    games_ = [inprocess_game(proto) for _ in range(sessions)]
    moves = [0] * sessions
    seeds = list(range(sessions))
    for i, g in enumerate(games_):
        reset_game(g, i)
    count, errors = 0, 0
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        for i, g in enumerate(games_):
            try:
                done, _ = g.step(f"[{GUESSES[moves[i]]}]")
                g.get_observation()
                count += 1
                moves[i] += 1
                if done or moves[i] == len(GUESSES):
                    seeds[i] += sessions
                    reset_game(g, seeds[i])
                    moves[i] = 0
            except Exception:
                errors += 1
    return count / (time.perf_counter() - start), errors


def inprocess_make_memory(n: int) -> float:
    """MB one `ta.make` game adds (RSS of this process; each game loads its own dictionaries)."""
    import textarena as ta

    made = [ta.make(ENV_ID)]
    gc.collect()
    before = pss_mb(os.getpid())
    made += [ta.make(ENV_ID) for _ in range(n)]
    gc.collect()
    return (pss_mb(os.getpid()) - before) / n


# -- envharness ---------------------------------------------------------------------------------
async def server_latency(base_url: str, episodes: int) -> tuple[list[float], list[float]]:
    from envharness.envs.textarena.client import AsyncTextArenaEnv, TextArenaAction

    resets, steps = [], []
    async with AsyncTextArenaEnv(base_url) as env:
        await env.reset(seed=0)
        for seed in range(episodes):
            t = time.perf_counter()
            await env.reset(seed=seed)
            resets.append(time.perf_counter() - t)
            for word in GUESSES:
                t = time.perf_counter()
                result = await env.step(TextArenaAction(message=f"[{word}]"))
                steps.append(time.perf_counter() - t)
                if result.done:
                    break
    return resets, steps


async def server_throughput(
    base_url: str, sessions: int, seconds: float, pid: int
) -> tuple[float, int, float]:
    from envharness.envs.textarena.client import AsyncTextArenaEnv, TextArenaAction

    clients = [AsyncTextArenaEnv(base_url) for _ in range(sessions)]
    errors = 0
    for i, c in enumerate(clients):
        await c.reset(seed=i)
    memory = pss_mb(pid)
    counts = [0] * sessions
    end = time.perf_counter() + seconds

    async def play(i: int) -> None:
        nonlocal errors
        seed, move = i, 0
        while time.perf_counter() < end:
            try:
                result = await clients[i].step(TextArenaAction(message=f"[{GUESSES[move]}]"))
                counts[i] += 1
                move += 1
                if result.done or move == len(GUESSES):
                    seed += sessions
                    await clients[i].reset(seed=seed)
                    move = 0
            except Exception:
                errors += 1
                await clients[i].reset(seed=seed)
                move = 0

    start = time.perf_counter()
    await asyncio.gather(*(play(i) for i in range(sessions)))
    rate = sum(counts) / (time.perf_counter() - start)
    for c in clients:
        await c.close()
    return rate, errors, memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (2 s per point, 30 episodes)")
    args = parser.parse_args()
    seconds, episodes = (2.0, 30) if args.quick else (5.0, 100)
    levels = (1, 8, 64)

    from envharness.core.launchers import ServerProcess
    from envharness.envs.textarena import games

    games.textarena()
    proto = games.make_game(ENV_ID, {})
    in_reset, in_step = inprocess_latency(proto, episodes)
    in_rates = {n: inprocess_throughput(proto, n, seconds) for n in levels}
    make_mb = inprocess_make_memory(3)

    server = ServerProcess("textarena", server_args=["--max-sessions", "128"])
    try:
        pid = server.process.pid
        srv_reset, srv_step = asyncio.run(server_latency(server.base_url, episodes))
        srv = {n: asyncio.run(server_throughput(server.base_url, n, seconds, pid)) for n in levels}
    finally:
        server.stop()
    per_session = (srv[64][2] - srv[1][2]) / 63

    rows = [
        ("reset p50", p50_ms(srv_reset), p50_ms(in_reset)),
        ("step p50 (guess + feedback)", p50_ms(srv_step), p50_ms(in_step)),
        (
            "server adds per step (p50)",
            f"{(statistics.median(srv_step) - statistics.median(in_step)) * 1000:.2f} ms",
            "",
        ),
        *[
            (
                f"steps/s, {n} session{'s' if n > 1 else ''}",
                f"{srv[n][0]:.0f} ({srv[n][1]} errors)",
                f"{in_rates[n][0]:.0f} ({in_rates[n][1]} errors)",
            )
            for n in levels
        ],
        (
            "memory per session",
            f"{per_session:.2f} MB (shared word lists)",
            f"{make_mb:.0f} MB per ta.make game",
        ),
    ]
    header = ("Wordle-v0", "envharness (WebSocket, loopback)", "textarena in-process")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(3)]
    for k, row in enumerate([header, *rows]):
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
        if k == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print(
        f"\n{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; {seconds:.0f} s per throughput point"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
