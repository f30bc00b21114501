"""OpenEnv's HTTP MCP dialect, so `openenv`'s `MCPToolClient` can use our tools.

OpenEnv 0.10.0's client does not speak MCP's streamable HTTP: it POSTs bare JSON-RPC to
`/mcp` (no `initialize`, no `Mcp-Session-Id`), with `openenv/session/create`,
`tools/list` and `tools/call` carrying `params.session_id`, and `openenv/session/close`,
and reads plain JSON back. This module answers that dialect with the same toolset and
`run_tool` as the SDK server; a call without a session runs on a fresh environment that
is closed afterwards (OpenEnv's stateless HTTP semantics).
"""

from __future__ import annotations

import uuid
from typing import Any

from envharness.core import wire_json
from envharness.core.protocol import ProtocolError
from envharness.core.sessions import SessionManager
from envharness.mcp.handle import EnvSessionHandle
from envharness.mcp.server import ToolsetProvider, shown_tools
from envharness.mcp.toolset import run_tool

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, SERVER_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32000,
)


class OpenEnvDialect:
    """Sessions by id (`openenv/session/create`), each an `EnvSessionHandle`."""

    def __init__(self, manager: SessionManager, provider: ToolsetProvider) -> None:
        self.manager = manager
        self.provider = provider
        self.handles: dict[str, EnvSessionHandle] = {}

    async def answer(self, body: bytes) -> dict[str, Any]:
        """The JSON-RPC response to one request body."""
        try:
            request = wire_json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:  # malformed, or beyond the declared limits
            return parse_error(exc)
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return _error(None, INVALID_REQUEST, "Invalid request: expected a JSON-RPC object with a method")
        rid, method, params = request.get("id"), request["method"], request.get("params") or {}
        if not isinstance(params, dict):
            return _error(rid, INVALID_PARAMS, "Params must be an object")
        try:
            return {"jsonrpc": "2.0", "id": rid, "result": await self._dispatch(method, params)}
        except _RpcError as exc:
            return _error(rid, exc.code, exc.message)
        except ProtocolError as exc:
            return _error(rid, SERVER_ERROR, f"{exc.code.value}: {exc.message}")

    async def _dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "openenv/session/create":
            for key in [k for k, h in self.handles.items() if h.session is not None and h.session.closed]:
                del self.handles[key]  # its environment expired (idle timeout): forget the id
            if len(self.handles) >= self.manager.capacity:
                raise _RpcError(SERVER_ERROR, f"Server at capacity: {self.manager.capacity} MCP session(s)")
            session_id = uuid.uuid4().hex
            self.handles[session_id] = EnvSessionHandle(self.manager, self.provider.fixed)
            return {"session_id": session_id}
        if method == "openenv/session/close":
            handle = self.handles.pop(self._session_id(params), None)
            if handle is None:
                raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {params.get('session_id')}")
            await handle.close()
            return {"session_id": params["session_id"], "closed": True}
        if method not in ("tools/list", "tools/call"):
            raise _RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        toolset = await self.provider.get()
        if method == "tools/list":
            return {
                "tools": [
                    t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in shown_tools(toolset.tools(), self.provider.fixed)
                ]
            }
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise _RpcError(INVALID_PARAMS, "Missing 'name' in params")
        if params.get("session_id") is not None:
            handle, temporary = self.handles.get(self._session_id(params)), False
            if handle is None:
                raise _RpcError(INVALID_PARAMS, f"Unknown session_id: {params['session_id']}")
        else:
            handle, temporary = EnvSessionHandle(self.manager, self.provider.fixed), True
        try:
            result = await run_tool(toolset, handle, name, params.get("arguments") or {})
        finally:
            if temporary:
                await handle.close()
        payload = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        payload["data"] = result.structuredContent  # what MCPToolClient.call_tool returns (FastMCP's `.data`)
        return payload

    @staticmethod
    def _session_id(params: dict[str, Any]) -> str:
        session_id = params.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise _RpcError(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        return session_id

    async def close(self) -> None:
        for handle in list(self.handles.values()):
            await handle.close()
        self.handles.clear()


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def parse_error(exc: Exception) -> dict[str, Any]:
    return _error(None, PARSE_ERROR, f"Parse error: {exc}")


def is_openenv_request(body: bytes) -> bool:
    """A POST without `Mcp-Session-Id` that is not MCP's `initialize` is OpenEnv's dialect
    (a streamable-HTTP client sends nothing else before it has a session)."""
    try:
        request = wire_json.loads(body)
    except (ValueError, UnicodeDecodeError):  # malformed, or beyond the limits: not the dialect's
        return False
    return isinstance(request, dict) and request.get("method") != "initialize" and "method" in request
