"""Sensors: battery, Wi-Fi, chip temperature from the status; the activity."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import override

from homeassistant.components.sensor import (
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
from .manager import XiaozhiConfigEntry, XiaozhiManager
from .protocol import Activity
from .protocol.status import SIGNALS

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiSensorEntityDescription(SensorEntityDescription):
    """A sensor of a device; a status sensor exists once it has a value."""

    value_fn: Callable[[XiaozhiEntryData], StateType]


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
ACTIVITY = XiaozhiSensorEntityDescription(
    key="activity",
    translation_key="activity",
    device_class=SensorDeviceClass.ENUM,
    options=[activity.value for activity in Activity],
    value_fn=lambda data: data.activity,
)
TRANSCRIPT_SENSORS = (
    XiaozhiSensorEntityDescription(
        key="last_heard",
        translation_key="last_heard",
        value_fn=lambda data: _short(data.last_heard),
    ),
    XiaozhiSensorEntityDescription(
        key="last_reply",
        translation_key="last_reply",
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
    def wanted(manager: XiaozhiManager) -> dict[str, EntityFactory]:
        found: dict[str, EntityFactory] = {
            description.key: partial(XiaozhiSensor, manager, description)
            for description in (ACTIVITY, *TRANSCRIPT_SENSORS)
        }
        for description in STATUS_SENSORS:
            if description.value_fn(manager.data) is not None:
                found[description.key] = partial(XiaozhiSensor, manager, description)
        return found

    async_follow_device(
        entry, async_add_entities, wanted, follow="status", sticky=STICKY.__contains__
    )


class XiaozhiSensor(XiaozhiEntity, SensorEntity):
    """A value the device reports."""

    entity_description: XiaozhiSensorEntityDescription

    def __init__(
        self, manager: XiaozhiManager, description: XiaozhiSensorEntityDescription
    ) -> None:
        """Create the sensor from its description."""
        super().__init__(manager, description.key, description)

    @property
    @override
    def native_value(self) -> StateType:
        """Return the value the device reported."""
        return self.entity_description.value_fn(self.data)
