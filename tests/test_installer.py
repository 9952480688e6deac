"""The firmware installer's clock: every install ends, whatever the device does.

The end-to-end paths (flashed, refused, broken off, offered at boot) run
against the simulator in ``test_update.py``. These are the ones that take
minutes or a day on a real device: here Home Assistant's clock is moved on.
"""

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import async_fire_time_changed

from custom_components.xiaozhi.firmware import installer as installer_module
from custom_components.xiaozhi.firmware.installer import (
    FirmwareInstaller,
    Outcome,
    Phase,
)
from custom_components.xiaozhi.protocol.ota_image import AppImage

IMAGE = AppImage(data=bytes(1000), chip_id=9, version="2.6.0", project="xiaozhi")


class Device:
    """What the installer sees of a device: its version, its link, its fetch."""

    def __init__(self) -> None:
        self.firmware: str | None = "2.5.0"
        self.link: bool | None = True  # MQTT
        self.progress: Callable[[int], None] | None = None
        self.calls: list[tuple[str, Mapping[str, Any]]] = []
        self.revoked = 0

    def mint(
        self, image: bytes, progress: Callable[[int], None], broke: Callable[[], None]
    ) -> tuple[str, Callable[[], None]]:
        self.progress = progress  # (a broken download: the end-to-end tests)

        def revoke() -> None:
            self.revoked += 1

        return "http://ha/firmware.bin", revoke

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> object:
        self.calls.append((name, arguments))
        return True


@pytest.fixture
def device() -> Device:
    return Device()


@pytest.fixture
def installer(hass: HomeAssistant, device: Device) -> FirmwareInstaller:
    return FirmwareInstaller(
        hass, "Box", firmware=lambda: device.firmware, link=lambda: device.link
    )


async def prepared() -> AppImage:
    return IMAGE


def later(hass: HomeAssistant, seconds: float) -> None:
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=seconds))


async def start(installer: FirmwareInstaller, device: Device) -> asyncio.Task[None]:
    """Start an install on the connected device; return once it was told."""
    told = asyncio.Event()
    stop = installer.async_subscribe(
        lambda: installer.phase is Phase.SENT and told.set()
    )
    task = asyncio.create_task(
        installer.async_install(prepared, mint=device.mint, call_tool=device.call_tool)
    )
    await told.wait()
    stop()
    return task


async def failure(task: asyncio.Task[None]) -> str | None:
    with pytest.raises(HomeAssistantError) as err:
        await task
    return err.value.translation_key


async def test_a_device_that_never_fetches_fails_after_a_minute(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    task = await start(installer, device)
    assert device.calls == [
        ("self.upgrade_firmware", {"url": "http://ha/firmware.bin"})
    ]
    later(hass, installer_module.FETCH_START_TIMEOUT + 1)
    assert await failure(task) == "firmware_not_fetched"
    assert not installer.in_progress
    assert device.revoked == 1
    assert installer.result is not None
    assert installer.result.outcome is Outcome.FAILED


async def test_a_download_that_stalls_fails(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    task = await start(installer, device)
    assert device.progress is not None
    device.progress(400)
    assert installer.phase is Phase.FETCHING
    assert installer.percent == 40
    later(hass, installer_module.FETCH_STALL_TIMEOUT + 1)
    assert await failure(task) == "firmware_fetch_stalled"


async def test_a_restart_and_the_new_version_install(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    """MQTT: the link drops within the minute, the boot check says 2.6.0."""
    task = await start(installer, device)
    assert device.progress is not None
    device.progress(1000)
    assert installer.phase is Phase.FETCHED
    later(hass, installer_module.RESTART_TIMEOUT - 1)
    installer.link_lost()
    later(hass, installer_module.RESTART_TIMEOUT + 1)  # past the restart limit
    assert installer.in_progress
    device.firmware = "2.6.0"
    installer.checked_in("2.6.0")
    await task
    assert installer.result is not None
    assert installer.result.outcome is Outcome.INSTALLED


async def test_a_restart_without_a_check_in_fails(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    task = await start(installer, device)
    assert device.progress is not None
    device.progress(1000)
    installer.link_lost()
    later(hass, installer_module.CHECK_IN_TIMEOUT + 1)
    assert await failure(task) == "firmware_not_confirmed"


async def test_an_install_waits_a_day_for_a_device_that_is_away(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    device.link = None
    await installer.async_install(prepared, mint=None, call_tool=device.call_tool)
    assert installer.phase is Phase.WAITING
    assert installer.percent is None
    later(hass, installer_module.WAIT_LIFETIME + 1)
    assert not installer.in_progress
    assert installer.result is not None
    assert (installer.result.outcome, installer.result.reason) == (
        Outcome.EXPIRED,
        "firmware_device_away",
    )


async def test_an_offer_the_device_does_not_fetch_expires(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    device.link = None
    await installer.async_install(prepared, mint=None, call_tool=device.call_tool)
    offer = installer.offer(device.mint)
    assert offer == {"version": "2.6.0", "url": "http://ha/firmware.bin"}
    assert installer.offer(device.mint) is None  # once
    later(hass, installer_module.OFFER_LIFETIME + 1)
    assert installer.result is not None
    assert installer.result.outcome is Outcome.EXPIRED
    assert device.revoked == 1


async def test_going_back_or_a_prerelease_needs_the_device_connected(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    device.link = None
    device.firmware = "2.7.0"
    with pytest.raises(HomeAssistantError) as err:
        await installer.async_install(prepared, mint=None, call_tool=device.call_tool)
    assert err.value.translation_key == "firmware_not_connected"
    assert not installer.in_progress


async def test_a_refused_image_leaves_nothing_running(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    async def refused() -> AppImage:
        raise HomeAssistantError("refused")

    with pytest.raises(HomeAssistantError):
        await installer.async_install(
            refused, mint=device.mint, call_tool=device.call_tool
        )
    assert not installer.in_progress
    assert device.calls == []


async def test_unloading_ends_a_running_install(
    hass: HomeAssistant, installer: FirmwareInstaller, device: Device
) -> None:
    task = await start(installer, device)
    installer.shutdown()
    assert await failure(task) == "firmware_install_stopped"
    assert installer.result is not None
    assert installer.result.outcome is Outcome.EXPIRED
