"""Firmware: an update entity per device, fed by the release source.

The installed version is what the device reports; the latest, its notes and
its page come from the integration-wide release source (``firmware/``). A
release older than what the device runs is never offered: picking a
version (``SPECIFIC_VERSION``) is how to go back. Installing checks the
image for the device first and succeeds only once the device runs it.
"""

from datetime import datetime, timedelta
from typing import Any, override

from homeassistant.components.update import (
    UpdateDeviceClass,
    UpdateEntity,
    UpdateEntityFeature,
)
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.event import async_call_later

from .const import DOMAIN
from .domain_data import DATA_KEY
from .entity import XiaozhiEntity
from .errors import translated_error
from .firmware.install import PendingInstall, async_install, async_prepare
from .firmware.releases import Release
from .protocol.ota_image import AppImage, version_key
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1
# The release source keeps its list a while: asking more often costs nothing.
SCAN_INTERVAL = timedelta(hours=6)
# The first check waits until Home Assistant has settled after starting.
FIRST_CHECK_DELAY = 60.0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device's firmware entity."""
    async_add_entities([XiaozhiFirmwareUpdate(entry.runtime_data)])


class XiaozhiFirmwareUpdate(XiaozhiEntity, UpdateEntity):
    """The device's firmware, and the newest release for its board."""

    _attr_translation_key = "firmware"
    _attr_device_class = UpdateDeviceClass.FIRMWARE
    _attr_entity_category = EntityCategory.CONFIG
    _attr_should_poll = True
    _attr_supported_features = (
        UpdateEntityFeature.INSTALL
        | UpdateEntityFeature.PROGRESS
        | UpdateEntityFeature.RELEASE_NOTES
        | UpdateEntityFeature.SPECIFIC_VERSION
    )

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the firmware entity of a device."""
        super().__init__(runtime, "firmware")
        self._latest: Release | None = None
        self._pending_version: str | None = None

    @override
    async def async_added_to_hass(self) -> None:
        """Check for releases a minute from now, then every few hours."""
        await super().async_added_to_hass()
        self.async_on_remove(
            async_call_later(self.hass, FIRST_CHECK_DELAY, self._async_first_check)
        )

    @callback
    def _async_first_check(self, _now: datetime) -> None:
        """Look for releases once Home Assistant has settled (on the loop)."""
        self.async_schedule_update_ha_state(force_refresh=True)

    @property
    @override
    def in_progress(self) -> bool:
        """Return True while installing, or waiting to offer an install."""
        return self._pending_version is not None or self._attr_in_progress is True

    @property
    @override
    def available(self) -> bool:
        """Stay available while installing: the device goes away to flash."""
        return self.in_progress is True or super().available

    @property
    @override
    def installed_version(self) -> str | None:
        """Return the version the device reports."""
        return self.entry_data.firmware

    @property
    @override
    def latest_version(self) -> str | None:
        """Return the newest release, unless the device runs a newer one."""
        installed = self.installed_version
        if self._latest is None:
            return None
        newest = version_key(self._latest.version)
        running = version_key(installed) if installed else None
        if running is not None and newest is not None and running >= newest:
            return installed
        return self._latest.version

    @property
    @override
    def release_summary(self) -> str | None:
        """Return the release's title."""
        return self._latest.title[:255] if self._latest else None

    @property
    @override
    def release_url(self) -> str | None:
        """Return the release's page."""
        return self._latest.url if self._latest else None

    @override
    async def async_release_notes(self) -> str | None:
        """Return the release's notes."""
        return self._latest.notes if self._latest else None

    async def async_update(self) -> None:
        """Read the release list (fetched at most every few hours)."""
        releases = await self.hass.data[DATA_KEY].releases.async_refresh()
        self._latest = releases[0] if releases else None

    @override
    async def async_install(
        self, version: str | None, backup: bool, **kwargs: Any
    ) -> None:
        """Install the latest release, or ``version``; return once it runs."""
        runtime = self.runtime
        source = self.hass.data[DATA_KEY].releases
        wanted = version or self.latest_version
        release = source.find(wanted) if wanted else None
        if release is None:
            await source.async_refresh(force=True)
            release = source.find(wanted) if wanted else None
        if release is None:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="firmware_no_release",
                translation_placeholders={"version": wanted or "?"},
            )
        image = await async_prepare(
            self.hass, source, release, self.entry_data.hardware, runtime.name
        )
        if not runtime.connected:
            self._async_wait_for_device(image)
            return
        self._attr_in_progress = True
        self._attr_update_percentage = 0
        self.async_write_ha_state()
        try:
            await async_install(runtime, image, self._progress)
        finally:
            self._attr_in_progress = False
            self._attr_update_percentage = None
            self.async_write_ha_state()

    def _async_wait_for_device(self, image: AppImage) -> None:
        """Offer the image at the device's next OTA check (at its boot).

        The firmware installs only a newer version there: going back needs
        the device connected.
        """
        version = image.version
        installed = version_key(self.installed_version or "")
        if installed is None or (version_key(version) or ()) <= installed:
            raise translated_error("firmware_not_connected", self.runtime.name)
        self.runtime.pending_firmware = PendingInstall(
            version, image.data, self._progress
        )
        self._pending_version = version
        self._attr_update_percentage = None
        self.async_write_ha_state()

    @callback
    @override
    def _handle_update(self) -> None:
        """Follow the device; an offered install ends when it runs the version."""
        if self._pending_version is not None and (
            self.installed_version == self._pending_version
        ):
            self._pending_version = None
            self._attr_update_percentage = None
        super()._handle_update()

    def _progress(self, percent: float) -> None:
        rounded = int(percent)
        if rounded != self._attr_update_percentage:
            self._attr_update_percentage = rounded
            self.async_write_ha_state()
