"""`envharness browser`: a browser node, a Chromium that environment servers elsewhere connect to.

    envharness browser --port 9222 --host 0.0.0.0          # on the browser host
    envharness serve browsergym --option browser=cdp://BROWSER_HOST:9222   # on the GPU node

Prints the CDP address once Chromium listens, then runs until stopped (Ctrl-C, SIGTERM, or the
process given to --exit-with-parent ending).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=9222, help="CDP port (0: a free one; the address is printed; default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to listen on (default 127.0.0.1; 0.0.0.0 lets other machines connect: "
                             "CDP has no authentication, keep it inside a private network)")
    parser.add_argument("--allowed-hosts", default="", metavar="H1,H2",
                        help="hosts the pages may reach besides loopback (the server's allowed_hosts)")
    parser.add_argument("--exit-with-parent", type=int, default=None, metavar="PID", help="stop when process PID exits")


def run(args: argparse.Namespace) -> int:
    from envharness.envs.browsergym.browser_node import start_browser_node

    try:
        node = start_browser_node(args.port, args.host, allowed_hosts=[h for h in args.allowed_hosts.split(",") if h])
    except RuntimeError as exc:
        print(f"envharness browser: {exc}", file=sys.stderr)
        return 2
    print(f"envharness browser: listening on {node.address} "
          f"(serve browsergym --option browser={node.address})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_with_parent is not None:
        from envharness.core.lifecycle import exit_with_parent

        exit_with_parent(args.exit_with_parent, stop.set, name="envharness browser")
    while not stop.wait(0.5):
        if node.process.poll() is not None:
            print(f"envharness browser: Chromium exited ({node.process.returncode})", file=sys.stderr)
            node.stop()
            return 1
    node.stop()
    print("envharness browser: stopped", flush=True)
    return 0
