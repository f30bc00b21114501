"""An environment's MCP tools over stdio, for desktop MCP clients (`envharness mcp NAME`).

The environment runs in this process: one MCP session, one environment session, closed
with the process. stdout carries the protocol only; logs go to stderr.
"""

from __future__ import annotations

from envharness.core.sessions import EnvFactory, SessionManager


async def serve_stdio(factory: EnvFactory, name: str) -> None:
    """Serve `factory`'s environment on stdin/stdout until the client hangs up."""
    from mcp.server.stdio import stdio_server

    from envharness.mcp.server import build_server

    manager = SessionManager(factory, max_sessions=1, idle_timeout_s=None)
    manager.start()
    try:
        server = build_server(manager, name)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await manager.shutdown()
