"""Buttons: restart, take a photo, refresh the screen picture, no-argument tools."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from homeassistant.components.button import ButtonEntity, ButtonEntityDescription
from homeassistant.components.button.const import ButtonDeviceClass
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import PHOTO_TOOL, REBOOT_TOOL, SNAPSHOT_TOOL
from .device import XiaozhiConfigEntry, XiaozhiDevice
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    async_follow_device,
    tool_entity_factories,
    tool_entity_name,
)
from .protocol import Tool

PARALLEL_UPDATES = 1

PHOTO_QUESTION = "Photo requested from Home Assistant"


async def _take_photo(device: XiaozhiDevice) -> None:
    await device.async_run_tool(PHOTO_TOOL, {"question": PHOTO_QUESTION})


async def _reboot(device: XiaozhiDevice) -> None:
    await device.async_run_tool(REBOOT_TOOL)


@dataclass(frozen=True, kw_only=True)
class XiaozhiButtonEntityDescription(ButtonEntityDescription):
    """A button backed by a tool."""

    tool: str
    press_fn: Callable[[XiaozhiDevice], Awaitable[None]]


BUTTONS = (
    XiaozhiButtonEntityDescription(
        key="reboot",
        translation_key="reboot",
        tool=REBOOT_TOOL,
        device_class=ButtonDeviceClass.RESTART,
        entity_category=EntityCategory.CONFIG,
        press_fn=_reboot,
    ),
    XiaozhiButtonEntityDescription(
        key="take_photo",
        translation_key="take_photo",
        tool=PHOTO_TOOL,
        press_fn=_take_photo,
    ),
    XiaozhiButtonEntityDescription(
        key="refresh_screen",
        translation_key="refresh_screen",
        tool=SNAPSHOT_TOOL,
        entity_category=EntityCategory.DIAGNOSTIC,
        press_fn=lambda device: device.async_refresh_screen(),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add buttons for what the device offers, now and later."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return tool_entity_factories(
            device, BUTTONS, XiaozhiButton, ("button", XiaozhiToolButton)
        )

    async_follow_device(hass, entry, async_add_entities, wanted)


class XiaozhiButton(XiaozhiEntity, ButtonEntity):
    """A button with its own meaning."""

    entity_description: XiaozhiButtonEntityDescription

    def __init__(
        self, device: XiaozhiDevice, description: XiaozhiButtonEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(device, description.key, description)

    async def async_press(self) -> None:
        """Run the button's action on the device."""
        await self.entity_description.press_fn(self.device)


class XiaozhiToolButton(XiaozhiEntity, ButtonEntity):
    """A tool without arguments, shown as a button."""

    def __init__(self, device: XiaozhiDevice, tool: Tool) -> None:
        """Name the button after its tool."""
        super().__init__(device, f"tool-{tool.name}")
        self._tool = tool.name
        self._attr_name = tool_entity_name(tool)

    async def async_press(self) -> None:
        """Call the tool."""
        await self.device.async_run_tool(self._tool)
