"""Selects: the screen theme."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from homeassistant.components.select import SelectEntity, SelectEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import THEME_TOOL
from .device import XiaozhiConfigEntry, XiaozhiDevice
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    async_follow_device,
    status_value,
    tool_entity_factories,
)

PARALLEL_UPDATES = 1


@dataclass(frozen=True, kw_only=True)
class XiaozhiSelectEntityDescription(SelectEntityDescription):
    """A select backed by a tool and a status value."""

    tool: str
    value_fn: Callable[[XiaozhiDevice], str | None]
    set_fn: Callable[[XiaozhiDevice, str], Awaitable[None]]


SELECTS = (
    XiaozhiSelectEntityDescription(
        key="theme",
        translation_key="theme",
        tool=THEME_TOOL,
        options=["light", "dark"],
        entity_category=EntityCategory.CONFIG,
        value_fn=lambda device: status_value(device.status, ("screen", "theme")),
        set_fn=lambda device, option: device.async_set_value(
            THEME_TOOL, {"theme": option}, ("screen", "theme")
        ),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add selects for what the device offers."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return tool_entity_factories(device, SELECTS, XiaozhiSelect)

    async_follow_device(hass, entry, async_add_entities, wanted)


class XiaozhiSelect(XiaozhiEntity, SelectEntity):
    """A select whose option the device reports in its status."""

    entity_description: XiaozhiSelectEntityDescription

    def __init__(
        self, device: XiaozhiDevice, description: XiaozhiSelectEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(device, description.key, description)

    @property
    def current_option(self) -> str | None:
        """Return the option the device reported."""
        value = self.entity_description.value_fn(self.device)
        return value if value in self.options else None

    async def async_select_option(self, option: str) -> None:
        """Apply the option on the device."""
        await self.entity_description.set_fn(self.device, option)
