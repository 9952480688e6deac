"""Lights: tools taking ``r``, ``g``, ``b`` (0-255), such as ``self.light.set_rgb``.

The device does not report the colour back, so the state is assumed and
restored across restarts. Brightness scales the colour sent to the device.
"""

import re
from typing import Any, override

from homeassistant.components.light import (
    ATTR_BRIGHTNESS,
    ATTR_RGB_COLOR,
    ColorMode,
    LightEntity,
)
from homeassistant.const import STATE_OFF, STATE_ON
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.restore_state import RestoreEntity

from .entity import (
    RGB_CHANNELS,
    EntityFactory,
    XiaozhiToolEntity,
    async_follow_device,
    tool_entity_factories,
    tool_entity_name,
)
from .protocol import Tool
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1

WHITE = (255, 255, 255)
_SETTER_SUFFIX = re.compile(r"\s+set\s+(rgb|colou?r)$", re.IGNORECASE)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add lights for RGB tools, now and later."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(runtime, (), None, ("light", XiaozhiToolLight))

    async_follow_device(entry, async_add_entities, wanted)


def scale(rgb: tuple[int, int, int], brightness: int) -> dict[str, int]:
    """Return the tool's arguments: the colour scaled by brightness (0-255)."""
    return {
        channel: round(value * brightness / 255)
        for channel, value in zip(RGB_CHANNELS, rgb, strict=True)
    }


class XiaozhiToolLight(XiaozhiToolEntity, LightEntity, RestoreEntity):
    """An RGB light driven by a tool; its state is assumed."""

    _attr_assumed_state = True
    _attr_color_mode = ColorMode.RGB
    _attr_supported_color_modes = {ColorMode.RGB}  # noqa: RUF012
    _attr_is_on: bool | None = None
    _attr_rgb_color: tuple[int, int, int] | None = None
    _attr_brightness: int | None = None

    @override
    def apply_tool(self, tool: Tool) -> None:
        """Name the light: ``self.light.set_rgb`` -> Light."""
        super().apply_tool(tool)
        name = tool_entity_name(tool)
        self._attr_name = _SETTER_SUFFIX.sub("", name) or name

    @override
    async def async_added_to_hass(self) -> None:
        """Restore the last colour and brightness set."""
        await super().async_added_to_hass()
        # Only a state someone set: unknown stays unknown until it is set.
        last = await self.async_get_last_state()
        if last is None or last.state not in (STATE_ON, STATE_OFF):
            return
        self._attr_is_on = last.state == STATE_ON
        rgb = last.attributes.get(ATTR_RGB_COLOR)
        if isinstance(rgb, (list, tuple)) and len(rgb) == 3:
            self._attr_rgb_color = (int(rgb[0]), int(rgb[1]), int(rgb[2]))
        if isinstance(brightness := last.attributes.get(ATTR_BRIGHTNESS), int):
            self._attr_brightness = brightness

    @override
    async def async_turn_on(self, **kwargs: Any) -> None:
        """Send the colour, scaled by the brightness."""
        rgb: tuple[int, int, int] = kwargs.get(
            ATTR_RGB_COLOR, self._attr_rgb_color or WHITE
        )
        brightness: int = kwargs.get(ATTR_BRIGHTNESS, self._attr_brightness or 255)
        await self.runtime.commands.async_call_tool(
            self.tool.name, scale(rgb, brightness)
        )
        self._attr_is_on = True
        self._attr_rgb_color = rgb
        self._attr_brightness = brightness
        self.async_write_ha_state()

    @override
    async def async_turn_off(self, **kwargs: Any) -> None:
        """Send black; colour and brightness are kept for the next turn on."""
        await self.runtime.commands.async_call_tool(self.tool.name, scale(WHITE, 0))
        self._attr_is_on = False
        self.async_write_ha_state()
