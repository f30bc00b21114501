"""Environments over the Model Context Protocol, on the official `mcp` SDK.

`toolset` says which tools an environment offers and runs them on one environment
session; `server` builds the SDK's low-level `Server` (one environment session per MCP
session); `mount` puts it at `/mcp` on the FastAPI app (streamable HTTP, plus OpenEnv's
JSON-RPC dialect for its `MCPToolClient`); `stdio` serves it to desktop clients.
"""
