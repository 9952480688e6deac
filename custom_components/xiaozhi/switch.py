"""Switches: tools with one boolean argument (state assumed)."""

from __future__ import annotations

from functools import partial
from typing import Any

from homeassistant.components.switch import SwitchEntity
from homeassistant.const import STATE_ON
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.restore_state import RestoreEntity

from .device import XiaozhiConfigEntry, XiaozhiDevice
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    async_follow_device,
    generic_tools,
    tool_entity_name,
)
from .protocol import Tool

PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add switches for boolean tools, now and later."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return {
            f"tool-{tool.name}": partial(XiaozhiToolSwitch, device, tool)
            for tool in generic_tools(device, "switch", frozenset())
        }

    async_follow_device(hass, entry, async_add_entities, wanted)


class XiaozhiToolSwitch(XiaozhiEntity, SwitchEntity, RestoreEntity):
    """A tool with one boolean argument; the device does not report it back."""

    _attr_assumed_state = True
    _attr_is_on: bool | None = None

    def __init__(self, device: XiaozhiDevice, tool: Tool) -> None:
        """Name the switch after its tool."""
        super().__init__(device, f"tool-{tool.name}")
        self._tool = tool.name
        self._argument = tool.properties[0].name
        self._attr_name = tool_entity_name(tool)

    async def async_added_to_hass(self) -> None:
        """Restore the last state set."""
        await super().async_added_to_hass()
        if (last := await self.async_get_last_state()) is not None:
            self._attr_is_on = last.state == STATE_ON

    async def _set(self, on: bool) -> None:
        await self.device.async_run_tool(self._tool, {self._argument: on})
        self._attr_is_on = on
        self.async_write_ha_state()

    async def async_turn_on(self, **kwargs: Any) -> None:
        """Call the tool with true."""
        await self._set(True)

    async def async_turn_off(self, **kwargs: Any) -> None:
        """Call the tool with false."""
        await self._set(False)
