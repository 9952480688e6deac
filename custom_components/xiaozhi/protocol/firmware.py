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
