"""Numbers: volume, screen brightness and one-integer tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from homeassistant.components.number import (
    NumberEntity,
    NumberEntityDescription,
    NumberMode,
    RestoreNumber,
)
from homeassistant.const import PERCENTAGE
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import BRIGHTNESS_TOOL, VOLUME_TOOL
from .device import XiaozhiConfigEntry, XiaozhiDevice
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    async_follow_device,
    status_value,
    tool_entity_factories,
    tool_entity_name,
)
from .protocol import Tool

PARALLEL_UPDATES = 1


@dataclass(frozen=True, kw_only=True)
class XiaozhiNumberEntityDescription(NumberEntityDescription):
    """A number backed by a tool and a status value."""

    tool: str
    value_fn: Callable[[XiaozhiDevice], float | None]
    set_fn: Callable[[XiaozhiDevice, float], Awaitable[None]]


NUMBERS = (
    XiaozhiNumberEntityDescription(
        key="volume",
        translation_key="volume",
        tool=VOLUME_TOOL,
        native_min_value=0,
        native_max_value=100,
        native_step=1,
        mode=NumberMode.SLIDER,
        native_unit_of_measurement=PERCENTAGE,
        value_fn=lambda device: status_value(
            device.status, ("audio_speaker", "volume")
        ),
        set_fn=lambda device, value: device.async_set_value(
            VOLUME_TOOL, {"volume": int(value)}, ("audio_speaker", "volume")
        ),
    ),
    XiaozhiNumberEntityDescription(
        key="screen_brightness",
        translation_key="screen_brightness",
        tool=BRIGHTNESS_TOOL,
        native_min_value=0,
        native_max_value=100,
        native_step=1,
        mode=NumberMode.SLIDER,
        native_unit_of_measurement=PERCENTAGE,
        value_fn=lambda device: status_value(device.status, ("screen", "brightness")),
        set_fn=lambda device, value: device.async_set_value(
            BRIGHTNESS_TOOL, {"brightness": int(value)}, ("screen", "brightness")
        ),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add numbers for what the device offers, now and later."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return tool_entity_factories(
            device, NUMBERS, XiaozhiNumber, ("number", XiaozhiToolNumber)
        )

    async_follow_device(hass, entry, async_add_entities, wanted)


class XiaozhiNumber(XiaozhiEntity, NumberEntity):
    """A number whose value the device reports in its status."""

    entity_description: XiaozhiNumberEntityDescription

    def __init__(
        self, device: XiaozhiDevice, description: XiaozhiNumberEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(device, description.key, description)

    @property
    def native_value(self) -> float | None:
        """Return the value the device reported."""
        value = self.entity_description.value_fn(self.device)
        return value if isinstance(value, (int, float)) else None

    async def async_set_native_value(self, value: float) -> None:
        """Set the value on the device."""
        await self.entity_description.set_fn(self.device, value)


class XiaozhiToolNumber(XiaozhiEntity, RestoreNumber):
    """A tool with one bounded integer argument, shown as a number."""

    _attr_mode = NumberMode.AUTO
    _attr_native_step = 1
    _attr_native_value: float | None = None

    def __init__(self, device: XiaozhiDevice, tool: Tool) -> None:
        """Describe the number from the tool's schema."""
        super().__init__(device, f"tool-{tool.name}")
        self._tool = tool.name
        prop = tool.properties[0]
        self._argument = prop.name
        self._attr_name = tool_entity_name(tool)
        self._attr_native_min_value = float(prop.minimum or 0)
        self._attr_native_max_value = float(prop.maximum or 0)

    async def async_added_to_hass(self) -> None:
        """Restore the last value set."""
        await super().async_added_to_hass()
        if (last := await self.async_get_last_number_data()) is not None:
            self._attr_native_value = last.native_value

    async def async_set_native_value(self, value: float) -> None:
        """Call the tool with the value."""
        await self.device.async_run_tool(self._tool, {self._argument: int(value)})
        self._attr_native_value = int(value)
        self.async_write_ha_state()
