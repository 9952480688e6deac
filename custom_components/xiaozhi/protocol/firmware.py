"""Names the xiaozhi-esp32 firmware gives its built-in tools (``mcp_server.cc``)."""

from typing import Final

# AI-visible tools of every board.
STATUS_TOOL: Final = "self.get_device_status"
VOLUME_TOOL: Final = "self.audio_speaker.set_volume"
BRIGHTNESS_TOOL: Final = "self.screen.set_brightness"
THEME_TOOL: Final = "self.screen.set_theme"
PHOTO_TOOL: Final = "self.camera.take_photo"

# User-only tools of every board.
SYSTEM_INFO_TOOL: Final = "self.get_system_info"
REBOOT_TOOL: Final = "self.reboot"
UPGRADE_TOOL: Final = "self.upgrade_firmware"
SCREEN_INFO_TOOL: Final = "self.screen.get_info"
SNAPSHOT_TOOL: Final = "self.screen.snapshot"
PREVIEW_TOOL: Final = "self.screen.preview_image"
ASSETS_TOOL: Final = "self.assets.set_download_url"

# A board tool found on many boards.
RGB_LIGHT_TOOL: Final = "self.light.set_rgb"

# Tools that read or configure the device rather than control it: no entity.
PASSIVE_TOOLS: Final = frozenset(
    {
        STATUS_TOOL,
        SYSTEM_INFO_TOOL,
        UPGRADE_TOOL,
        SCREEN_INFO_TOOL,
        PREVIEW_TOOL,
        ASSETS_TOOL,
    }
)

# The ``notify`` message (a sound to fetch and play while idle) came after
# firmware 2.4.2 (78/xiaozhi-esp32 PR 2191); older firmware ignores it.
NOTIFY_AFTER: Final = (2, 4, 2)


def version_tuple(version: str | None) -> tuple[int, ...]:
    """Return ``2.4.3`` as ``(2, 4, 3)``; what is not a number ends it."""
    numbers: list[int] = []
    for part in (version or "").strip().lstrip("vV").split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(numbers)


def plays_notify(version: str | None) -> bool:
    """Return True for firmware that fetches and plays ``notify`` sounds."""
    return version_tuple(version) > NOTIFY_AFTER
