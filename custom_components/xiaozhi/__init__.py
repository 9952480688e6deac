"""The XiaoZhi integration: Home Assistant as the server of xiaozhi-esp32 devices."""

from __future__ import annotations

from homeassistant.const import EVENT_HOMEASSISTANT_STOP, Platform
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import config_validation as cv
from homeassistant.helpers.typing import ConfigType

from .const import DOMAIN
from .device import XiaozhiConfigEntry, XiaozhiDevice, async_remove_store
from .http import DATA_KEY, async_setup_http
from .protocol import CloseReason
from .services import async_setup_services

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)

PLATFORMS = [
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.IMAGE,
    Platform.NOTIFY,
    Platform.NUMBER,
    Platform.SELECT,
    Platform.SENSOR,
    Platform.SWITCH,
]


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Open the device endpoints and register the actions."""
    async_setup_http(hass)
    async_setup_services(hass)
    return True


async def async_setup_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Make a paired device reachable, with its last known tools and state."""
    data = async_setup_http(hass)
    device = XiaozhiDevice(hass, entry)
    await device.async_load()
    entry.runtime_data = device
    data.add_device(device)

    async def _stop(_event: Event) -> None:
        await device.async_disconnect(CloseReason.SERVER_CLOSED)

    entry.async_on_unload(hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop))
    entry.async_on_unload(entry.add_update_listener(_async_entry_updated))
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    return True


async def _async_entry_updated(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Apply new options to the live link."""
    entry.runtime_data.apply_options()


async def async_unload_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Close the device's link and remove its entities."""
    device = entry.runtime_data
    hass.data[DATA_KEY].remove_device(device)
    await device.async_disconnect(CloseReason.SERVER_CLOSED)
    await device.async_save()
    return await hass.config_entries.async_unload_platforms(entry, PLATFORMS)


async def async_remove_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Forget what was stored about a removed device."""
    await async_remove_store(hass, entry.entry_id)
