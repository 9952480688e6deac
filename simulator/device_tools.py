"""The tools every device registers, with real effects on simulated state.

Registration order follows the firmware: the common AI-visible tools come
first, then the board's own tools, then the user-only tools.
"""

from dataclasses import replace
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .config import tool_from_dict
from .jpeg import TINY_JPEG
from .ota import system_info
from .tools import ArgumentValue, ToolError, ToolHandler, ToolResult, ToolSpec
from .transport import chunked, multipart_parts

if TYPE_CHECKING:
    from .config import DeviceConfig
    from .device import SimulatedDevice

FIRMWARE: Final[dict[str, Any]] = json.loads(
    Path(__file__).with_name("firmware.json").read_text(encoding="utf-8")
)
"""What a board says: hello, server info, built-in tools, status (shared with
the protocol tests and the benchmarks, so they cannot drift apart)."""
BUILTIN_TOOLS: Final[dict[str, dict[str, Any]]] = {
    tool["name"]: tool for tool in FIRMWARE["tools"]
}

THEMES = ("light", "dark")
SCREEN_WIDTH = 320
SCREEN_HEIGHT = 240
CAMERA_BOUNDARY = "----ESP32_CAMERA_BOUNDARY"
SNAPSHOT_BOUNDARY = "----ESP32_SCREEN_SNAPSHOT_BOUNDARY"
UPGRADE_URL_DEFAULT = "URL of the firmware image to download and install"
"""The firmware declares ``url`` of ``self.upgrade_firmware`` with its
description text as default value, so the property is not required."""


def device_status(device: SimulatedDevice) -> dict[str, Any]:
    """Return the status document of ``self.get_device_status``.

    Like the firmware, ``audio_speaker``, ``screen`` and ``network`` are
    always present (``screen`` is empty on a device without one); ``battery``
    and ``chip`` only when the board has them.
    """
    config = device.config
    state = device.state
    status: dict[str, Any] = {"audio_speaker": {"volume": state.volume}}
    screen: dict[str, Any] = {}
    if config.screen:
        screen = {"brightness": state.brightness, "theme": state.theme}
    status["screen"] = screen
    if config.battery:
        status["battery"] = {
            "level": state.battery_level,
            "charging": state.charging,
        }
    status["network"] = {
        "type": state.network_type,
        "ssid": state.ssid,
        "signal": state.signal,
    }
    if config.temperature:
        status["chip"] = {"temperature": state.temperature}
    return status


async def _get_device_status(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    del arguments
    return device_status(device)


async def _set_volume(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    device.state.volume = int(arguments["volume"])
    return True


async def _set_brightness(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    device.state.brightness = int(arguments["brightness"])
    return True


async def _set_theme(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    theme = str(arguments["theme"])
    if theme not in THEMES:
        # The firmware answers a successful "false" for an unknown theme.
        return False
    device.state.theme = theme
    return True


async def _take_photo(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    if not device.vision_url:
        raise ToolError("Image explain URL or token is not set")
    question = str(arguments["question"])
    headers = {"Device-Id": device.config.mac, "Client-Id": device.config.client_id}
    if device.vision_token:
        headers["Authorization"] = "Bearer " + device.vision_token
    headers["Content-Type"] = f"multipart/form-data; boundary={CAMERA_BOUNDARY}"
    parts = multipart_parts(
        CAMERA_BOUNDARY,
        fields=[("question", question)],
        file_field="file",
        filename="camera.jpg",
        content_type="image/jpeg",
        data=TINY_JPEG,
    )
    status, body = await device.http_request(
        "POST",
        device.vision_url,
        headers=headers,
        data=chunked(parts),
        failure="Failed to connect to explain URL",
    )
    if status != 200:
        raise ToolError("Failed to upload photo")
    device.photos_taken += 1
    return body.decode("utf-8", errors="replace")


async def _get_system_info(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    del arguments
    return system_info(device.config, ssid=device.state.ssid, rssi=device.state.rssi)


async def _reboot(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    del arguments
    device.after_reply(device.reboot)
    return True


async def _upgrade_firmware(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    url = str(arguments["url"])
    device.upgrade_urls.append(url)
    device.after_reply(lambda: device.upgrade(url))
    return True


async def _screen_info(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    del device, arguments
    return {"width": SCREEN_WIDTH, "height": SCREEN_HEIGHT, "monochrome": False}


async def _snapshot(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    url = str(arguments["url"])
    parts = multipart_parts(
        SNAPSHOT_BOUNDARY,
        fields=[],
        file_field="file",
        filename="screenshot.jpg",
        content_type="image/jpeg",
        data=TINY_JPEG,
    )
    status, _body = await device.http_request(
        "POST",
        url,
        headers={"Content-Type": f"multipart/form-data; boundary={SNAPSHOT_BOUNDARY}"},
        data=chunked(parts),
        failure=f"Failed to open URL: {url}",
    )
    if status != 200:
        raise ToolError(f"Unexpected status code: {status}")
    device.snapshots.append((url, int(arguments["quality"])))
    return True


async def _preview_image(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    url = str(arguments["url"])
    status, body = await device.http_request(
        "GET", url, failure=f"Failed to open URL: {url}"
    )
    if status != 200:
        raise ToolError(f"Unexpected status code: {status}")
    device.previewed_images.append(len(body))
    return True


async def _set_assets_url(
    device: SimulatedDevice, arguments: dict[str, ArgumentValue]
) -> ToolResult:
    device.assets_download_url = str(arguments["url"])
    return True


def _builtin(name: str, handler: ToolHandler) -> ToolSpec:
    """Return a built-in tool as ``firmware.json`` lists it, with its handler."""
    listed = BUILTIN_TOOLS[name]
    annotations = listed.get("annotations") or {}
    return replace(
        tool_from_dict(listed),
        user_only="user" in annotations.get("audience", ()),
        handler=handler,
    )


def build_tools(config: DeviceConfig) -> list[ToolSpec]:
    """Return the device's tools in firmware registration order.

    Names, descriptions and schemas come from ``firmware.json``; what the
    board has decides which are registered. A tool whose name is already
    registered is skipped, as the firmware does.
    """
    tools = [
        _builtin("self.get_device_status", _get_device_status),
        _builtin("self.audio_speaker.set_volume", _set_volume),
    ]
    if config.screen:
        tools += [
            _builtin("self.screen.set_brightness", _set_brightness),
            _builtin("self.screen.set_theme", _set_theme),
        ]
    if config.camera:
        tools.append(_builtin("self.camera.take_photo", _take_photo))
    tools += config.extra_tools
    if config.user_tools:
        tools += [
            _builtin("self.get_system_info", _get_system_info),
            _builtin("self.reboot", _reboot),
            _builtin("self.upgrade_firmware", _upgrade_firmware),
        ]
        if config.screen:
            tools += [
                _builtin("self.screen.get_info", _screen_info),
                _builtin("self.screen.snapshot", _snapshot),
                _builtin("self.screen.preview_image", _preview_image),
            ]
        if config.assets:
            tools.append(_builtin("self.assets.set_download_url", _set_assets_url))
    unique: list[ToolSpec] = []
    seen: set[str] = set()
    for tool in tools:
        if tool.name not in seen:
            seen.add(tool.name)
            unique.append(tool)
    return unique
