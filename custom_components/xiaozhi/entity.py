"""Base entities and the machinery that follows the device's tool list."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
import re
from typing import Literal, override

from homeassistant.core import CALLBACK_TYPE, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import Entity, EntityDescription
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN
from .protocol import Tool
from .protocol.firmware import PASSIVE_TOOLS
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

type EntityFactory = Callable[[], Entity]
type GenericKind = Literal["button", "number", "switch", "light"]

RGB_CHANNELS = ("r", "g", "b")
MAX_NAME_FROM_DESCRIPTION = 32


class XiaozhiEntity(Entity):
    """An entity of a XiaoZhi device."""

    _attr_has_entity_name = True
    _attr_should_poll = False

    def __init__(
        self,
        runtime: XiaozhiRuntime,
        key: str,
        description: EntityDescription | None = None,
    ) -> None:
        """Attach the entity to its device; ``key`` makes its unique ID."""
        self.runtime = runtime
        self.entry_data = runtime.entry_data
        if description is not None:
            self.entity_description = description
        self._attr_unique_id = f"{runtime.entry_data.mac}-{key}"
        self._attr_device_info = DeviceInfo(
            identifiers={(DOMAIN, runtime.entry_data.mac)}
        )

    @property
    @override
    def available(self) -> bool:
        """Return whether the device's state can be shown (see the runtime)."""
        return self.runtime.available

    @override
    async def async_added_to_hass(self) -> None:
        """Follow the device's state."""
        await super().async_added_to_hass()
        self.async_on_remove(self.entry_data.async_subscribe_state(self._handle_update))

    @callback
    def _handle_update(self) -> None:
        self.async_write_ha_state()


_NAME_SPLIT = re.compile(r"[._\s]+")
_SENTENCE_END = re.compile(r"[.!?;\n\u3002\uff01\uff1f\uff1b]")  # and CJK ones


_LEADING_VERB = re.compile(
    r"^(sets?|switch(es)?|turns?|changes?|controls?|adjusts?|toggles?)\s+(the\s+)?",
    re.IGNORECASE,
)
_ON_OFF = re.compile(r"\s+(on\s+or\s+off|on/off)$", re.IGNORECASE)


def tool_entity_name(tool: Tool) -> str:
    """Return a readable name for a tool.

    A short description is what the board's author called it, often in the
    user's language: ``"Set the motor speed."`` -> Motor speed. A long one is
    a sentence for the agent, so the tool name is used instead:
    ``self.dog.go_forward`` -> Dog go forward.
    """
    first = _SENTENCE_END.split(tool.description.strip(), maxsplit=1)[0].strip()
    first = _ON_OFF.sub("", _LEADING_VERB.sub("", first))
    if 0 < len(first) <= MAX_NAME_FROM_DESCRIPTION:
        return first[:1].upper() + first[1:]
    parts = _NAME_SPLIT.split(tool.name.removeprefix("self."))
    text = " ".join(word for word in parts if word) or tool.name
    return text[:1].upper() + text[1:]


def generic_kind(tool: Tool) -> GenericKind | None:
    """Return the platform a tool maps to by its schema alone, if any.

    No argument makes a button, exactly one bounded integer a number, exactly
    one boolean a switch, and ``r``, ``g``, ``b`` integers up to 255 a light.
    """
    props = tool.properties
    if not props:
        return "button"
    if tuple(prop.name for prop in props) == RGB_CHANNELS and all(
        prop.type == "integer" and prop.maximum == 255 for prop in props
    ):
        return "light"
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


class XiaozhiToolEntity(XiaozhiEntity):
    """An entity made from a tool's schema; it follows the tool as it changes."""

    tool: Tool

    def __init__(self, runtime: XiaozhiRuntime, tool: Tool) -> None:
        """Describe the entity from the tool."""
        super().__init__(runtime, f"tool-{tool.name}")
        self.apply_tool(tool)

    def apply_tool(self, tool: Tool) -> None:
        """Take the tool's name and schema (subclasses read their arguments)."""
        self.tool = tool
        self._attr_name = tool_entity_name(tool)

    @callback
    def async_update_tool(self, tool: Tool) -> None:
        """Take a new version of the tool (a firmware update changed it)."""
        self.apply_tool(tool)
        self.async_write_ha_state()


@dataclass(frozen=True, kw_only=True)
class XiaozhiToolEntityDescription(EntityDescription):
    """A description of an entity tied to one device tool."""

    tool: str


def tool_entity_factories[DescriptionT: XiaozhiToolEntityDescription](
    runtime: XiaozhiRuntime,
    descriptions: Iterable[DescriptionT],
    described: Callable[[XiaozhiRuntime, DescriptionT], Entity] | None,
    generic: tuple[GenericKind, Callable[[XiaozhiRuntime, Tool], Entity]] | None = None,
) -> dict[str, EntityFactory]:
    """Return factories for the described tools the device has, then generic ones.

    ``generic`` is the platform kind and entity class for the other tools that
    map to this platform by their schema alone (see :func:`generic_kind`).
    Tools with their own description, and tools that only read or configure
    the device, get no generic entity.
    """
    tools = runtime.entry_data.tools
    found: dict[str, EntityFactory] = {}
    if described is not None:
        for description in descriptions:
            if description.tool in tools:
                found[description.key] = partial(described, runtime, description)
    if generic is not None:
        kind, entity_class = generic
        taken = {description.tool for description in descriptions} | PASSIVE_TOOLS
        for tool in tools.values():
            if tool.name not in taken and generic_kind(tool) == kind:
                found[f"tool-{tool.name}"] = partial(entity_class, runtime, tool)
    return found


@callback
def async_follow_device(
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
    wanted: Callable[[XiaozhiRuntime], dict[str, EntityFactory]],
    *,
    follow: Literal["tools", "status"] = "tools",
    sticky: Callable[[str], bool] = lambda _key: False,
) -> None:
    """Keep a platform's entities in step with what the device offers.

    ``wanted`` returns a factory per entity key for what the device offers
    now; it runs when the tool list (or, with ``follow="status"``, the status)
    changes. New keys are added; entities made from a tool take the tool's
    new version; keys that vanish are removed from the entity registry,
    except ``sticky`` ones (values the status may omit for a while).
    """
    runtime = entry.runtime_data
    data = runtime.entry_data
    current: dict[str, Entity] = {}

    @callback
    def _sync() -> None:
        want = wanted(runtime)
        new = {key: factory() for key, factory in want.items() if key not in current}
        for key, entity in current.items():
            if (
                key in want
                and isinstance(entity, XiaozhiToolEntity)
                and (tool := data.tools.get(entity.tool.name)) is not None
                and tool != entity.tool
                and entity.hass is not None
            ):
                entity.async_update_tool(tool)
        if new:
            current.update(new)
            async_add_entities(new.values())
        gone = [key for key in current if key not in want and not sticky(key)]
        if not gone:
            return
        registry = er.async_get(runtime.hass)
        for key in gone:
            entity = current.pop(key)
            if entity.registry_entry is not None:
                registry.async_remove(entity.registry_entry.entity_id)

    _sync()
    subscribe: Callable[[CALLBACK_TYPE], CALLBACK_TYPE] = (
        data.async_subscribe_tools if follow == "tools" else data.async_subscribe_status
    )
    entry.async_on_unload(subscribe(_sync))
