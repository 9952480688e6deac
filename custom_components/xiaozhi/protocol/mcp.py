"""A JSON-RPC 2.0 client for the device's MCP server.

The device answers a request only when it is well formed, may answer out of
order, and may not answer at all: every request has a timeout, replies are
matched by integer id, and a lost link fails every pending request at once.
"""

import asyncio
from collections.abc import Awaitable, Callable
import itertools
import logging
from typing import Any

from .errors import ConnectionClosedError, McpError, RequestTimeoutError

_LOGGER = logging.getLogger(__name__)

type SendPayload = Callable[[dict[str, Any]], Awaitable[None]]
type NotificationHandler = Callable[[str, dict[str, Any]], None]

METHOD_NOT_FOUND = -32601


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
            raise ConnectionClosedError(str(self._closed))
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
