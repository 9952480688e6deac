"""The device's MCP server, answering the way the firmware's mcp_server.cc does.

Rules reproduced here:

* a request is answered only when ``jsonrpc`` is ``"2.0"``, ``method`` is a
  string, ``params`` (when present) is an object and ``id`` is a number;
  anything else gets no reply at all;
* methods starting with ``notifications`` are ignored;
* replies and errors are assembled by string concatenation; an error message
  is inserted unescaped, so an error frame can be invalid JSON; errors carry
  no ``code``;
* ``tools/list`` pages are cut at about ``page_size_bytes``; ``nextCursor`` is
  the name of the first tool of the next page and is absent on the last page;
* ``tools/call`` validates arguments at once, then runs the tool on its own
  task, so replies may come out of order.

In "other implementation" mode errors are proper JSON with a ``code``
(-32601 for unknown methods and tools, -32603 otherwise) and tool failures are
results with ``isError: true``.
"""

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextvars import ContextVar
import logging
from typing import TYPE_CHECKING, Any

from .tools import (
    ArgumentError,
    ToolError,
    ToolSpec,
    dumps,
    error_result_object,
    result_object,
    to_int32,
)

if TYPE_CHECKING:
    from .device import SimulatedDevice

_LOGGER = logging.getLogger(__package__)

CODE_METHOD_NOT_FOUND = -32601
CODE_INTERNAL_ERROR = -32603
PROTOCOL_VERSION = "2024-11-05"

type AfterReply = Callable[[], Coroutine[Any, Any, None]]

_after_reply: ContextVar[list[AfterReply] | None] = ContextVar(
    "simulator_after_reply", default=None
)


def defer_after_reply(action: AfterReply) -> bool:
    """Queue ``action`` to run once the current tool call has been answered.

    Returns False when no tool call is running in this context.
    """
    pending = _after_reply.get()
    if pending is None:
        return False
    pending.append(action)
    return True


