"""Sensors: battery, Wi-Fi, chip temperature from the status; the activity."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from homeassistant.components.sensor import (
    SensorDeviceClass,
    SensorEntity,
    SensorEntityDescription,
    SensorStateClass,
)
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTemperature
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import ACTIVITIES, XiaozhiConfigEntry, XiaozhiDevice
from .entity import EntityFactory, XiaozhiEntity, async_follow_device, status_value

PARALLEL_UPDATES = 0

SIGNALS = ["strong", "medium", "weak"]


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _choice(options: list[str]) -> Callable[[Any], str | None]:
    def pick(value: Any) -> str | None:
        return value if value in options else None

    return pick


@dataclass(frozen=True, kw_only=True)
class XiaozhiSensorEntityDescription(SensorEntityDescription):
    """A sensor of a device; it exists once ``value_fn`` has a value."""

    value_fn: Callable[[XiaozhiDevice], Any]


def _status(
    path: tuple[str, ...], convert: Callable[[Any], Any] = _number
) -> Callable[[XiaozhiDevice], Any]:
    return lambda device: convert(status_value(device.status, path))


STATUS_SENSORS = (
    XiaozhiSensorEntityDescription(
        key="battery",
        value_fn=_status(("battery", "level")),
        device_class=SensorDeviceClass.BATTERY,
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
    ),
    XiaozhiSensorEntityDescription(
        key="wifi_signal",
        translation_key="wifi_signal",
        value_fn=_status(("network", "signal"), _choice(SIGNALS)),
        device_class=SensorDeviceClass.ENUM,
        options=SIGNALS,
        entity_category=EntityCategory.DIAGNOSTIC,
    ),
    XiaozhiSensorEntityDescription(
        key="wifi_network",
        translation_key="wifi_network",
        value_fn=_status(("network", "ssid"), _text),
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
    ),
    XiaozhiSensorEntityDescription(
        key="chip_temperature",
        translation_key="chip_temperature",
        value_fn=_status(("chip", "temperature")),
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
    options=ACTIVITIES,
    value_fn=lambda device: device.activity,
)
STICKY = frozenset(description.key for description in STATUS_SENSORS)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add a sensor for every status value the device reports."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        found: dict[str, EntityFactory] = {
            ACTIVITY.key: partial(XiaozhiSensor, device, ACTIVITY)
        }
        for description in STATUS_SENSORS:
            if description.value_fn(device) is not None:
                found[description.key] = partial(XiaozhiSensor, device, description)
        return found

    async_follow_device(
        hass, entry, async_add_entities, wanted, sticky=STICKY.__contains__
    )


class XiaozhiSensor(XiaozhiEntity, SensorEntity):
    """A value the device reports."""

    entity_description: XiaozhiSensorEntityDescription

    def __init__(
        self, device: XiaozhiDevice, description: XiaozhiSensorEntityDescription
    ) -> None:
        """Create the sensor from its description."""
        super().__init__(device, description.key, description)

    @property
    def native_value(self) -> Any:
        """Return the value the device reported."""
        return self.entity_description.value_fn(self.device)
