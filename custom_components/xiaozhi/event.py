"""The device event entity: wake words, abort, notifications, messages, timers."""

from typing import Final, override

from homeassistant.components.event import EventEntity
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiEntity
from .protocol import DeviceEvent, DeviceEventType
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 0

# What the entity fires; every device event also goes on the bus and to the
# device triggers.
ENTITY_EVENTS: Final = (
    DeviceEventType.WAKE_WORD,
    DeviceEventType.ABORTED,
    DeviceEventType.CONVERSATION_ENDED,
    DeviceEventType.NOTIFICATION,
    DeviceEventType.MESSAGE,
    DeviceEventType.TIMER_FINISHED,
    DeviceEventType.WAKE_WON,
    DeviceEventType.WAKE_STOOD_DOWN,
    DeviceEventType.FALSE_WAKE,
)


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
    _attr_event_types = [event_type.value for event_type in ENTITY_EVENTS]  # noqa: RUF012

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the event entity."""
        super().__init__(runtime, "event")

    @override
    async def async_added_to_hass(self) -> None:
        """Follow the device's events."""
        await super().async_added_to_hass()
        self.async_on_remove(self.entry_data.async_subscribe_events(self._on_event))

    @callback
    def _on_event(self, event: DeviceEvent) -> None:
        if event.type not in ENTITY_EVENTS or event.is_state_change:
            # Listening and speaking are the satellite's state, and a state
            # change is the device state sensor's: one logbook line, not two.
            return
        self._trigger_event(event.type, event.data)
        self.async_write_ha_state()
