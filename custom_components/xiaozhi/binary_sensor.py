"""Binary sensors: the connection, and charging from the status."""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import override

from homeassistant.components.binary_sensor import (
    BinarySensorDeviceClass,
    BinarySensorEntity,
    BinarySensorEntityDescription,
)
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import EntityFactory, XiaozhiEntity, async_follow_device
from .entry_data import XiaozhiEntryData
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiBinarySensorEntityDescription(BinarySensorEntityDescription):
    """A binary sensor of a device."""

    value_fn: Callable[[XiaozhiEntryData], bool | None]
    exists_fn: Callable[[XiaozhiEntryData], bool] = lambda _data: True
    always_available: bool = False


BINARY_SENSORS = (
    XiaozhiBinarySensorEntityDescription(
        key="connected",
        translation_key="connected",
        device_class=BinarySensorDeviceClass.CONNECTIVITY,
        entity_category=EntityCategory.DIAGNOSTIC,
        # Reachable: connected, or idle after a conversation over WebSocket
        # (such a device connects when it is used).
        value_fn=lambda data: data.link is not None or data.expected_disconnect,
        always_available=True,
    ),
    XiaozhiBinarySensorEntityDescription(
        key="charging",
        device_class=BinarySensorDeviceClass.BATTERY_CHARGING,
        value_fn=lambda data: data.status.charging,
        exists_fn=lambda data: data.status.charging is not None,
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the binary sensors the device supports."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return {
            description.key: partial(XiaozhiBinarySensor, runtime, description)
            for description in BINARY_SENSORS
            if description.exists_fn(runtime.entry_data)
        }

    async_follow_device(
        entry, async_add_entities, wanted, follow="status", sticky=lambda _key: True
    )


class XiaozhiBinarySensor(XiaozhiEntity, BinarySensorEntity):
    """A binary state of a device."""

    entity_description: XiaozhiBinarySensorEntityDescription

    def __init__(
        self,
        runtime: XiaozhiRuntime,
        description: XiaozhiBinarySensorEntityDescription,
    ) -> None:
        """Create the binary sensor from its description."""
        super().__init__(runtime, description.key, description)

    @property
    @override
    def available(self) -> bool:
        """Return True for the connectivity sensor; else as other entities."""
        return self.entity_description.always_available or super().available

    @property
    @override
    def is_on(self) -> bool | None:
        """Return the state."""
        return self.entity_description.value_fn(self.entry_data)
