"""Selects: the screen theme."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import override

from homeassistant.components.assist_pipeline import (
    AssistPipelineSelect,
    VadSensitivitySelect,
)
from homeassistant.components.select import SelectEntity, SelectEntityDescription
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .commands import DeviceCommands
from .const import DOMAIN
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    XiaozhiToolEntityDescription,
    async_follow_device,
    tool_entity_factories,
)
from .entry_data import XiaozhiEntryData
from .protocol.firmware import THEME_TOOL
from .protocol.status import THEMES
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1


@dataclass(frozen=True, kw_only=True)
class XiaozhiSelectEntityDescription(
    XiaozhiToolEntityDescription, SelectEntityDescription
):
    """A select backed by a tool and a status value."""

    value_fn: Callable[[XiaozhiEntryData], str | None]
    set_fn: Callable[[DeviceCommands, str], Awaitable[None]]


SELECTS = (
    XiaozhiSelectEntityDescription(
        key="theme",
        translation_key="theme",
        tool=THEME_TOOL,
        options=list(THEMES),
        entity_category=EntityCategory.CONFIG,
        value_fn=lambda data: data.status.theme,
        set_fn=lambda commands, option: commands.async_set_theme(option),
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the voice selects, and selects for what the device offers."""
    runtime = entry.runtime_data
    async_add_entities(
        [XiaozhiPipelineSelect(runtime), XiaozhiVadSensitivitySelect(runtime)]
    )

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(runtime, SELECTS, XiaozhiSelect)

    async_follow_device(entry, async_add_entities, wanted)


class XiaozhiSelect(XiaozhiEntity, SelectEntity):
    """A select whose option the device reports in its status."""

    entity_description: XiaozhiSelectEntityDescription

    def __init__(
        self, runtime: XiaozhiRuntime, description: XiaozhiSelectEntityDescription
    ) -> None:
        """Create the entity from its description."""
        super().__init__(runtime, description.key, description)

    @property
    @override
    def current_option(self) -> str | None:
        """Return the option the device reported."""
        return self.entity_description.value_fn(self.entry_data)

    @override
    async def async_select_option(self, option: str) -> None:
        """Apply the option on the device."""
        await self.entity_description.set_fn(self.runtime.commands, option)


class XiaozhiPipelineSelect(XiaozhiEntity, AssistPipelineSelect):
    """Which Assist pipeline answers the device.

    Its presence makes the device an Assist device (Voice assistants page).
    """

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the select; its unique ID is ``<mac>-pipeline``."""
        XiaozhiEntity.__init__(self, runtime, "pipeline")
        AssistPipelineSelect.__init__(
            self, runtime.hass, DOMAIN, runtime.entry_data.mac
        )

    @property
    @override
    def available(self) -> bool:
        """Return True: the choice can be made while the device is away."""
        return True


class XiaozhiVadSensitivitySelect(XiaozhiEntity, VadSensitivitySelect):
    """How long a pause ends what the user says."""

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the select; its unique ID is ``<mac>-vad_sensitivity``."""
        XiaozhiEntity.__init__(self, runtime, "vad_sensitivity")
        VadSensitivitySelect.__init__(self, runtime.hass, runtime.entry_data.mac)

    @property
    @override
    def available(self) -> bool:
        """Return True: the choice can be made while the device is away."""
        return True
