"""Base entity and the machinery that follows the device's tool list."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
import re
from typing import Any, Protocol

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import Entity, EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN, PASSIVE_TOOLS
from .device import XiaozhiConfigEntry, XiaozhiDevice
from .protocol import Tool

type EntityFactory = Callable[[], Entity]


class XiaozhiEntity(Entity):
    """An entity of a XiaoZhi device."""

    _attr_has_entity_name = True
    _attr_should_poll = False

    def __init__(
        self,
        device: XiaozhiDevice,
        key: str,
        description: EntityDescription | None = None,
    ) -> None:
        """Attach the entity to its device; ``key`` makes its unique ID."""
        self.device = device
        if description is not None:
            self.entity_description = description
        self._attr_unique_id = f"{device.mac}-{key}"
        self._attr_device_info = DeviceInfo(identifiers={(DOMAIN, device.mac)})

    @property
    def available(self) -> bool:
        """Return False while a kept-alive device is away.

        Without keep-alive the device connects only when it is used, so its
        entities keep showing the last known state in between.
        """
        return self.device.connected or not self.device.keepalive

    async def async_added_to_hass(self) -> None:
        """Follow the device's state."""
        await super().async_added_to_hass()
        self.async_on_remove(self.device.async_add_listener(self._handle_update))

    @callback
    def _handle_update(self) -> None:
        self.async_write_ha_state()


def status_value(status: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """Return the value at ``path`` in a device status, or None."""
    node: Any = status
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


_NAME_SPLIT = re.compile(r"[._\s]+")


def tool_entity_name(tool: Tool) -> str:
    """Return a readable name for a tool: ``self.dog.go_forward`` -> Dog go forward."""
    parts = _NAME_SPLIT.split(tool.name.removeprefix("self."))
    words = [word for word in parts if word]
    text = " ".join(words) or tool.name
    return text[:1].upper() + text[1:]


def generic_tools(
    device: XiaozhiDevice, kind: str, described: frozenset[str]
) -> list[Tool]:
    """Return the tools that map to ``kind`` by their schema alone.

    No argument makes a button, exactly one bounded integer a number and
    exactly one boolean a switch. Tools with their own entities, and tools
    that only read or configure the device, are left out.
    """
    found: list[Tool] = []
    for tool in device.tools.values():
        if tool.name in described or tool.name in PASSIVE_TOOLS:
            continue
        if generic_kind(tool) == kind:
            found.append(tool)
    return found


def generic_kind(tool: Tool) -> str | None:
    """Return the platform a tool maps to by its schema, if any."""
    props = tool.properties
    if not props:
        return "button"
    if len(props) != 1:
        return None
    prop = props[0]
    if (
        prop.type == "integer"
        and prop.minimum is not None
        and prop.maximum is not None
        and prop.maximum > prop.minimum
    ):
        return "number"
    if prop.type == "boolean":
        return "switch"
    return None


class ToolDescription(Protocol):
    """An entity description tied to one device tool."""

    @property
    def key(self) -> str:
        """Return the key that makes the entity's unique ID."""

    @property
    def tool(self) -> str:
        """Return the tool the entity needs."""


def tool_entity_factories[DescriptionT: ToolDescription](
    device: XiaozhiDevice,
    descriptions: Iterable[DescriptionT],
    described: Callable[[XiaozhiDevice, DescriptionT], Entity],
    generic: tuple[str, Callable[[XiaozhiDevice, Tool], Entity]] | None = None,
) -> dict[str, EntityFactory]:
    """Return factories for the described tools the device has, then generic ones.

    ``generic`` is the platform kind and entity class for the other tools that
    map to this platform by their schema alone (see :func:`generic_kind`).
    """
    found: dict[str, EntityFactory] = {
        description.key: partial(described, device, description)
        for description in descriptions
        if description.tool in device.tools
    }
    if generic is not None:
        kind, entity_class = generic
        taken = frozenset(description.tool for description in descriptions)
        for tool in generic_tools(device, kind, taken):
            found[f"tool-{tool.name}"] = partial(entity_class, device, tool)
    return found


@callback
def async_follow_device(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
    wanted: Callable[[XiaozhiDevice], dict[str, EntityFactory]],
    *,
    sticky: Callable[[str], bool] = lambda _key: False,
) -> None:
    """Keep a platform's entities in step with what the device offers.

    ``wanted`` returns a factory per entity key for what the device offers
    now. New keys are added; keys that vanish are removed from the entity
    registry, except ``sticky`` ones (values the status may omit for a while).
    """
    device = entry.runtime_data
    current: dict[str, Entity] = {}

    @callback
    def _sync() -> None:
        want = wanted(device)
        new = {key: factory() for key, factory in want.items() if key not in current}
        if new:
            current.update(new)
            async_add_entities(new.values())
        gone = [key for key in current if key not in want and not sticky(key)]
        if not gone:
            return
        registry = er.async_get(hass)
        for key in gone:
            entity = current.pop(key)
            if entity.registry_entry is not None:
                registry.async_remove(entity.registry_entry.entity_id)
            elif entity.hass is not None:  # pragma: no cover - never registered
                hass.async_create_task(entity.async_remove())

    _sync()
    entry.async_on_unload(device.async_add_listener(_sync))
