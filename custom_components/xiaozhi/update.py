"""Firmware: an update entity per device, following the release coordinator.

The installed version is what the device reports; the latest is the newest
release that has a build for the device's board (``firmware/releases.py``),
never one older than what it runs: picking a version (``SPECIFIC_VERSION``)
is how to go back. When nothing is offered, the ``no_update_reason``
attribute says why. Installing goes through the device's installer
(``firmware/installer.py``), which the ``install_firmware`` action shares:
its progress shows here whoever started it.
"""

from datetime import datetime
from typing import Any, Final, override

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
from .domain_data import domain_data
from .entity import XiaozhiEntity
from .firmware.prepare import async_prepare
from .firmware.releases import (
    Release,
    ReleaseCoordinator,
    newest_for,
    parse_version,
)
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 1
# The first check waits until Home Assistant has settled after starting.
FIRST_CHECK_DELAY: Final = 60.0
ATTR_NO_UPDATE_REASON: Final = "no_update_reason"
ATTR_NEWEST_RELEASE: Final = "newest_release"


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device's firmware entity."""
    releases = domain_data(hass).releases
    async_add_entities([XiaozhiFirmwareUpdate(entry.runtime_data, releases)])


class XiaozhiFirmwareUpdate(XiaozhiEntity, UpdateEntity):
    """The device's firmware, and the newest release for its board."""

    _attr_translation_key = "firmware"
    _attr_device_class = UpdateDeviceClass.FIRMWARE
    _attr_entity_category = EntityCategory.CONFIG
    _attr_supported_features = (
        UpdateEntityFeature.INSTALL
        | UpdateEntityFeature.PROGRESS
        | UpdateEntityFeature.RELEASE_NOTES
        | UpdateEntityFeature.SPECIFIC_VERSION
    )

    def __init__(self, runtime: XiaozhiRuntime, releases: ReleaseCoordinator) -> None:
        """Create the firmware entity of a device."""
        super().__init__(runtime, "firmware")
        self._releases = releases

    @override
    async def async_added_to_hass(self) -> None:
        """Follow the release list and the device's installer."""
        await super().async_added_to_hass()
        self.async_on_remove(self._releases.async_add_listener(self._handle_update))
        self.async_on_remove(
            self.runtime.installer.async_subscribe(self._handle_update)
        )
        if self._releases.data is None:
            self.async_on_remove(
                async_call_later(self.hass, FIRST_CHECK_DELAY, self._async_first_check)
            )

    @callback
    def _async_first_check(self, _now: datetime) -> None:
        """Read the release list once Home Assistant has settled (one for all)."""
        if self._releases.data is None:
            self.runtime.entry.async_create_background_task(
                self.hass,
                self._releases.async_request_refresh(),
                "xiaozhi firmware releases",
            )

    @property
    def _offered(self) -> Release | None:
        """Return the newest release with a build for the device's board."""
        hardware = self.entry_data.hardware
        if not self._releases.data or hardware is None or hardware.board is None:
            return None
        return newest_for(self._releases.data, hardware.board, hardware.manufacturer)

    @property
    @override
    def in_progress(self) -> bool:
        """Return True while installing, or waiting to offer an install."""
        return self.runtime.installer.in_progress

    @property
    @override
    def update_percentage(self) -> int | None:
        """Return the share of the image the device has fetched."""
        return self.runtime.installer.percent

    @property
    @override
    def available(self) -> bool:
        """Stay available while installing: the device goes away to flash."""
        return self.in_progress or super().available

    @property
    @override
    def installed_version(self) -> str | None:
        """Return the version the device reports."""
        return self.entry_data.firmware

    @property
    @override
    def latest_version(self) -> str | None:
        """Return the release offered, or what runs when none is newer.

        Unknown only while the release list was never read.
        """
        installed = self.installed_version
        if self._releases.data is None:
            return None
        offered = self._offered
        if offered is None:
            return installed
        newest, running = parse_version(offered.version), parse_version(installed or "")
        if running is not None and newest is not None and running >= newest:
            return installed
        return offered.version

    @property
    @override
    def extra_state_attributes(self) -> dict[str, Any]:
        """Say why no release is offered, and what the newest one is."""
        releases, hardware = self._releases.data, self.entry_data.hardware
        reason: str | None = None
        if releases is None:
            reason = (
                "releases_unavailable"
                if self._releases.last_exception is not None
                else "not_checked"
            )
        elif not releases:
            reason = "no_releases"
        elif hardware is None or hardware.board is None:
            reason = "board_unknown"
        elif self._offered is None:
            reason = "no_build_for_board"
        return {
            ATTR_NO_UPDATE_REASON: reason,
            ATTR_NEWEST_RELEASE: releases[0].version if releases else None,
        }

    @property
    @override
    def release_summary(self) -> str | None:
        """Return the offered release's title."""
        offered = self._offered
        return offered.title[:255] if offered else None

    @property
    @override
    def release_url(self) -> str | None:
        """Return the offered release's page."""
        offered = self._offered
        return offered.url if offered else None

    @override
    async def async_release_notes(self) -> str | None:
        """Return the offered release's notes."""
        offered = self._offered
        return offered.notes if offered else None

    @override
    async def async_install(
        self, version: str | None, backup: bool, **kwargs: Any
    ) -> None:
        """Install the latest release, or ``version``; return once it runs."""
        runtime, releases = self.runtime, self._releases
        wanted = version or self.latest_version
        release = releases.find(wanted) if wanted else None
        if release is None:
            await releases.async_fresh()
            release = releases.find(wanted) if wanted else None
        if release is None:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="firmware_no_release",
                translation_placeholders={"version": wanted or "none"},
            )
        await runtime.async_install_firmware(
            lambda: async_prepare(
                releases, release, self.entry_data.hardware, runtime.name
            )
        )
