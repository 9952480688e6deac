"""Numbers: volume, screen brightness and one-integer tools."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import override

from homeassistant.components.number import (
    NumberEntity,
    NumberEntityDescription,
    NumberMode,
    RestoreNumber,
)
from homeassistant.const import PERCENTAGE
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .commands import DeviceCommands
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    XiaozhiToolEntity,
    XiaozhiToolEntityDescription,
    async_follow_device,
    tool_entity_factories,
)
from .entry_data import XiaozhiEntryData
from .protocol import Tool
from .protocol.firmware import BRIGHTNESS_TOOL, VOLUME_TOOL
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1


@dataclass(frozen=True, kw_only=True)
class XiaozhiNumberEntityDescription(
    XiaozhiToolEntityDescription, NumberEntityDescription
):
    """A number backed by a tool and a status value."""

    value_fn: Callable[[XiaozhiEntryData], int | None]
    set_fn: Callable[[DeviceCommands, int], Awaitable[None]]


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
        value_fn=lambda data: data.status.volume,
        set_fn=lambda commands, value: commands.async_set_volume(value),
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
        value_fn=lambda data: data.status.brightness,
        set_fn=lambda commands, value: commands.async_set_brightness(value),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add numbers for what the device offers, now and later."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(
            runtime, NUMBERS, XiaozhiNumber, ("number", XiaozhiToolNumber)
        )

    async_follow_device(entry, async_add_entities, wanted)


class XiaozhiNumber(XiaozhiEntity, NumberEntity):
    """A number whose value the device reports in its status."""

    entity_description: XiaozhiNumberEntityDescription

    def __init__(
        self, runtime: XiaozhiRuntime, description: XiaozhiNumberEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(runtime, description.key, description)

    @property
    @override
    def native_value(self) -> int | None:
        """Return the value the device reported."""
        return self.entity_description.value_fn(self.entry_data)

    @override
    async def async_set_native_value(self, value: float) -> None:
        """Set the value on the device."""
        await self.entity_description.set_fn(self.runtime.commands, int(value))


class XiaozhiToolNumber(XiaozhiToolEntity, RestoreNumber):
    """A tool with one bounded integer argument, shown as a number."""

    _attr_mode = NumberMode.AUTO
    _attr_native_step = 1
    _attr_native_value: float | None = None

    @override
    def apply_tool(self, tool: Tool) -> None:
        """Take the argument and its range from the tool's schema."""
        super().apply_tool(tool)
        prop = tool.properties[0]
        self._argument = prop.name
        self._attr_native_min_value = float(prop.minimum or 0)
        self._attr_native_max_value = float(prop.maximum or 0)

    @override
    async def async_added_to_hass(self) -> None:
        """Restore the last value set."""
        await super().async_added_to_hass()
        if (last := await self.async_get_last_number_data()) is not None:
            self._attr_native_value = last.native_value

    @override
    async def async_set_native_value(self, value: float) -> None:
        """Call the tool with the value."""
        await self.runtime.commands.async_call_tool(
            self.tool.name, {self._argument: int(value)}
        )
        self._attr_native_value = int(value)
        self.async_write_ha_state()
