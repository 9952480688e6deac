"""The XiaoZhi integration: Home Assistant as the server of xiaozhi-esp32 devices.

Two kinds of config entries: one server entry (the settings every device
shares, and the MQTT + UDP endpoint they open), and one entry per paired
device, whose runtime is its link (``runtime.py``).
"""

from functools import partial
import shutil

from homeassistant.config_entries import SOURCE_SYSTEM, ConfigEntry
from homeassistant.const import EVENT_HOMEASSISTANT_STOP, Platform
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import config_validation as cv
from homeassistant.helpers.typing import ConfigType

from .const import DOMAIN
from .domain_data import DATA_KEY, XiaozhiDomainData
from .entry_data import device_store, pictures_dir
from .firmware.releases import ReleaseCoordinator
from .limits import async_clear_all
from .pairing.identity import async_check_bound, async_forget
from .pairing.manager import PairingManager
from .protocol.audio.wake import preroll_clarity
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime
from .services import async_setup_services
from .settings import (
    SERVER_UNIQUE_ID,
    ServerSettings,
    is_server_entry,
    legacy_settings_store,
)
from .transport.logins import FailedLogins
from .transport.mqtt import DeviceEndpoints, async_delete_port_issues
from .transport.ota import ActivateView, CheckIns, OtaView
from .transport.uploads import UploadViews
from .transport.websocket import DeviceWebSocketView
from .voice.arbiter import WakeArbiter

CONFIG_SCHEMA = cv.config_entry_only_config_schema(DOMAIN)

PLATFORMS = [
    Platform.ASSIST_SATELLITE,
    Platform.BINARY_SENSOR,
    Platform.BUTTON,
    Platform.EVENT,
    Platform.IMAGE,
    Platform.LIGHT,
    Platform.MEDIA_PLAYER,
    Platform.NOTIFY,
    Platform.NUMBER,
    Platform.SELECT,
    Platform.SENSOR,
    Platform.SWITCH,
    Platform.UPDATE,
]

# Where the transport settings were kept before the server entry held them.

type XiaozhiServerEntry = ConfigEntry[DeviceEndpoints]


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Register the device endpoints and the actions."""
    logins = FailedLogins()
    uploads = UploadViews.register(hass, logins)
    domain_data = hass.data[DATA_KEY] = XiaozhiDomainData(
        pairing=PairingManager(hass),
        endpoints=DeviceEndpoints(hass, uploads, logins),
        uploads=uploads,
        logins=logins,
        releases=ReleaseCoordinator(hass),
        arbiter=WakeArbiter(hass, preroll_clarity),
    )
    check_ins = CheckIns(domain_data.pairing, domain_data.endpoints, uploads)
    for view in (
        OtaView(check_ins),
        ActivateView(check_ins),
        DeviceWebSocketView(domain_data.pairing, logins, uploads),
    ):
        hass.http.register_view(view)

    async def _stop(_event: Event) -> None:
        domain_data.pairing.shutdown()
        await domain_data.endpoints.async_stop()
        domain_data.arbiter.shutdown()

    hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop)
    await domain_data.releases.async_register_shutdown()
    async_setup_services(hass)
    await _async_create_server_entry(hass)
    return True


async def _async_create_server_entry(hass: HomeAssistant) -> None:
    """Give an installation paired before the server entry existed its entry.

    Its transport settings move from their old store into the entry.
    """
    entries = hass.config_entries.async_entries(DOMAIN, include_ignore=False)
    if not entries or any(is_server_entry(entry) for entry in entries):
        return
    legacy = await legacy_settings_store(hass).async_load() or {}
    hass.async_create_task(
        hass.config_entries.flow.async_init(
            DOMAIN, context={"source": SOURCE_SYSTEM}, data=legacy
        ),
        "xiaozhi create server entry",
    )


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """Open the server's endpoints, or make a paired device reachable."""
    if is_server_entry(entry):
        endpoints = hass.data[DATA_KEY].endpoints
        await endpoints.async_start(ServerSettings.from_options(entry.options))
        entry.runtime_data = endpoints
        entry.async_on_unload(entry.add_update_listener(_async_server_updated))
        # The settings of before the server entry are in it now.
        await legacy_settings_store(hass).async_remove()
        return True
    return await _async_setup_device(hass, entry)


async def _async_server_updated(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Serve with the saved settings: the ports (bound by the form), the releases."""
    domain_data = hass.data[DATA_KEY]
    settings = ServerSettings.from_options(entry.options)
    if settings != domain_data.endpoints.settings:
        await domain_data.endpoints.async_start(settings, restart_devices=True)
    await domain_data.releases.async_request_refresh()


async def _async_setup_device(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> bool:
    """Make a paired device reachable, with its last known tools and state."""
    runtime = XiaozhiRuntime(hass, entry, hass.data[DATA_KEY].arbiter)
    await runtime.async_setup()
    entry.runtime_data = runtime
    async_check_bound(hass, entry)

    async def _stop(_event: Event) -> None:
        await runtime.async_shutdown()

    entry.async_on_unload(hass.bus.async_listen_once(EVENT_HOMEASSISTANT_STOP, _stop))
    entry.async_on_unload(entry.add_update_listener(_async_device_updated))
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    return True


async def _async_device_updated(hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
    """Apply new options to the live link."""
    entry.runtime_data.async_apply_options()


async def async_unload_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """Close the server's endpoints, or a device's entities and then its link."""
    if is_server_entry(entry):
        await hass.data[DATA_KEY].endpoints.async_stop()
        # Nothing to repair while the server is off.
        async_delete_port_issues(hass)
        return True
    if unload_ok := await hass.config_entries.async_unload_platforms(entry, PLATFORMS):
        await entry.runtime_data.async_shutdown()
    return unload_ok


async def async_remove_entry(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Forget what was stored and raised about a removed device."""
    if entry.unique_id == SERVER_UNIQUE_ID:
        return
    await device_store(hass, entry.entry_id).async_remove()
    await hass.async_add_executor_job(
        partial(shutil.rmtree, pictures_dir(hass, entry.entry_id), ignore_errors=True)
    )
    async_forget(hass, entry)
    async_clear_all(hass, entry.entry_id)
