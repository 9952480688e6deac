"""The MCP client of a device's MCP server, over JSON-RPC 2.0.

The device answers a request only when it is well formed, may answer out of
order, and may not answer at all: every request has a timeout, replies are
matched by integer id, and a lost link fails every pending request at once.
On top of the requests sit the three MCP calls the device serves:
``initialize``, paged ``tools/list`` and ``tools/call``.
"""

import asyncio
from collections.abc import Awaitable, Callable
import itertools
import logging
from typing import Any, Final

from .errors import (
    ConnectionClosedError,
    McpError,
    ProtocolError,
    RequestTimeoutError,
    XiaozhiError,
)
from .tools import Tool, ToolResult

_LOGGER = logging.getLogger(__name__)

type SendPayload = Callable[[dict[str, Any]], Awaitable[None]]
type NotificationHandler = Callable[[str, dict[str, Any]], None]

METHOD_NOT_FOUND = -32601
MCP_PROTOCOL_VERSION: Final = "2024-11-05"
CLIENT_INFO: Final = {"name": "home-assistant-xiaozhi", "version": "1"}
MAX_TOOL_PAGES: Final = 64


class McpClient:
    """Send requests to the device and route what comes back."""

    def __init__(
        self,
        send: SendPayload,
        on_notification: NotificationHandler | None = None,
    ) -> None:
        """Use ``send`` to deliver payloads; notifications go to the handler."""
        self._send = send
        self._on_notification = on_notification
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._closed: BaseException | None = None
        self._loop = asyncio.get_running_loop()

    @property
    def pending_count(self) -> int:
        """Return how many requests wait for an answer."""
        return len(self._pending)

    async def request(
        self, method: str, params: dict[str, Any] | None, timeout: float
    ) -> Any:
        """Send a request and return its ``result``.

        Raises McpError for an error reply, RequestTimeoutError when nothing
        comes back in time and ConnectionClosedError when the link goes away.
        """
        if self._closed is not None:
            err = ConnectionClosedError(str(self._closed))
            err.subject = method
            raise err
        request_id = next(self._ids)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[request_id] = future
        payload: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            payload["params"] = params
        try:
            async with asyncio.timeout(timeout):
                await self._send(payload)
                return await future
        except TimeoutError:
            raise RequestTimeoutError(method, timeout) from None
        except XiaozhiError as err:
            err.subject = method
            raise
        finally:
            del self._pending[request_id]

    def handle_payload(self, payload: Any) -> dict[str, Any] | None:
        """Route one payload from the device.

        Returns an answer payload to send back when the device made a request
        of its own (which this client does not serve), otherwise None.
        """
        if not isinstance(payload, dict):
            _LOGGER.debug("Ignoring MCP payload that is not an object")
            return None
        request_id = payload.get("id")
        method = payload.get("method")
        if isinstance(method, str):
            if request_id is None:
                params = payload.get("params")
                if self._on_notification is not None:
                    self._on_notification(
                        method, params if isinstance(params, dict) else {}
                    )
                return None
            return {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": {"code": METHOD_NOT_FOUND, "message": "Method not found"},
            }
        if "result" in payload:
            self._resolve(request_id, payload["result"], None)
        elif "error" in payload:
            error = payload["error"]
            if isinstance(error, dict):
                message = error.get("message")
                code = error.get("code")
                exc = McpError(
                    message if isinstance(message, str) else str(error),
                    code if type(code) is int else None,
                )
            else:
                exc = McpError(str(error))
            self._resolve(request_id, None, exc)
        else:
            _LOGGER.debug("Ignoring MCP payload with neither result nor error")
        return None

    def fail_request(self, request_id: int, message: str) -> None:
        """Fail one request with an error the device could not encode."""
        self._resolve(request_id, None, McpError(message))

    def _resolve(self, request_id: Any, result: Any, exc: McpError | None) -> None:
        if type(request_id) is not int:
            _LOGGER.debug("Ignoring MCP reply with id %r", request_id)
            return
        future = self._pending.get(request_id)
        if future is None or future.done():
            _LOGGER.debug("Ignoring MCP reply to unknown or answered id %s", request_id)
            return
        if exc is None:
            future.set_result(result)
        else:
            future.set_exception(exc)

    def close(self, reason: str) -> None:
        """Fail every pending request now and refuse new ones."""
        if self._closed is None:
            self._closed = ConnectionClosedError(reason)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosedError(reason))

    # --- MCP ----------------------------------------------------------------

    async def initialize(
        self, vision_url: str, vision_token: str, timeout: float
    ) -> dict[str, Any]:
        """Run ``initialize``; return the device's ``serverInfo`` (maybe empty).

        ``capabilities.vision`` is always sent: some device implementations
        fail silently without it.
        """
        result = await self.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {"vision": {"url": vision_url, "token": vision_token}},
                "clientInfo": CLIENT_INFO,
            },
            timeout,
        )
        info = result.get("serverInfo") if isinstance(result, dict) else None
        return info if isinstance(info, dict) else {}

    async def list_tools(self, timeout: float) -> dict[str, Tool]:
        """Fetch every page of ``tools/list``, user-only tools included.

        ``nextCursor`` is the name of the next tool and is absent on the last
        page; a repeated cursor or too many pages end the listing.
        """
        tools: dict[str, Tool] = {}
        cursor = ""
        seen: set[str] = set()
        for _ in range(MAX_TOOL_PAGES):
            result = await self.request(
                "tools/list", {"cursor": cursor, "withUserTools": True}, timeout
            )
            if not isinstance(result, dict):
                raise ProtocolError("tools/list result is not an object")
            page = result.get("tools")
            for item in page if isinstance(page, list) else ():
                tool = Tool.from_json(item)
                if tool is None:
                    _LOGGER.debug("Skipping malformed tool %.200r", item)
                else:
                    tools[tool.name] = tool
            next_cursor = result.get("nextCursor")
            if not isinstance(next_cursor, str) or not next_cursor:
                break
            if next_cursor in seen:
                _LOGGER.warning("Device repeated tools/list cursor %r", next_cursor)
                break
            seen.add(next_cursor)
            cursor = next_cursor
        else:
            _LOGGER.warning("Device tools/list exceeded %d pages", MAX_TOOL_PAGES)
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout: float
    ) -> ToolResult:
        """Call a tool; a JSON-RPC error comes back as an error result."""
        try:
            result = await self.request(
                "tools/call", {"name": name, "arguments": arguments}, timeout
            )
        except McpError as err:
            return ToolResult.from_error(err.message, err.code)
        except XiaozhiError as err:
            err.subject = name
            raise
        return ToolResult.from_result(result)
