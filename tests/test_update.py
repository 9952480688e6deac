"""Firmware updates: releases from a local server, checked, installed, confirmed.

A local release server answers in GitHub's shape; its zips hold merged
binaries built like the firmware's. The simulated device downloads what it
is given over HTTP into its next OTA slot, checks it as the firmware's
``esp_image_verify`` does (chip, checksum, the appended SHA-256), and
reboots into it.
"""

import asyncio
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
import hashlib
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from homeassistant.components.update import (
    ATTR_IN_PROGRESS,
    ATTR_INSTALLED_VERSION,
    ATTR_LATEST_VERSION,
    ATTR_RELEASE_SUMMARY,
    ATTR_UPDATE_PERCENTAGE,
)
from homeassistant.const import EVENT_STATE_CHANGED, STATE_OFF, STATE_ON
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.entity_component import async_update_entity
from homeassistant.util import dt as dt_util
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_fire_time_changed,
)

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.firmware import installer
from custom_components.xiaozhi.firmware.releases import parse_releases
from custom_components.xiaozhi.settings import (
    CONF_FIRMWARE_PRERELEASES,
    CONF_FIRMWARE_RELEASES_URL,
)
from simulator import SimulatedDevice, device as simulated_device
from simulator.firmware_image import app_image, merged_binary, release_zip
from tests.conftest import LOOPBACK_OTA_URL, MAC, wait_for_runtime

pytestmark = pytest.mark.mqtt_endpoint

BOARD = "xiaozhi-sim"


