"""Preparing an install: the image, downloaded and checked for the device.

Before anything reaches the device, its board's zip is downloaded and the
application image cut out of it (once for every box of that board,
``releases.py``) is checked for the device (``protocol/ota_image.py``); a
file of the user's own gets the same checks. The installer
(``installer.py``) then serves it.
"""

from collections.abc import Callable

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..errors import translated_error
from ..protocol.ota_image import (
    AppImage,
    DeviceHardware,
    FirmwareRefusedError,
    check_image,
    read_firmware_file,
)
from .releases import Release, ReleaseCoordinator, async_fetch_firmware


def _checked(image: AppImage, version: str, hardware: DeviceHardware) -> AppImage:
    """Return ``image`` if it is ``version`` of xiaozhi, right for the device."""
    check_image(image, version=version, chip=hardware.chip, slots=list(hardware.slots))
    return image


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
        raise _refused(name, what, err) from err


def _refused(name: str, what: str, err: FirmwareRefusedError) -> HomeAssistantError:
    """Log a refusal and return its translated error."""
    LOGGER.warning("Firmware %s refused for %s: %s", what, name, err)
    return translated_error(str(err.reason), name, detail=err.detail)


async def async_prepare(
    source: ReleaseCoordinator,
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
    try:
        image = await source.async_image(asset)
        return _checked(image, release.version, hardware)
    except FirmwareRefusedError as err:
        raise _refused(name, asset.name, err) from err


async def async_prepare_own(
    hass: HomeAssistant, url: str, hardware: DeviceHardware | None, name: str
) -> AppImage:
    """Fetch and check a firmware file of the user's own."""
    if hardware is None:
        raise translated_error("firmware_unknown_device", name)
    data = await async_fetch_firmware(hass, url)
    return await _async_check(hass, name, url, checked_own_image, data, hardware)
