"""Buttons: restart, take a photo, refresh the screen picture, no-argument tools."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import override

from homeassistant.components.button import (
    ButtonDeviceClass,
    ButtonEntity,
    ButtonEntityDescription,
)
from homeassistant.const import EntityCategory
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
from .protocol.firmware import PHOTO_TOOL, REBOOT_TOOL, SNAPSHOT_TOOL
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1


@dataclass(frozen=True, kw_only=True)
class XiaozhiButtonEntityDescription(
    XiaozhiToolEntityDescription, ButtonEntityDescription
):
    """A button backed by a tool."""

    press_fn: Callable[[DeviceCommands], Awaitable[None]]


BUTTONS = (
    XiaozhiButtonEntityDescription(
        key="reboot",
        translation_key="reboot",
        tool=REBOOT_TOOL,
        device_class=ButtonDeviceClass.RESTART,
        entity_category=EntityCategory.CONFIG,
        press_fn=lambda commands: commands.async_reboot(),
    ),
    XiaozhiButtonEntityDescription(
        key="take_photo",
        translation_key="take_photo",
        tool=PHOTO_TOOL,
        press_fn=lambda commands: commands.async_take_photo(),
    ),
    XiaozhiButtonEntityDescription(
        key="refresh_screen",
        translation_key="refresh_screen",
        tool=SNAPSHOT_TOOL,
        entity_category=EntityCategory.DIAGNOSTIC,
        press_fn=lambda commands: commands.async_refresh_screen(),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add buttons for what the device offers, now and later."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(
            runtime, BUTTONS, XiaozhiButton, ("button", XiaozhiToolButton)
        )

    async_follow_device(entry, async_add_entities, wanted)


class XiaozhiButton(XiaozhiEntity, ButtonEntity):
    """A button with its own meaning."""

    entity_description: XiaozhiButtonEntityDescription

    def __init__(
        self, runtime: XiaozhiRuntime, description: XiaozhiButtonEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(runtime, description.key, description)

    @override
    async def async_press(self) -> None:
        """Run the button's action on the device."""
        await self.entity_description.press_fn(self.runtime.commands)


class XiaozhiToolButton(XiaozhiToolEntity, ButtonEntity):
    """A tool without arguments, shown as a button."""

    @override
    async def async_press(self) -> None:
        """Call the tool."""
        await self.runtime.commands.async_call_tool(self.tool.name)