def refuse_flash(monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    """Have the simulated devices refuse every image they flash, saying ``why``."""

    def refuse(_data: bytes, _chip: str) -> str:
        raise ValueError(why)

    monkeypatch.setattr(simulated_device, "read_image", refuse)


@dataclass
class ReleaseServer:
    """Releases in GitHub's shape, and their zips."""

    server: TestServer
    releases: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    failing: bool = False
    asked: int = 0
    downloads: int = 0

    def url(self, path: str = "/releases") -> str:
        """Return the absolute URL of ``path``."""
        return str(self.server.make_url(path))

    def add_board(
        self, version: str, *, draft: bool = False, prerelease: bool = False
    ) -> str:
        """Publish ``version`` with a build for the simulated board; return its name."""
        name = f"v{version}_{BOARD}.zip"
        self.add(
            version, {name: board_zip(version)}, draft=draft, prerelease=prerelease
        )
        return name

    def add(
        self,
        version: str,
        zips: dict[str, bytes] | None = None,
        *,
        draft: bool = False,
        prerelease: bool = False,
    ) -> None:
        """Publish a release with ``zips`` (name -> content)."""
        assets = []
        for name, content in (zips or {}).items():
            self.files[name] = content
            assets.append(
                {
                    "name": name,
                    "size": len(content),
                    "browser_download_url": self.url(f"/download/{name}"),
                }
            )
        self.releases.insert(
            0,
            {
                "tag_name": f"v{version}",
                "name": f"Version {version}",
                "body": f"What is new in {version}.",
                "html_url": f"https://example.invalid/releases/v{version}",
                "draft": draft,
                "prerelease": prerelease,
                "assets": assets,
            },
        )


def board_zip(version: str, **image: Any) -> bytes:
    """Return a release zip for the simulated board."""
    return release_zip(merged_binary(app_image(version=version, **image)))


@pytest.fixture
async def release_server(socket_enabled: None) -> AsyncGenerator[ReleaseServer]:
    """Serve releases on loopback (never the internet)."""

    async def listing(_request: web.Request) -> web.Response:
        holder.asked += 1
        if holder.failing:
            return web.Response(status=500)
        return web.json_response(holder.releases)

    async def download(request: web.Request) -> web.Response:
        holder.downloads += 1
        content = holder.files.get(request.match_info["name"])
        if content is None:
            return web.Response(status=404)
        return web.Response(body=content)

    app = web.Application()
    app.router.add_get("/releases", listing)
    app.router.add_get("/download/{name}", download)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    holder = ReleaseServer(server)
    yield holder
    await server.close()


@pytest.fixture
def endpoint_settings(
    endpoint_settings: dict[str, Any], release_server: ReleaseServer
) -> dict[str, Any]:
    """Point the integration at the local release server."""
    return {
        **endpoint_settings,
        CONF_FIRMWARE_RELEASES_URL: release_server.url(),
        CONF_FIRMWARE_PRERELEASES: False,
    }


def firmware_id(hass: HomeAssistant) -> str:
    """Return the device's update entity."""
    entity_id = er.async_get(hass).async_get_entity_id(
        "update", DOMAIN, f"{MAC}-firmware"
    )
    assert entity_id is not None
    return entity_id


async def checked(hass: HomeAssistant, *, fresh: bool = True) -> Any:
    """Have the entity look for releases (now, with ``fresh``); return its state."""
    if fresh:
        await hass.data[DOMAIN].releases.async_refresh()
    await async_update_entity(hass, firmware_id(hass))
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    return state


async def online(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    **config: Any,
) -> SimulatedDevice:
    """Return a device on MQTT that checked in and connected."""
    device = simulators(
        ota_url=LOOPBACK_OTA_URL,
        firmware=config.pop("firmware", "2.5.0"),
        reboot_delay=0.05,
        **config,
    )
    await device.provision()
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    return device


async def install_version(hass: HomeAssistant, version: str | None = None) -> None:
    """Call ``update.install``."""
    data: dict[str, Any] = {"entity_id": firmware_id(hass)}
    if version is not None:
        data["version"] = version
    await hass.services.async_call("update", "install", data, blocking=True)


async def test_a_release_installs_and_the_device_comes_back_with_it(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """The image is checked, fetched with its length, flashed, confirmed."""
    release_server.add_board("2.6.0")
    release_server.add_board("2.9.0", draft=True)
    release_server.add_board("2.8.0", prerelease=True)
    device = await online(init_integration, simulators)
    state = await checked(hass)
    assert state.state == STATE_ON
    assert state.attributes[ATTR_INSTALLED_VERSION] == "2.5.0"
    assert state.attributes[ATTR_LATEST_VERSION] == "2.6.0"  # no draft, no pre
    assert state.attributes[ATTR_RELEASE_SUMMARY] == "Version 2.6.0"
    progress: list[Any] = []

    @callback
    def follow(event: Event) -> None:
        new = event.data["new_state"]
        if new is not None and new.entity_id == firmware_id(hass):
            progress.append(
                (
                    new.attributes[ATTR_IN_PROGRESS],
                    new.attributes[ATTR_UPDATE_PERCENTAGE],
                )
            )

    hass.bus.async_listen(EVENT_STATE_CHANGED, follow)
    await install_version(hass)
    assert device.upgrades == [("2.6.0", "")]
    assert device.config.firmware == "2.6.0"
    # Confirmed by its OTA check at boot; then it connects again.
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.state == STATE_OFF
    assert state.attributes[ATTR_INSTALLED_VERSION] == "2.6.0"
    assert (True, 100) in progress  # the bytes the device fetched
    assert progress[-1] == (False, None)
    # The image URL worked once: asking again is refused.
    status, _body = await device.http_request("GET", device.upgrade_urls[-1])
    assert status == 404


async def test_the_device_gets_the_whole_image_its_sha256_included(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What is served is the app partition's image to its last byte, the digest."""
    image = app_image(version="2.6.0")
    # esptool's layout: segments, a 16-byte aligned checksum block, 32 bytes.
    assert image[23] == 1
    assert len(image) % 16 == 0
    assert image[-32:] == hashlib.sha256(image[:-32]).digest()
    release_server.add_board("2.6.0")
    served: list[bytes] = []
    firmware_check = simulated_device.read_image

    def spy(data: bytes, chip: str) -> str:
        served.append(data)
        return firmware_check(data, chip)

    monkeypatch.setattr(simulated_device, "read_image", spy)
    device = await online(init_integration, simulators)
    await checked(hass)
    await install_version(hass)
    assert served == [image]
    assert device.upgrade_bytes == len(image)
    assert device.upgrades == [("2.6.0", "")]
    assert device.config.running_partition == "ota_1"
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_INSTALLED_VERSION] == "2.6.0"


async def test_a_newer_firmware_is_not_offered_an_older_release(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """No downgrade unless the user picks the version."""
    release_server.add_board("2.6.0")
    await online(init_integration, simulators, firmware="2.7.1")
    state = await checked(hass)
    assert state.state == STATE_OFF
    assert state.attributes[ATTR_LATEST_VERSION] == "2.7.1"


@pytest.mark.parametrize(
    ("zips", "config", "reason"),
    [
        ({"v2.6.0_other-board.zip": board_zip("2.6.0")}, {}, "firmware_no_asset"),
        ({f"v2.6.0_{BOARD}.zip": b"not a zip"}, {}, "firmware_not_a_zip"),
        (
            {f"v2.6.0_{BOARD}.zip": release_zip(b"x", name="xiaozhi.bin")},
            {},
            "firmware_no_merged_binary",
        ),
        (
            {f"v2.6.0_{BOARD}.zip": board_zip("2.6.0")},
            {"chip": "esp32c3"},
            "firmware_wrong_chip",
        ),
        ({f"v2.6.0_{BOARD}.zip": board_zip("2.5.9")}, {}, "firmware_wrong_version"),
        (
            {f"v2.6.0_{BOARD}.zip": board_zip("2.6.0", project="other")},
            {},
            "firmware_not_xiaozhi",
        ),
        (
            {f"v2.6.0_{BOARD}.zip": board_zip("2.6.0")},
            {"ota_slots": False},
            "firmware_no_ota_slot",
        ),
        (
            # Built for a larger slot than the device has.
            {
                f"v2.6.0_{BOARD}.zip": release_zip(
                    merged_binary(
                        app_image(version="2.6.0", payload=0x400000),
                        [("ota_0", 0, 0x10, 0x20000, 0x500000)],
                    )
                )
            },
            {},
            "firmware_too_large",
        ),
    ],
)
async def test_an_image_not_right_for_the_device_never_reaches_it(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    zips: dict[str, bytes],
    config: dict[str, Any],
    reason: str,
) -> None:
    """Each refusal says why; the device is never told to upgrade."""
    release_server.add("2.6.0", zips)
    device = await online(init_integration, simulators, **config)
    await checked(hass)
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass, "2.6.0")
    assert err.value.translation_key == reason
    assert device.upgrade_urls == []
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is False


async def test_a_manufacturer_named_zip_is_found(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """Releases name boards ``{manufacturer}-{name}``, as the firmware builds them."""
    release_server.add("2.6.0", {f"v2.6.0_acme-{BOARD}.zip": board_zip("2.6.0")})
    device = await online(init_integration, simulators, manufacturer="acme")
    await checked(hass)
    await install_version(hass, "2.6.0")
    assert device.config.firmware == "2.6.0"
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)


async def test_a_device_that_does_not_come_back_fails_the_install(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The flash fails on the device: it keeps its version, and the error says so."""
    monkeypatch.setattr(installer, "RESTART_TIMEOUT", 1.0)

    refuse_flash(monkeypatch, "flash write failed")
    release_server.add_board("2.6.0")
    device = await online(init_integration, simulators)
    await checked(hass)
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "firmware_not_confirmed"
    assert err.value.translation_placeholders["installed"] == "2.5.0"
    assert device.upgrades == [(None, "flash write failed")]


async def test_an_unknown_version_or_source_failure_is_quiet_then_clear(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """A failing release list: latest unknown, nothing raised until an install."""
    release_server.failing = True
    await online(init_integration, simulators)
    state = await checked(hass)
    assert state.attributes[ATTR_LATEST_VERSION] is None
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass, "3.0.0")
    assert err.value.translation_key == "firmware_no_release"


async def test_a_device_away_is_updated_at_its_next_boot(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """Not connected: the OTA answer at its next boot offers it, once, no force."""
    release_server.add_board("2.6.0")
    device = await online(init_integration, simulators, websocket_only=True)
    await checked(hass)
    await device.disconnect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda m: not m.connected)
    await install_version(hass)
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is True  # waiting for the device
    assert device.upgrade_urls == []
    await device.reboot()  # its boot-time OTA check gets the offer
    await device.wait_for(lambda: device.config.firmware == "2.6.0", timeout=10)
    offer = device.firmware_offer
    assert offer is not None
    assert (offer.version, offer.force) == ("2.6.0", False)
    await wait_for_runtime(runtime, lambda m: m.entry_data.firmware == "2.6.0")
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is False
    assert state.attributes[ATTR_INSTALLED_VERSION] == "2.6.0"
    assert not runtime.installer.in_progress  # offered once, and done
    await wait_for_runtime(runtime, lambda m: m.connected)


async def test_going_back_needs_the_device_connected(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """The boot-time check installs only newer versions: an older one waits."""
    release_server.add_board("2.4.0")
    device = await online(init_integration, simulators, websocket_only=True)
    await checked(hass)
    await device.disconnect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: not m.connected)
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass, "2.4.0")
    assert err.value.translation_key == "firmware_not_connected"
    assert not init_integration.runtime_data.installer.in_progress


async def test_the_release_list_is_read_once_for_hours(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """Many checks, one request; the notes come from the release."""
    release_server.add_board("2.6.0")
    await online(init_integration, simulators)
    await checked(hass)
    asked = release_server.asked
    for _ in range(3):
        await checked(hass, fresh=False)
    assert release_server.asked == asked
    runtime_source = hass.data[DOMAIN].releases
    await runtime_source.async_refresh()
    notes = runtime_source.data
    assert notes is not None
    assert notes[0].notes == "What is new in 2.6.0."


async def test_a_firmware_file_of_your_own_gets_the_same_checks(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """By URL: a merged binary or an app image installs; another chip is refused."""
    device = await online(init_integration, simulators)
    device_id = init_integration.runtime_data.entry_data.device_id
    release_server.files["mine.bin"] = merged_binary(app_image(version="2.7.0"))
    release_server.files["other.bin"] = app_image(version="2.7.1", chip="esp32c3")

    async def install_file(name: str) -> None:
        await hass.services.async_call(
            DOMAIN,
            "install_firmware",
            {
                "device_id": device_id,
                "firmware": release_server.url(f"/download/{name}"),
            },
            blocking=True,
        )

    with pytest.raises(HomeAssistantError) as err:
        await install_file("other.bin")
    assert err.value.translation_key == "firmware_wrong_chip"
    with pytest.raises(HomeAssistantError) as err:
        await install_file("missing.bin")
    assert err.value.translation_key == "firmware_download_failed"
    assert device.upgrade_urls == []
    await install_file("mine.bin")
    assert device.config.firmware == "2.7.0"
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)


async def test_a_device_back_on_its_old_version_fails_at_once(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The new image did not boot and the firmware rolled back: said at once."""
    monkeypatch.setattr(simulated_device, "read_image", lambda _data, _chip: "2.5.0")
    release_server.add_board("2.6.0")
    await online(init_integration, simulators)
    await checked(hass)
    started = hass.loop.time()
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "firmware_not_confirmed"
    assert err.value.translation_placeholders["installed"] == "2.5.0"
    assert hass.loop.time() - started < 10  # not the five-minute wait
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)


async def test_the_first_check_comes_a_minute_after_start(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """Setup never waits on the release list; a minute later it is read."""
    release_server.add_board("2.6.0")
    await online(init_integration, simulators)
    assert release_server.asked == 0
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes["latest_version"] is None
    async_fire_time_changed(hass, dt_util.utcnow() + timedelta(seconds=61))
    await hass.async_block_till_done()
    assert release_server.asked == 1
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes["latest_version"] == "2.6.0"
    assert state.state == STATE_ON


async def test_a_release_without_the_boards_build_is_not_offered(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """The newest release with the board's zip is offered; the state says why not."""
    release_server.add_board("2.6.0")
    release_server.add("2.7.0", {"v2.7.0_other-board.zip": board_zip("2.7.0")})
    await online(init_integration, simulators)
    state = await checked(hass)
    assert state.attributes[ATTR_LATEST_VERSION] == "2.6.0"
    assert state.attributes[ATTR_RELEASE_SUMMARY] == "Version 2.6.0"
    assert state.attributes["newest_release"] == "2.7.0"
    release_server.releases.pop()  # 2.6.0 is gone: no build for the board
    state = await checked(hass)
    assert state.state == STATE_OFF
    assert state.attributes[ATTR_LATEST_VERSION] == "2.5.0"
    assert state.attributes["no_update_reason"] == "no_build_for_board"
    assert state.attributes[ATTR_RELEASE_SUMMARY] is None


async def test_no_update_says_why_when_the_list_cannot_be_read(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """Not read yet, then unreadable: unknown, with a reason either way."""
    release_server.failing = True
    await online(init_integration, simulators)
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes["no_update_reason"] == "not_checked"
    state = await checked(hass)
    assert state.attributes[ATTR_LATEST_VERSION] is None
    assert state.attributes["no_update_reason"] == "releases_unavailable"


def test_prerelease_tags_are_read_and_ordered() -> None:
    """GitHub's pre-release tags parse, and sort below their release."""
    tags = ["v2.7.0", "v2.7.0-rc1", "v2.7.0-beta", "v2.7.0-beta.2", "v2.6.5", "junk"]
    listing = [
        {"tag_name": tag, "draft": False, "prerelease": "-" in tag, "assets": []}
        for tag in tags
    ]
    versions = [
        release.version for release in parse_releases(listing, prereleases=True)
    ]
    assert versions == ["2.7.0", "2.7.0-rc1", "2.7.0-beta.2", "2.7.0-beta", "2.6.5"]
    # A tag that says it is a pre-release is one, whatever GitHub's flag.
    listing[1]["prerelease"] = False
    plain = [release.version for release in parse_releases(listing, prereleases=False)]
    assert plain == ["2.7.0", "2.6.5"]


async def test_prereleases_are_offered_when_asked(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    server_entry: MockConfigEntry,
) -> None:
    """With "Offer prereleases", a release candidate is offered and installs."""
    release_server.add_board("2.6.0")
    release_server.add_board("2.7.0-rc1", prerelease=True)
    device = await online(init_integration, simulators)
    state = await checked(hass)
    assert state.attributes[ATTR_LATEST_VERSION] == "2.6.0"
    hass.config_entries.async_update_entry(
        server_entry, options={**server_entry.options, CONF_FIRMWARE_PRERELEASES: True}
    )
    state = await checked(hass)
    assert state.attributes[ATTR_LATEST_VERSION] == "2.7.0-rc1"
    await install_version(hass)
    assert device.config.firmware == "2.7.0-rc1"
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)


async def test_a_refused_flash_over_websocket_fails_without_a_check_in(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over WebSocket the device is away while it flashes: no check-in, failed."""
    monkeypatch.setattr(installer, "CHECK_IN_TIMEOUT", 0.5)

    refuse_flash(monkeypatch, "checksum mismatch")
    release_server.add_board("2.6.0")
    device = await online(init_integration, simulators, websocket_only=True)
    await checked(hass)
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "firmware_not_confirmed"
    assert device.upgrades == [(None, "checksum mismatch")]
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is False
    result = init_integration.runtime_data.installer.result
    assert result is not None
    assert (result.version, result.outcome) == ("2.6.0", "failed")


async def test_a_release_is_downloaded_once_for_the_boxes_that_install_it(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tried again (or by another box of the board), the image is not fetched anew.

    A download that failed is not kept: the next install fetches it again.
    """
    monkeypatch.setattr(installer, "RESTART_TIMEOUT", 0.5)

    refuse_flash(monkeypatch, "checksum mismatch")
    name = release_server.add_board("2.6.0")
    content = release_server.files.pop(name)  # not there yet: 404
    device = await online(init_integration, simulators)
    await checked(hass)
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "firmware_download_failed"
    release_server.files[name] = content
    for _ in range(2):
        with pytest.raises(HomeAssistantError) as err:
            await install_version(hass)
        assert err.value.translation_key == "firmware_not_confirmed"
    assert device.upgrades == [(None, "checksum mismatch")] * 2
    assert release_server.downloads == 2  # the failure, then once for both


async def test_a_download_that_breaks_off_fails_at_once(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """The device drops the download half-way: the install fails, saying where."""
    release_server.add(
        "2.6.0", {f"v2.6.0_{BOARD}.zip": board_zip("2.6.0", payload=0x300000)}
    )
    device = await online(init_integration, simulators)
    await checked(hass)

    async def drop_half_way(url: str, _room: int) -> bytes:
        response = await device._client().get(device.rewrite(url))
        await response.content.readexactly(64 * 1024)
        response.close()
        raise ValueError("download cut short")

    device._download_image = drop_half_way  # type: ignore[method-assign]
    started = hass.loop.time()
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "firmware_fetch_broke"
    assert hass.loop.time() - started < 10
    assert device.upgrades == [(None, "download cut short")]


async def test_an_offer_at_boot_that_fails_ends_and_can_be_tried_again(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Offered at its next boot, refused: not installing any more, installs again."""

    release_server.add_board("2.6.0")
    device = await online(init_integration, simulators, websocket_only=True)
    await checked(hass)
    await device.disconnect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda m: not m.connected)
    await install_version(hass)
    assert runtime.installer.in_progress
    refuse_flash(monkeypatch, "checksum mismatch")
    ended = asyncio.Event()
    stop = runtime.installer.async_subscribe(ended.set)
    await device.reboot()  # fetches the offer, refuses it, connects on 2.5.0
    async with asyncio.timeout(10):
        while runtime.installer.in_progress:
            await ended.wait()
            ended.clear()
    stop()
    assert device.upgrades == [(None, "checksum mismatch")]
    result = runtime.installer.result
    assert result is not None
    assert (result.outcome, result.reason) == ("failed", "firmware_not_confirmed")
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is False
    # Installing again is not refused as "in progress".
    monkeypatch.undo()
    await wait_for_runtime(runtime, lambda m: m.connected)
    await install_version(hass)
    assert device.config.firmware == "2.6.0"
    await wait_for_runtime(runtime, lambda m: m.connected)


async def test_one_install_at_a_time_whoever_starts_it(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    release_server: ReleaseServer,
) -> None:
    """The action and the entity share one install: a second one is refused."""
    device = await online(init_integration, simulators)
    runtime = init_integration.runtime_data
    release_server.files["mine.bin"] = merged_binary(app_image(version="2.7.0"))
    release_server.add_board("2.6.0")
    await checked(hass)
    go = asyncio.Event()
    flash = device.upgrade

    async def held_upgrade(url: str) -> None:
        await go.wait()
        await flash(url)

    device.upgrade = held_upgrade  # type: ignore[method-assign]

    async def install_file() -> None:
        await hass.services.async_call(
            DOMAIN,
            "install_firmware",
            {
                "device_id": runtime.entry_data.device_id,
                "firmware": release_server.url("/download/mine.bin"),
            },
            blocking=True,
        )

    sent = asyncio.Event()
    stop = runtime.installer.async_subscribe(
        lambda: runtime.installer.phase == "sent" and sent.set()
    )
    first = hass.async_create_task(install_file())
    await sent.wait()
    stop()
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is True
    assert state.attributes[ATTR_UPDATE_PERCENTAGE] == 0
    with pytest.raises(HomeAssistantError) as err:
        await install_file()
    assert err.value.translation_key == "firmware_install_running"
    with pytest.raises(HomeAssistantError) as err:
        await install_version(hass)
    assert err.value.translation_key == "update_in_progress"
    go.set()
    await first
    assert device.upgrade_urls == device.upgrade_urls[:1]
    assert device.config.firmware == "2.7.0"
    await wait_for_runtime(runtime, lambda m: m.connected)
    state = hass.states.get(firmware_id(hass))
    assert state is not None
    assert state.attributes[ATTR_IN_PROGRESS] is False
    assert state.attributes[ATTR_INSTALLED_VERSION] == "2.7.0"
