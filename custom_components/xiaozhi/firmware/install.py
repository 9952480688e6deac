"""Installing a release on a device, checked first, confirmed after.

Before anything reaches the device, its board's zip is downloaded and the
application image cut out of it is checked for the device (``protocol/
ota_image.py``). The image is then served once, with its length, at a URL
the device is given through its ``self.upgrade_firmware`` tool; what it has
fetched is the progress. The install has worked only when the device comes
back reporting the new version (its OTA check at boot says it first).
"""

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from homeassistant.core import CALLBACK_TYPE, HomeAssistant

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import translated_error
from ..protocol.firmware import UPGRADE_TOOL
from ..protocol.ota_image import (
    AppImage,
    DeviceHardware,
    FirmwareRefusedError,
    app_from_merged,
    check_image,
    merged_binary,
    read_firmware_file,
)
from .releases import Release, ReleaseSource, async_fetch_firmware

# Downloading, writing 3-4 MB of flash and rebooting takes about a minute.
CONFIRM_TIMEOUT: Final = 300.0


type MintFirmwareUrl = Callable[
    [bytes, Callable[[int], None]], tuple[str, CALLBACK_TYPE]
]


class FirmwareUrls(Protocol):
    """Mints the one-time URL of a firmware image."""

    def mint_firmware_url(
        self, image: bytes, progress: Callable[[int], None]
    ) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of a firmware image, reporting bytes sent."""


# How long a firmware URL handed out in an OTA answer stays valid.
OFFER_LIFETIME: Final = 600.0


@dataclass(frozen=True, slots=True)
class PendingInstall:
    """An install waiting for a device that is not connected.

    At its next OTA check (at boot) the answer's ``firmware`` block offers
    it, once; the firmware installs a newer version at once.
    """

    version: str
    image: bytes
    progress: Callable[[float], None]

    def offer(self, mint: MintFirmwareUrl) -> tuple[dict[str, str], CALLBACK_TYPE]:
        """Return the OTA answer's ``firmware`` block and its URL's revoker.

        Only a plain version is offered (the firmware's version compare
        aborts on anything else), and never with ``force`` (which would
        re-flash at every boot).
        """
        total = len(self.image)
        url, revoke = mint(self.image, lambda sent: self.progress(100 * sent / total))
        return {"version": self.version, "url": url}, revoke


def _checked(image: AppImage, version: str, hardware: DeviceHardware) -> AppImage:
    """Return ``image`` if it is ``version`` of xiaozhi, right for the device."""
    check_image(image, version=version, chip=hardware.chip, slots=list(hardware.slots))
    return image


def checked_image(archive: bytes, version: str, hardware: DeviceHardware) -> AppImage:
    """Return a release zip's application image if it is right for the device.

    Raises FirmwareRefusedError. CPU-bound (unzipping): run it in the
    executor.
    """
    return _checked(app_from_merged(merged_binary(archive)), version, hardware)


def checked_own_image(data: bytes, hardware: DeviceHardware) -> AppImage:
    """Return a firmware file of the user's own if it is right for the device.

    The same checks as a release's, its own version standing for the
    release's. CPU-bound: run it in the executor.
    """
    image = read_firmware_file(data)
    return _checked(image, image.version, hardware)


async def _async_check[*Ts](
    hass: HomeAssistant,
    name: str,
    what: str,
    check: Callable[[*Ts], AppImage],
    *args: *Ts,
) -> AppImage:
    """Run a check in the executor; a refusal becomes its translated error."""
    try:
        return await hass.async_add_executor_job(check, *args)
    except FirmwareRefusedError as err:
        LOGGER.warning("Firmware %s refused for %s: %s", what, name, err)
        raise translated_error(str(err.reason), name, detail=err.detail) from err


async def async_prepare(
    hass: HomeAssistant,
    source: ReleaseSource,
    release: Release,
    hardware: DeviceHardware | None,
    name: str,
) -> AppImage:
    """Download and check the release for the device; return its image."""
    if hardware is None or hardware.board is None:
        raise translated_error("firmware_unknown_device", name)
    asset = release.asset_for(hardware.board, hardware.manufacturer)
    if asset is None:
        raise translated_error(
            "firmware_no_asset", name, version=release.version, board=hardware.board
        )
    archive = await source.async_download(asset)
    return await _async_check(
        hass, name, asset.name, checked_image, archive, release.version, hardware
    )


async def async_prepare_own(
    hass: HomeAssistant, url: str, hardware: DeviceHardware | None, name: str
) -> AppImage:
    """Fetch and check a firmware file of the user's own."""
    if hardware is None:
        raise translated_error("firmware_unknown_device", name)
    data = await async_fetch_firmware(hass, url)
    return await _async_check(hass, name, url, checked_own_image, data, hardware)


class InstallTarget(Protocol):
    """The device's runtime, as far as installing on it needs."""

    @property
    def name(self) -> str:
        """Return the device's name."""

    @property
    def entry_data(self) -> XiaozhiEntryData:
        """Return what is known about the device."""

    @property
    def connected(self) -> bool:
        """Return True when a session finished its handshake."""

    @property
    def uploads(self) -> FirmwareUrls | None:
        """Return the URLs of the live session."""

    @property
    def commands(self) -> ToolCaller:
        """Return the device's commands."""


class ToolCaller(Protocol):
    """Calls a device's tools."""

    async def async_call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None
    ) -> object:
        """Call a tool of the device."""


async def async_install(
    target: InstallTarget, image: AppImage, progress: Callable[[float], None]
) -> None:
    """Have the device fetch and flash ``image``; return once it runs it.

    ``progress`` gets the share (0..100) fetched. Raises
    HomeAssistantError when the device cannot be reached, or does not come
    back with ``version``: in time, or at all (it rebooted, after fetching
    all of it, into what it ran before: the image did not boot and the
    firmware rolled back).
    """
    name, data, version = target.name, target.entry_data, image.version
    uploads = target.uploads if target.connected else None
    if uploads is None:
        raise translated_error("firmware_not_connected", name)
    image_bytes = image.data
    outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    total = len(image_bytes)
    fetched = False
    went_away = False

    def sent(count: int) -> None:
        nonlocal fetched
        fetched = count >= total
        progress(100 * count / total)

    def changed() -> None:
        nonlocal went_away
        if outcome.done():
            return
        if data.firmware == version:
            outcome.set_result(True)
        elif fetched and data.link is None:
            went_away = True
        elif went_away and data.link is not None:
            outcome.set_result(False)  # back, on the old version

    url, revoke = uploads.mint_firmware_url(image_bytes, sent)
    stop_following = data.async_subscribe_state(changed)
    try:
        await target.commands.async_call_tool(UPGRADE_TOOL, {"url": url})
        async with asyncio.timeout(CONFIRM_TIMEOUT):
            confirmed = await outcome
    except TimeoutError:
        confirmed = False
    finally:
        stop_following()
        revoke()
    if not confirmed:
        raise translated_error(
            "firmware_not_confirmed",
            name,
            version=version,
            installed=data.firmware or "?",
        )
