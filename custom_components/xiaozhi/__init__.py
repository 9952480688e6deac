"""The XiaoZhi integration: Home Assistant as the server of xiaozhi-esp32 devices."""

from __future__ import annotations

from homeassistant.const import EVENT_HOMEASSISTANT_STOP
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import config_validation as cv
from homeassistant.helpers.typing import ConfigType

from .const import DOMAIN
from .device import XiaozhiConfigEntry, XiaozhiDevice
from .http import DATA_KEY, async_setup_http
from .protocol import CloseReason

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Open the device endpoints as soon as the integration loads."""
    async_setup_http(hass)
    return True


async def async_setup_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Make a paired device reachable."""
    data = async_setup_http(hass)
    device = XiaozhiDevice(hass, entry)
    entry.runtime_data = device
    data.devices[device.mac] = device

    async def _stop(_event: Event) -> None:
        await device.async_disconnect(CloseReason.SERVER_CLOSED)

    entry.async_on_unload(hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop))
    entry.async_on_unload(entry.add_update_listener(_async_entry_updated))
    return True


async def _async_entry_updated(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Apply new options to the live link."""
    entry.runtime_data.apply_options()


async def async_unload_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Close the device's link."""
    device = entry.runtime_data
    devices = hass.data[DATA_KEY].devices
    if devices.get(device.mac) is device:
        del devices[device.mac]
    await device.async_disconnect(CloseReason.SERVER_CLOSED)
    return True
