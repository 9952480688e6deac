"""A firmware-faithful xiaozhi-esp32 device simulator.

Use it from tests::

    device = SimulatedDevice(DeviceConfig(ws_url=url, token="t"))
    await device.connect()
    ...
    await device.stop()

or from a shell: ``python -m simulator --help``.
"""

from .config import (
    DEFAULT_MAC,
    DeviceConfig,
    Faults,
    bool_tool,
    load_tools_file,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
    string_tool,
    tool_from_dict,
)
from .device import (
    DeviceConnectionError,
    DeviceError,
    DeviceState,
    HelloTimeoutError,
    ServerHelloRejected,
    SimulatedDevice,
    ToolCallRecord,
)
from .device_tools import device_status
from .jpeg import TINY_JPEG
from .ota import OtaError, OtaResult, system_info
from .protocol import AudioPacket, decode_audio, encode_audio
from .tools import (
    ArgumentError,
    ImageResult,
    PropertySpec,
    ToolError,
    ToolHandler,
    ToolResult,
    ToolSpec,
)
from .transport import HttpClient, UrlRewriter, mask_token, relative_url

__all__ = [
    "DEFAULT_MAC",
    "TINY_JPEG",
    "ArgumentError",
    "AudioPacket",
    "DeviceConfig",
    "DeviceConnectionError",
    "DeviceError",
    "DeviceState",
    "Faults",
    "HelloTimeoutError",
    "HttpClient",
    "ImageResult",
    "OtaError",
    "OtaResult",
    "PropertySpec",
    "ServerHelloRejected",
    "SimulatedDevice",
    "ToolCallRecord",
    "ToolError",
    "ToolHandler",
    "ToolResult",
    "ToolSpec",
    "UrlRewriter",
    "bool_tool",
    "decode_audio",
    "device_status",
    "encode_audio",
    "load_tools_file",
    "many_tools",
    "mask_token",
    "no_arg_tool",
    "relative_url",
    "rgb_light_tool",
    "string_tool",
    "system_info",
    "tool_from_dict",
]
