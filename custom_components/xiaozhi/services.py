"""Actions: call any device tool, and refresh a device's tools and status."""

from __future__ import annotations

from typing import Any

from homeassistant.const import ATTR_DEVICE_ID
from homeassistant.core import (
    HomeAssistant,
    ServiceCall,
    ServiceResponse,
    SupportsResponse,
    callback,
)
from homeassistant.exceptions import ServiceValidationError
from homeassistant.helpers import config_validation as cv, device_registry as dr
import probatio

from .const import DOMAIN
from .device import XiaozhiDevice
from .http import DATA_KEY

SERVICE_CALL_TOOL = "call_tool"
SERVICE_REFRESH = "refresh"
ATTR_TOOL = "tool"
ATTR_ARGUMENTS = "arguments"

CALL_TOOL_SCHEMA = probatio.Schema(
    {
        probatio.Required(ATTR_DEVICE_ID): cv.string,
        probatio.Required(ATTR_TOOL): cv.string,
        probatio.Optional(ATTR_ARGUMENTS, default=dict): probatio.Any(None, dict),
    }
)
REFRESH_SCHEMA = probatio.Schema({probatio.Required(ATTR_DEVICE_ID): cv.string})


def _device(hass: HomeAssistant, call: ServiceCall) -> XiaozhiDevice:
    """Return the runtime of the device an action names."""
    device_id: str = call.data[ATTR_DEVICE_ID]
    if (device := hass.data[DATA_KEY].by_device_id.get(device_id)) is not None:
        return device
    # Not a loaded XiaoZhi device: find out what it is, to say so.
    device_entry = dr.async_get(hass).async_get(device_id)
    if device_entry is not None:
        # A device belongs to one config entry; only the read-only stand-in
        # for a device id from before that rule can name several. Reading
        # ``config_entries`` of any other device is deprecated, and Home
        # Assistant walks the call stack on every read to report it (about
        # half a millisecond per action).
        entry_ids = (
            device_entry.config_entries
            if device_entry.is_composite_device
            else (device_entry.config_entry_id,)
        )
        for entry_id in entry_ids:
            entry = hass.config_entries.async_get_entry(entry_id)
            if entry is None or entry.domain != DOMAIN:
                continue
            raise ServiceValidationError(
                translation_domain=DOMAIN,
                translation_key="device_not_loaded",
                translation_placeholders={"name": entry.title},
            )
    raise ServiceValidationError(
        translation_domain=DOMAIN,
        translation_key="invalid_device",
        translation_placeholders={"device_id": device_id},
    )


async def _async_call_tool(call: ServiceCall) -> ServiceResponse:
    device = _device(call.hass, call)
    arguments: dict[str, Any] = call.data.get(ATTR_ARGUMENTS) or {}
    result = await device.async_call_tool(call.data[ATTR_TOOL], arguments)
    return {"is_error": result.is_error, "text": result.text, "json": result.json}


async def _async_refresh(call: ServiceCall) -> None:
    await _device(call.hass, call).async_refresh()


@callback
def async_setup_services(hass: HomeAssistant) -> None:
    """Register the integration's actions."""
    hass.services.async_register(
        DOMAIN,
        SERVICE_CALL_TOOL,
        _async_call_tool,
        schema=CALL_TOOL_SCHEMA,
        supports_response=SupportsResponse.OPTIONAL,
    )
    hass.services.async_register(
        DOMAIN, SERVICE_REFRESH, _async_refresh, schema=REFRESH_SCHEMA
    )
