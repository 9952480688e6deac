"""The device event entity: wake word, listening, abort, notifications."""

from __future__ import annotations

from homeassistant.components.event import EventEntity
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import DeviceEvent, XiaozhiConfigEntry, XiaozhiDevice
from .entity import XiaozhiEntity

PARALLEL_UPDATES = 0

EVENT_TYPES = [
    "wake_word",
    "listening_started",
    "listening_stopped",
    "speaking_started",
    "speaking_stopped",
    "aborted",
    "notification",
    "message",
]


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device event entity."""
    async_add_entities([XiaozhiEventEntity(entry.runtime_data)])


class XiaozhiEventEntity(XiaozhiEntity, EventEntity):
    """What the device just did."""

    _attr_translation_key = "device_event"
    _attr_event_types = EVENT_TYPES

    def __init__(self, device: XiaozhiDevice) -> None:
        """Create the event entity."""
        super().__init__(device, "event")

    async def async_added_to_hass(self) -> None:
        """Follow the device's events."""
        await super().async_added_to_hass()
        self.async_on_remove(self.device.async_add_event_listener(self._on_event))

    @callback
    def _on_event(self, event: DeviceEvent) -> None:
        self._trigger_event(event.type, event.data)
        self.async_write_ha_state()