class McpServer:
    """Answers MCP requests for one simulated device."""

    def __init__(self, device: SimulatedDevice) -> None:
        """Serve the tools of ``device``."""
        self._device = device

    @property
    def tools(self) -> list[ToolSpec]:
        """Return the registered tools, in order."""
        return self._device.tools

    def find_tool(self, name: str) -> ToolSpec | None:
        """Return the tool called ``name``, if registered."""
        return next((tool for tool in self.tools if tool.name == name), None)

    async def handle(self, payload: object) -> None:
        """Handle one JSON-RPC payload from the server."""
        device = self._device
        if not isinstance(payload, Mapping):
            _LOGGER.debug("%s: MCP payload is not an object", device.name)
            return
        if payload.get("jsonrpc") != "2.0":
            _LOGGER.debug("%s: invalid JSON-RPC version, ignored", device.name)
            return
        method = payload.get("method")
        if not isinstance(method, str):
            _LOGGER.debug("%s: MCP message without method, ignored", device.name)
            return
        if method.startswith("notifications"):
            return
        params = payload.get("params")
        if "params" in payload and not isinstance(params, Mapping):
            _LOGGER.debug("%s: invalid params for %s, ignored", device.name, method)
            return
        raw_id = payload.get("id")
        if not isinstance(raw_id, int | float) or isinstance(raw_id, bool):
            _LOGGER.debug("%s: invalid id for %s, ignored", device.name, method)
            return
        device.mcp_requests.append(dict(payload))
        faults = device.faults
        if faults.silent or method in faults.silent_methods:
            _LOGGER.debug("%s: staying silent on %s", device.name, method)
            return
        request_id = to_int32(raw_id)

        if method == "initialize":
            self._initialize(params)
            await self._reply_result(request_id, self._server_info())
        elif method == "tools/list":
            await self._tools_list(request_id, params)
        elif method == "tools/call":
            await self._tools_call(request_id, params)
        else:
            await self._reply_error(
                request_id, "Method not implemented: " + method, CODE_METHOD_NOT_FOUND
            )

    def _initialize(self, params: Mapping[str, Any] | None) -> None:
        """Take the vision URL and token from the client capabilities."""
        if not isinstance(params, Mapping):
            return
        capabilities = params.get("capabilities")
        if not isinstance(capabilities, Mapping):
            return
        vision = capabilities.get("vision")
        if not isinstance(vision, Mapping):
            return
        url = vision.get("url")
        token = vision.get("token")
        if isinstance(url, str) and self._device.config.camera:
            self._device.vision_url = url
            self._device.vision_token = token if isinstance(token, str) else ""

    def _server_info(self) -> str:
        config = self._device.config
        return (
            '{"protocolVersion":"'
            + PROTOCOL_VERSION
            + '","capabilities":{"tools":{}},"serverInfo":{"name":"'
            + config.board
            + '","version":"'
            + config.firmware
            + '"}}'
        )

    async def _tools_list(
        self, request_id: int, params: Mapping[str, Any] | None
    ) -> None:
        cursor = ""
        with_user_tools = False
        if params is not None:
            if isinstance(params.get("cursor"), str):
                cursor = params["cursor"]
            if isinstance(params.get("withUserTools"), bool):
                with_user_tools = params["withUserTools"]
        limit = self._device.config.page_size_bytes
        page = '{"tools":['
        found = cursor == ""
        next_cursor = ""
        for tool in self.tools:
            if not found:
                if tool.name != cursor:
                    continue
                found = True
            if tool.user_only and not with_user_tools:
                continue
            tool_json = dumps(tool.to_json()) + ","
            if len(page.encode()) + len(tool_json.encode()) + 30 > limit:
                next_cursor = tool.name
                break
            page += tool_json
        page = page.removesuffix(",")
        if page.endswith("[") and self.tools:
            if not found and self._device.config.unknown_cursor == "empty":
                await self._reply_result(request_id, '{"tools":[]}')
                return
            await self._reply_error(
                request_id,
                "Failed to add tool " + next_cursor + " because of payload size limit",
                CODE_INTERNAL_ERROR,
            )
            return
        if next_cursor:
            page += '],"nextCursor":"' + next_cursor + '"}'
        else:
            page += "]}"
        await self._reply_result(request_id, page)

    async def _tools_call(
        self, request_id: int, params: Mapping[str, Any] | None
    ) -> None:
        device = self._device
        if not isinstance(params, Mapping):
            await self._reply_error(request_id, "Missing params", CODE_INTERNAL_ERROR)
            return
        name = params.get("name")
        if not isinstance(name, str):
            await self._reply_error(request_id, "Missing name", CODE_INTERNAL_ERROR)
            return
        arguments = params.get("arguments")
        if "arguments" in params and not isinstance(arguments, Mapping):
            await self._reply_error(
                request_id, "Invalid arguments", CODE_INTERNAL_ERROR
            )
            return
        if name in device.faults.drop_on_call:
            device.drop_link()
            return
        tool = self.find_tool(name)
        if tool is None:
            await self._reply_error(
                request_id, "Unknown tool: " + name, CODE_METHOD_NOT_FOUND
            )
            return
        try:
            values = tool.resolve_arguments(arguments)
        except ArgumentError as err:
            await self._reply_error(request_id, str(err), CODE_INTERNAL_ERROR)
            return
        device.spawn_call(self._run_tool(request_id, tool, values), name)

    async def _run_tool(
        self, request_id: int, tool: ToolSpec, values: dict[str, Any]
    ) -> None:
        """Run a tool, answer, then run what the tool deferred."""
        device = self._device
        pending: list[AfterReply] = []
        _after_reply.set(pending)
        delay = device.config.tool_delays.get(tool.name, 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        device.record_call(tool.name, values)
        try:
            result = tool.handler(device, values)
            if isinstance(result, Awaitable):
                result = await result
        except Exception as err:  # noqa: BLE001 - the firmware catches every std::exception
            message = str(err) if isinstance(err, ToolError) else repr(err)
            _LOGGER.debug("%s: tool %s failed: %s", device.name, tool.name, message)
            if device.config.other_implementation:
                await self._reply_result(
                    request_id, dumps(error_result_object(message))
                )
            else:
                await self._reply_error(request_id, message, CODE_INTERNAL_ERROR)
        else:
            await self._reply_result(request_id, dumps(result_object(result)))
        for action in pending:
            device.spawn_task(action(), "after reply")

    async def _reply_result(self, request_id: int, result: str) -> None:
        reply_id = request_id + self._device.faults.reply_id_offset
        payload = '{"jsonrpc":"2.0","id":' + str(reply_id) + ',"result":' + result + "}"
        await self._send(payload)

    async def _reply_error(self, request_id: int, message: str, code: int) -> None:
        device = self._device
        reply_id = request_id + device.faults.reply_id_offset
        if device.config.other_implementation:
            payload = dumps(
                {
                    "jsonrpc": "2.0",
                    "id": reply_id,
                    "error": {"code": code, "message": message},
                }
            )
            if device.faults.invalid_error_json:
                payload = payload[:-2] + '"}}'
        else:
            if device.faults.invalid_error_json:
                message += '"'
            payload = (
                '{"jsonrpc":"2.0","id":'
                + str(reply_id)
                + ',"error":{"message":"'
                + message
                + '"}}'
            )
        await self._send(payload)

    async def _send(self, payload: str) -> None:
        device = self._device
        await device.send_mcp_payload(payload)
        if device.faults.duplicate_replies:
            await device.send_mcp_payload(payload)
