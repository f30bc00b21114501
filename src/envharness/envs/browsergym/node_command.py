"""`envharness browser`: a browser node, a Chromium that environment servers elsewhere connect to.
The browser registers this command with its `EnvSpec` (`commands`); `cli/` lists it.

    envharness browser --port 9222 --host 0.0.0.0          # on the browser host
    envharness serve browsergym --option browser=cdp://BROWSER_HOST:9222   # on the GPU node

Prints the CDP address once Chromium listens, then runs until stopped (Ctrl-C, SIGTERM, or the
process given to --exit-with-parent ending).
"""

from __future__ import annotations

import argparse
import signal
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        default=9222,
        help="CDP port (0: a free one; the address is printed; default %(default)s)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1; 0.0.0.0 lets other machines connect: "
        "CDP has no authentication, keep it inside a private network)",
    )
    parser.add_argument(
        "--allowed-hosts",
        default="",
        metavar="H1,H2",
        help="hosts the pages may reach besides loopback (the server's allowed_hosts)",
    )
    parser.add_argument(
        "--exit-with-parent", type=int, default=None, metavar="PID", help="stop when process PID exits"
    )


def run(args: argparse.Namespace) -> int:
    import asyncio

    from envharness.envs.browsergym.browser_node import serve_browser_node

    def ready(address: str) -> None:
        print(
            f"envharness browser: listening on {address} (serve browsergym --option browser={address})",
            flush=True,
        )

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if args.exit_with_parent is not None:
            from envharness.core.lifecycle import exit_with_parent

            exit_with_parent(
                args.exit_with_parent, lambda: loop.call_soon_threadsafe(stop.set), name="envharness browser"
            )
        return await serve_browser_node(
            args.port,
            args.host,
            ready=ready,
            stop=stop,
            allowed_hosts=[h for h in args.allowed_hosts.split(",") if h],
        )

    try:
        code = asyncio.run(main())
    except RuntimeError as exc:  # no Chromium, or it did not open its port
        print(f"envharness browser: {exc}", file=sys.stderr)
        return 2
    print("envharness browser: stopped" if code == 0 else "envharness browser: Chromium exited", flush=True)
    return code
