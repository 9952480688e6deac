"""The device event entity: wake word, listening, speaking, abort, notifications."""

from typing import override

from homeassistant.components.event import EventEntity
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiEntity
from .manager import XiaozhiConfigEntry, XiaozhiManager
from .protocol import DeviceEvent, DeviceEventType

PARALLEL_UPDATES = 0


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
    _attr_event_types = [event_type.value for event_type in DeviceEventType]  # noqa: RUF012

    def __init__(self, manager: XiaozhiManager) -> None:
        """Create the event entity."""
        super().__init__(manager, "event")

    @override
    async def async_added_to_hass(self) -> None:
        """Follow the device's events."""
        await super().async_added_to_hass()
        self.async_on_remove(self.data.async_subscribe_events(self._on_event))

    @callback
    def _on_event(self, event: DeviceEvent) -> None:
        if event.is_state_change:
            # The activity sensor shows it: one logbook line, not two.
            return
        self._trigger_event(event.type, event.data)
        self.async_write_ha_state()
