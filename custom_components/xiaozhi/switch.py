"""Switches: tools with one boolean argument (state assumed)."""

from typing import Any, override

from homeassistant.components.switch import SwitchEntity
from homeassistant.const import STATE_OFF, STATE_ON
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.restore_state import RestoreEntity

from .entity import (
    EntityFactory,
    XiaozhiToolEntity,
    async_follow_device,
    tool_entity_factories,
)
from .protocol import Tool
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add switches for boolean tools, now and later."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(runtime, (), None, ("switch", XiaozhiToolSwitch))

    async_follow_device(entry, async_add_entities, wanted)


class XiaozhiToolSwitch(XiaozhiToolEntity, SwitchEntity, RestoreEntity):
    """A tool with one boolean argument; the device does not report it back."""

    _attr_assumed_state = True
    _attr_is_on: bool | None = None

    @override
    def apply_tool(self, tool: Tool) -> None:
        """Take the argument's name from the tool's schema."""
        super().apply_tool(tool)
        self._argument = tool.properties[0].name

    @override
    async def async_added_to_hass(self) -> None:
        """Restore the last state set."""
        await super().async_added_to_hass()
        # Only a state someone set: unknown stays unknown until it is set.
        if (last := await self.async_get_last_state()) is not None and last.state in (
            STATE_ON,
            STATE_OFF,
        ):
            self._attr_is_on = last.state == STATE_ON

    async def _set(self, on: bool) -> None:
        await self.runtime.commands.async_call_tool(
            self.tool.name, {self._argument: on}
        )
        self._attr_is_on = on
        self.async_write_ha_state()

    @override
    async def async_turn_on(self, **kwargs: Any) -> None:
        """Call the tool with true."""
        await self._set(True)

    @override
    async def async_turn_off(self, **kwargs: Any) -> None:
        """Call the tool with false."""
        await self._set(False)
