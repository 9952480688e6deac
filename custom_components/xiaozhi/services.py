"""Actions: call any device tool, and refresh a device's tools and status."""

from typing import Any

from homeassistant.components import media_source
from homeassistant.components.media_player import async_process_play_media_url
from homeassistant.const import ATTR_DEVICE_ID
from homeassistant.core import (
    HomeAssistant,
    ServiceCall,
    ServiceResponse,
    SupportsResponse,
    callback,
)
from homeassistant.exceptions import ServiceValidationError
from homeassistant.helpers import config_validation as cv, service
import probatio

from .const import DOMAIN
from .firmware.prepare import async_prepare_own
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

SERVICE_CALL_TOOL = "call_tool"
SERVICE_REFRESH = "refresh"
SERVICE_INSTALL_FIRMWARE = "install_firmware"
ATTR_FIRMWARE = "firmware"
ATTR_TOOL = "tool"
ATTR_ARGUMENTS = "arguments"

_DEVICES = probatio.All(cv.ensure_list, [cv.string], probatio.Length(min=1))
CALL_TOOL_SCHEMA = probatio.Schema(
    {
        probatio.Required(ATTR_DEVICE_ID): _DEVICES,
        probatio.Required(ATTR_TOOL): cv.string,
        probatio.Optional(ATTR_ARGUMENTS, default=dict): probatio.Any(None, dict),
    }
)
REFRESH_SCHEMA = probatio.Schema({probatio.Required(ATTR_DEVICE_ID): _DEVICES})
INSTALL_FIRMWARE_SCHEMA = probatio.Schema(
    {
        probatio.Required(ATTR_DEVICE_ID): _DEVICES,
        probatio.Required(ATTR_FIRMWARE): cv.string,
    }
)


def _runtimes(call: ServiceCall) -> list[XiaozhiRuntime]:
    """Return the runtimes of the targeted devices (core's checks and errors)."""
    runtimes: list[XiaozhiRuntime] = []
    for device_id in call.data[ATTR_DEVICE_ID]:
        entry: XiaozhiConfigEntry
        _device, entry = service.async_get_device_and_config_entry(
            call.hass, DOMAIN, device_id
        )
        runtimes.append(entry.runtime_data)
    return runtimes


async def _async_call_tool(call: ServiceCall) -> ServiceResponse:
    runtimes = _runtimes(call)
    if len(runtimes) != 1:
        raise ServiceValidationError(
            translation_domain=DOMAIN, translation_key="one_device_only"
        )
    arguments: dict[str, Any] = call.data.get(ATTR_ARGUMENTS) or {}
    result = await runtimes[0].commands.async_call_tool(
        call.data[ATTR_TOOL], arguments, check=False
    )
    return {
        "is_error": result.is_error,
        "text": result.text,
        "json": result.json,
        "images": [
            {"mime_type": image.mime_type, "data": image.data}
            for image in result.images
        ],
    }


async def _async_install_firmware(call: ServiceCall) -> None:
    """Install a firmware file of the user's own (a URL or a media item).

    It gets the checks a release gets, and goes through the device's one
    installer: the update entity shows its progress, and a second install
    waits for none (it is refused). The device must be connected, or a newer
    version waits for its next boot.
    """
    runtimes = _runtimes(call)
    if len(runtimes) != 1:
        raise ServiceValidationError(
            translation_domain=DOMAIN, translation_key="one_device_only"
        )
    runtime = runtimes[0]
    hass = call.hass
    url = call.data[ATTR_FIRMWARE]
    if media_source.is_media_source_id(url):
        url = (await media_source.async_resolve_media(hass, url, None)).url
    url = async_process_play_media_url(hass, url)
    await runtime.async_install_firmware(
        lambda: async_prepare_own(hass, url, runtime.entry_data.hardware, runtime.name)
    )


async def _async_refresh(call: ServiceCall) -> None:
    for runtime in _runtimes(call):
        await runtime.commands.async_refresh()


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
    hass.services.async_register(
        DOMAIN,
        SERVICE_INSTALL_FIRMWARE,
        _async_install_firmware,
        schema=INSTALL_FIRMWARE_SCHEMA,
    )
