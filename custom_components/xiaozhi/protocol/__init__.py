"""The xiaozhi-esp32 device protocol: frames, MCP client and device session.

Nothing in this package imports Home Assistant: it only needs asyncio and a
transport with ``send_str`` and ``close``, so it can ship as its own library.
"""

from .errors import (
    ArgumentError,
    ConnectionClosedError,
    McpError,
    ProtocolError,
    RequestTimeoutError,
    XiaozhiError,
)
from .mcp import McpClient
from .messages import DeviceHello
from .session import CloseReason, DeviceSession, SessionHandler, Transport
from .tools import Tool, ToolProperty, ToolResult, validate_arguments

__all__ = [
    "ArgumentError",
    "CloseReason",
    "ConnectionClosedError",
    "DeviceHello",
    "DeviceSession",
    "McpClient",
    "McpError",
    "ProtocolError",
    "RequestTimeoutError",
    "SessionHandler",
    "Tool",
    "ToolProperty",
    "ToolResult",
    "Transport",
    "XiaozhiError",
    "validate_arguments",
]
