"""Commands to one device: tool calls and settings, behind one error decorator.

Entities, actions and the conversation agent act on a device through here.
Every method raises only translated Home Assistant errors
(``errors.py``): ServiceValidationError for a bad tool or argument,
HomeAssistantError when the device is gone, does not answer, or refuses.
"""

from collections.abc import Callable, Mapping
from typing import Any, Final

from homeassistant.exceptions import ServiceValidationError

from .const import DOMAIN
from .entry_data import XiaozhiEntryData
from .errors import device_command, not_connected, translated_error
from .protocol import (
    ArgumentError,
    DeviceSession,
    Setting,
    ToolResult,
    validate_arguments,
)
from .protocol.firmware import PHOTO_TOOL, REBOOT_TOOL, SNAPSHOT_TOOL
from .protocol.status import BRIGHTNESS, THEME, VOLUME
from .speaker.channel import DeviceUrls

PHOTO_QUESTION: Final = "Photo requested from Home Assistant"
SNAPSHOT_QUALITY: Final = 80


class DeviceCommands:
    """What Home Assistant can ask one device to do."""

    def __init__(
        self,
        name: str,
        entry_data: XiaozhiEntryData,
        *,
        session: Callable[[], DeviceSession | None],
        urls: Callable[[], DeviceUrls | None],
    ) -> None:
        """Act on the device ``name``, over the live ``session``."""
        self.name = name
        self._entry_data = entry_data
        self._session = session
        self._urls = urls

    @property
    def can_reboot(self) -> bool:
        """Return True when the device offers a restart."""
        return REBOOT_TOOL in self._entry_data.tools

    def _ready_session(self) -> DeviceSession:
        """Return the session once its handshake is done, or say it is not."""
        session = self._session()
        if session is None or not session.ready:
            raise not_connected(self.name)
        return session

    @device_command
    async def async_call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        check: bool = True,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate the arguments, call the tool and return its result.

        With ``check`` a refusal by the device (an error result, or ``false``)
        raises; without it, the result says so and the caller decides.
        """
        session = self._ready_session()
        if (tool := self._entry_data.tools.get(name)) is None:
            raise ServiceValidationError(
                translation_domain=DOMAIN,
                translation_key="unknown_tool",
                translation_placeholders={"tool": name, "name": self.name},
            )
        try:
            cleaned = validate_arguments(tool, arguments or {})
        except ArgumentError as err:
            err.subject = name
            raise
        result = await session.call_tool(name, cleaned, timeout)
        if check and (result.is_error or result.json is False):
            raise translated_error("rejected", self.name, tool=name, error=result.text)
        return result

    async def async_apply(self, setting: Setting, value: Any) -> None:
        """Change a status value through its tool; record it once confirmed."""
        await self.async_call_tool(setting.tool, {setting.argument: value})
        data = self._entry_data
        data.async_set_status(data.status.with_value(setting.path, value))

    async def async_set_volume(self, volume: int) -> None:
        """Set the speaker volume (0-100)."""
        await self.async_apply(VOLUME, volume)

    async def async_set_brightness(self, brightness: int) -> None:
        """Set the screen brightness (0-100)."""
        await self.async_apply(BRIGHTNESS, brightness)

    async def async_set_theme(self, theme: str) -> None:
        """Set the screen theme."""
        await self.async_apply(THEME, theme)

    async def async_reboot(self) -> None:
        """Restart the device."""
        await self.async_call_tool(REBOOT_TOOL)

    async def async_take_photo(self, question: str = PHOTO_QUESTION) -> None:
        """Have the camera take a photo; it arrives through the vision upload."""
        await self.async_call_tool(PHOTO_TOOL, {"question": question})

    async def async_refresh_screen(self) -> None:
        """Ask the device for a picture of its screen."""
        if (urls := self._urls()) is None:
            raise not_connected(self.name)
        url, revoke = urls.mint_snapshot_url()
        try:
            await self.async_call_tool(
                SNAPSHOT_TOOL, {"url": url, "quality": SNAPSHOT_QUALITY}
            )
        finally:
            revoke()

    @device_command
    async def async_send_alert(self, title: str, message: str) -> None:
        """Show a message on the device's screen."""
        await self._ready_session().send_alert(title, message)

    @device_command
    async def async_refresh(self) -> None:
        """List tools and read the status again now."""
        await self._ready_session().refresh()
