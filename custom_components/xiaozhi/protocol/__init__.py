"""The xiaozhi-esp32 device protocol: frames, MCP client and device session.

Nothing in this package imports Home Assistant: it is also the library
``aioxiaozhi`` (``library/README.md``), built from these files. Modules
import each other relatively, so the package works under either name.
"""

__version__ = "0.1.0"

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
from .websocket import WebSocketLink, serve_device

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
    "WebSocketLink",
    "XiaozhiError",
    "__version__",
    "pack_audio",
    "parse_protocol_version",
    "serve_device",
    "unpack_audio",
    "validate_arguments",
]
