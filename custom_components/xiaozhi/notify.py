"""Notify: show a message on the device's screen."""

from typing import override

from homeassistant.components.notify import NotifyEntity
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiEntity
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1

DEFAULT_TITLE = "Home Assistant"


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the screen message entity."""
    async_add_entities([XiaozhiScreenMessage(entry.runtime_data)])


class XiaozhiScreenMessage(XiaozhiEntity, NotifyEntity):
    """Sends the device an alert with a title and a message."""

    _attr_translation_key = "screen_message"

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the notify entity."""
        super().__init__(runtime, "screen_message")

    @override
    async def async_send_message(self, message: str, title: str | None = None) -> None:
        """Show the message on the device."""
        await self.runtime.commands.async_send_alert(title or DEFAULT_TITLE, message)
