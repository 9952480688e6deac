"""The xiaozhi-esp32 device protocol: frames, MCP client and device session.

Nothing in this package imports Home Assistant: it needs asyncio and a
:class:`Link` to send through, so it can ship as its own library.
"""

from .audio import pack_audio, parse_protocol_version, unpack_audio
from .errors import (
    ArgumentError,
    ConnectionClosedError,
    McpError,
    MediaSourceError,
    NoAudioAddressError,
    ProtocolError,
    RequestTimeoutError,
    XiaozhiError,
)
from .events import Activity, DeviceEvent, DeviceEventType
from .link import CloseReason, Link
from .mcp import McpClient
from .messages import DeviceHello
from .session import DeviceSession, SessionHandler
from .status import DeviceStatus, Setting
from .tools import Tool, ToolImage, ToolProperty, ToolResult, validate_arguments

__all__ = [
    "Activity",
    "ArgumentError",
    "CloseReason",
    "ConnectionClosedError",
    "DeviceEvent",
    "DeviceEventType",
    "DeviceHello",
    "DeviceSession",
    "DeviceStatus",
    "Link",
    "McpClient",
    "McpError",
    "MediaSourceError",
    "NoAudioAddressError",
    "ProtocolError",
    "RequestTimeoutError",
    "SessionHandler",
    "Setting",
    "Tool",
    "ToolImage",
    "ToolProperty",
    "ToolResult",
    "XiaozhiError",
    "pack_audio",
    "parse_protocol_version",
    "unpack_audio",
    "validate_arguments",
]
