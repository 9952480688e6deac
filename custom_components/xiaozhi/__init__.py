"""The XiaoZhi integration: Home Assistant as the server of xiaozhi-esp32 devices."""

from homeassistant.const import EVENT_HOMEASSISTANT_STOP, Platform
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import config_validation as cv
from homeassistant.helpers.typing import ConfigType

from .const import DOMAIN
from .data import DATA_KEY, XiaozhiData
from .endpoints import DeviceEndpoints
from .entry_data import device_store
from .http import DeviceUploads, async_setup_http
from .identity import async_check_bound, async_forget
from .manager import XiaozhiConfigEntry, XiaozhiManager
from .pairing import PairingManager
from .services import async_setup_services

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)

PLATFORMS = [
    Platform.ASSIST_SATELLITE,
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.IMAGE,
    Platform.LIGHT,
    Platform.NOTIFY,
    Platform.NUMBER,
    Platform.SELECT,
    Platform.SENSOR,
    Platform.SWITCH,
]


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Open the device endpoints and register the actions."""
    views = async_setup_http(hass)
    endpoints = DeviceEndpoints(hass, lambda base, mac: DeviceUploads(base, views, mac))
    data = hass.data[DATA_KEY] = XiaozhiData(
        pairing=PairingManager(hass), endpoints=endpoints
    )

    async def _stop(_event: Event) -> None:
        data.pairing.shutdown()
        await endpoints.async_stop()

    hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop)
    await endpoints.async_start()
    async_setup_services(hass)
    return True


async def async_setup_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Make a paired device reachable, with its last known tools and state."""
    manager = XiaozhiManager(hass, entry)
    await manager.async_setup()
    entry.runtime_data = manager
    async_check_bound(hass, entry)

    async def _stop(_event: Event) -> None:
        await manager.async_shutdown()

    entry.async_on_unload(hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop))
    entry.async_on_unload(entry.add_update_listener(_async_entry_updated))
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    return True


async def _async_entry_updated(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Apply new options to the live link."""
    entry.runtime_data.async_apply_options()


async def async_unload_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Remove the device's entities, then close its link."""
    if unload_ok := await hass.config_entries.async_unload_platforms(entry, PLATFORMS):
        await entry.runtime_data.async_shutdown()
    return unload_ok


async def async_remove_entry(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Forget what was stored and raised about a removed device."""
    await device_store(hass, entry.entry_id).async_remove()
    async_forget(hass, entry)
