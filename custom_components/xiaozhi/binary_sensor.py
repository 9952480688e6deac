"""Binary sensors: connected, and charging from the status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from homeassistant.components.binary_sensor import (
    BinarySensorEntity,
    BinarySensorEntityDescription,
)
from homeassistant.components.binary_sensor.const import BinarySensorDeviceClass
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .device import XiaozhiConfigEntry, XiaozhiDevice
from .entity import EntityFactory, XiaozhiEntity, async_follow_device, status_value

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiBinarySensorEntityDescription(BinarySensorEntityDescription):
    """A binary sensor of a device."""

    value_fn: Callable[[XiaozhiDevice], bool | None]
    exists_fn: Callable[[XiaozhiDevice], bool] = lambda _device: True
    always_available: bool = False


def _charging(device: XiaozhiDevice) -> bool | None:
    value = status_value(device.status, ("battery", "charging"))
    return value if isinstance(value, bool) else None


BINARY_SENSORS = (
    XiaozhiBinarySensorEntityDescription(
        key="connected",
        translation_key="connected",
        device_class=BinarySensorDeviceClass.CONNECTIVITY,
        entity_category=EntityCategory.DIAGNOSTIC,
        value_fn=lambda device: device.connected,
        always_available=True,
    ),
    XiaozhiBinarySensorEntityDescription(
        key="charging",
        device_class=BinarySensorDeviceClass.BATTERY_CHARGING,
        value_fn=_charging,
        exists_fn=lambda device: _charging(device) is not None,
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the binary sensors the device supports."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return {
            description.key: partial(XiaozhiBinarySensor, device, description)
            for description in BINARY_SENSORS
            if description.exists_fn(device)
        }

    async_follow_device(
        hass, entry, async_add_entities, wanted, sticky=lambda _key: True
    )


class XiaozhiBinarySensor(XiaozhiEntity, BinarySensorEntity):
    """A binary state of a device."""

    entity_description: XiaozhiBinarySensorEntityDescription

    def __init__(
        self,
        device: XiaozhiDevice,
        description: XiaozhiBinarySensorEntityDescription,
    ) -> None:
        """Create the binary sensor from its description."""
        super().__init__(device, description.key, description)

    @property
    def available(self) -> bool:
        """Return True; the connectivity sensor is always available."""
        return self.entity_description.always_available or super().available

    @property
    def is_on(self) -> bool | None:
        """Return the state."""
        return self.entity_description.value_fn(self.device)
