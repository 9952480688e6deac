"""Sensors: battery, Wi-Fi, chip temperature; the device's state and wake word.

Transcripts (what was heard and said) are opt-in: their sensors are
disabled by default, as enabling them keeps every utterance in history.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, override

from homeassistant.components.sensor import (
    RestoreSensor,
    SensorDeviceClass,
    SensorEntity,
    SensorEntityDescription,
    SensorStateClass,
)
from homeassistant.const import (
    MAX_LENGTH_STATE_STATE as MAX_STATE_LENGTH,
    PERCENTAGE,
    EntityCategory,
    UnitOfTemperature,
)
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.typing import StateType

from .entity import EntityFactory, XiaozhiEntity, async_follow_device
from .entry_data import XiaozhiEntryData
from .protocol import Activity
from .protocol.status import SIGNALS
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiSensorEntityDescription(SensorEntityDescription):
    """A sensor of a device; a status sensor exists once it has a value."""

    value_fn: Callable[[XiaozhiEntryData], StateType]
    attributes_fn: Callable[[XiaozhiEntryData], dict[str, Any]] | None = None


STATUS_SENSORS = (
    XiaozhiSensorEntityDescription(
        key="battery",
        value_fn=lambda data: data.status.battery_level,
        device_class=SensorDeviceClass.BATTERY,
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
    ),
    XiaozhiSensorEntityDescription(
        key="wifi_signal",
        translation_key="wifi_signal",
        value_fn=lambda data: data.status.signal,
        device_class=SensorDeviceClass.ENUM,
        options=list(SIGNALS),
        entity_category=EntityCategory.DIAGNOSTIC,
    ),
    XiaozhiSensorEntityDescription(
        key="wifi_network",
        translation_key="wifi_network",
        value_fn=lambda data: data.status.ssid,
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
    ),
    XiaozhiSensorEntityDescription(
        key="chip_temperature",
        translation_key="chip_temperature",
        value_fn=lambda data: data.status.temperature,
        device_class=SensorDeviceClass.TEMPERATURE,
        native_unit_of_measurement=UnitOfTemperature.CELSIUS,
        state_class=SensorStateClass.MEASUREMENT,
        entity_category=EntityCategory.DIAGNOSTIC,
        suggested_display_precision=1,
    ),
)
DEVICE_SENSORS = (
    # What the device does; the satellite shows the voice part of it, so this
    # one stays out of the way unless wanted.
    XiaozhiSensorEntityDescription(
        key="activity",
        translation_key="activity",
        device_class=SensorDeviceClass.ENUM,
        options=[activity.value for activity in Activity],
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        value_fn=lambda data: data.activity,
    ),
    XiaozhiSensorEntityDescription(
        key="wake_word",
        translation_key="wake_word",
        entity_category=EntityCategory.DIAGNOSTIC,
        value_fn=lambda data: data.wake_word,
    ),
    XiaozhiSensorEntityDescription(
        key="tools",
        translation_key="tools",
        entity_category=EntityCategory.DIAGNOSTIC,
        value_fn=lambda data: len(data.tools),
        attributes_fn=lambda data: {"tools": sorted(data.tools)},
    ),
)
TRANSCRIPT_SENSORS = (
    XiaozhiSensorEntityDescription(
        key="last_heard",
        translation_key="last_heard",
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        value_fn=lambda data: _short(data.last_heard),
    ),
    XiaozhiSensorEntityDescription(
        key="last_reply",
        translation_key="last_reply",
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        value_fn=lambda data: _short(data.last_reply),
    ),
)
STICKY = frozenset(description.key for description in STATUS_SENSORS)


def _short(text: str | None) -> str | None:
    """Fit a text into a state (255 characters at most)."""
    if text is None or len(text) <= MAX_STATE_LENGTH:
        return text
    return text[: MAX_STATE_LENGTH - 1] + "…"


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add a sensor for every status value the device reports."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        found: dict[str, EntityFactory] = {
            description.key: partial(XiaozhiSensor, runtime, description)
            for description in DEVICE_SENSORS
        }
        for description in TRANSCRIPT_SENSORS:
            found[description.key] = partial(XiaozhiTranscript, runtime, description)
        for description in STATUS_SENSORS:
            if description.value_fn(runtime.entry_data) is not None:
                found[description.key] = partial(XiaozhiSensor, runtime, description)
        return found

    async_follow_device(
        entry, async_add_entities, wanted, follow="status", sticky=STICKY.__contains__
    )


class XiaozhiSensor(XiaozhiEntity, SensorEntity):
    """A value the device reports."""

    entity_description: XiaozhiSensorEntityDescription
    # The tool list changes with firmware only: history needs the count alone.
    _unrecorded_attributes = frozenset({"tools"})

    def __init__(
        self, runtime: XiaozhiRuntime, description: XiaozhiSensorEntityDescription
    ) -> None:
        """Create the sensor from its description."""
        super().__init__(runtime, description.key, description)

    @property
    @override
    def native_value(self) -> StateType:
        """Return the value the device reported."""
        return self.entity_description.value_fn(self.entry_data)

    @property
    @override
    def extra_state_attributes(self) -> dict[str, Any] | None:
        """Return more of what the device reported (its tool names)."""
        if (attributes_fn := self.entity_description.attributes_fn) is None:
            return None
        return attributes_fn(self.entry_data)


class XiaozhiTranscript(XiaozhiSensor, RestoreSensor):
    """What was heard or said last; kept across restarts and reloads."""

    _restored: StateType = None

    @override
    async def async_added_to_hass(self) -> None:
        """Show the last transcript until a new one comes."""
        await super().async_added_to_hass()
        if (last := await self.async_get_last_sensor_data()) is not None:
            self._restored = last.native_value  # type: ignore[assignment]

    @property
    @override
    def native_value(self) -> StateType:
        """Return the transcript, or the one from before the restart."""
        value = super().native_value
        return value if value is not None else self._restored
