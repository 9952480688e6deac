"""Shared fixtures: Home Assistant with the integration, entries, HTTP clients."""

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any
from unittest.mock import PropertyMock, patch

from aiohttp.test_utils import TestClient
from homeassistant.components.http.ban import KEY_BAN_MANAGER, KEY_LOGIN_THRESHOLD
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
from homeassistant.setup import async_setup_component
from hypothesis import HealthCheck, settings
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.syrupy import HomeAssistantSnapshotExtension
from syrupy.assertion import SnapshotAssertion

from custom_components.xiaozhi import PLATFORMS
from custom_components.xiaozhi.const import (
    CONF_BOARD,
    CONF_CLIENT_ID,
    CONF_FIRMWARE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
)
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from custom_components.xiaozhi.settings import SERVER_UNIQUE_ID
from simulator import DEFAULT_MAC, DeviceConfig, SimulatedDevice, relative_url
from simulator.cli import client_id_for

# Property tests: "default" runs in CI; "long" (--hypothesis-profile=long) digs
# deeper before a release. Examples feed megabyte frames, so no deadline.
settings.register_profile(
    "default",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "long",
    max_examples=10_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("default")

MAC = "aa:bb:cc:dd:ee:01"
MAC2 = "aa:bb:cc:dd:ee:02"
TOKEN2 = "second-device-token-0123456789abcdefghij"
TOKEN = "device-token-for-tests-0123456789abcdef"
BOARD = "xiaozhi-sim"
FIRMWARE = "2.0.4"
INTERNAL_URL = "http://192.168.1.10:8123"
# Where devices on the MQTT + UDP endpoint reach Home Assistant in tests.
LOOPBACK_URL = "http://127.0.0.1:8123"
LOOPBACK_OTA_URL = LOOPBACK_URL + "/api/xiaozhi/v1/ota/"


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """Serialise Home Assistant objects (states, registry entries) stably."""
    return snapshot.use_extension(HomeAssistantSnapshotExtension)


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(enable_custom_integrations: None) -> None:
    """Let Home Assistant load custom_components/xiaozhi in every test."""


@pytest.fixture
def endpoint_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Return the stored transport settings: WebSocket unless a test opts in.

    The MQTT + UDP endpoint opens real ports; the ``mqtt_endpoint`` mark turns
    it on (on free ports) for the tests of that transport.
    """
    if request.node.get_closest_marker("mqtt_endpoint") is None:
        return {"transport": "websocket", "mqtt_port": 0, "udp_port": 0}
    request.getfixturevalue("socket_enabled")
    return {"transport": "auto", "mqtt_port": 0, "udp_port": 0}


@pytest.fixture
def server_entry(endpoint_settings: dict[str, Any]) -> MockConfigEntry:
    """Return the server entry, holding the integration-wide settings."""
    return MockConfigEntry(
        domain=DOMAIN,
        unique_id=SERVER_UNIQUE_ID,
        title="XiaoZhi server",
        options=endpoint_settings,
    )


@pytest.fixture
async def internal_url(hass: HomeAssistant, request: pytest.FixtureRequest) -> str:
    """Give Home Assistant an internal URL, as a real installation has.

    With the ``mqtt_endpoint`` mark it is on loopback, where the simulated
    devices reach the endpoint's real ports.
    """
    url = (
        INTERNAL_URL
        if request.node.get_closest_marker("mqtt_endpoint") is None
        else LOOPBACK_URL
    )
    await async_process_ha_core_config(hass, {"internal_url": url})
    return url


@pytest.fixture
def mock_config_entry() -> MockConfigEntry:
    """Return a paired device's entry."""
    return MockConfigEntry(
        domain=DOMAIN,
        unique_id=MAC,
        title="XiaoZhi xiaozhi-sim EE:01",
        data={
            CONF_MAC: MAC,
            CONF_CLIENT_ID: client_id_for(MAC),
            CONF_TOKEN: TOKEN,
            CONF_BOARD: BOARD,
            CONF_FIRMWARE: FIRMWARE,
        },
    )


@pytest.fixture
async def setup_integration(
    hass: HomeAssistant, internal_url: str, server_entry: MockConfigEntry
) -> None:
    """Load the integration with its server entry and no device (it answers).

    Home Assistant's own failed logins are counted (with a threshold no test
    reaches), as on an installation with IP bans enabled.
    """
    # Home Assistant's own integration, which every installation has; the voice
    # stack (conversation) needs it.
    assert await async_setup_component(hass, "homeassistant", {})
    server_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(server_entry.entry_id)
    # Components with views of their own, set up before any test client starts
    # (a real installation loads the base platforms at start-up).
    for component in ("diagnostics", "websocket_api", *PLATFORMS):
        assert await async_setup_component(hass, component, {})
    assert KEY_BAN_MANAGER in hass.http.app
    hass.http.app[KEY_LOGIN_THRESHOLD] = 1000
    await hass.async_block_till_done()


@pytest.fixture
def entity_registry_enabled_by_default() -> Generator[None]:
    """Create every entity enabled, those disabled by default too."""
    with patch(
        "homeassistant.helpers.entity.Entity.entity_registry_enabled_default",
        return_value=True,
        new_callable=PropertyMock,
    ):
        yield


@pytest.fixture
def platforms() -> list[Platform] | None:
    """Return the platforms to load (None: all); tests parametrize it."""
    return None


@pytest.fixture(autouse=True)
def _load_only_platforms(platforms: list[Platform] | None) -> Generator[None]:
    """Load only ``platforms`` when a test says which."""
    if platforms is None:
        yield
        return
    with patch("custom_components.xiaozhi.PLATFORMS", platforms):
        yield


@pytest.fixture
async def init_integration(
    hass: HomeAssistant, setup_integration: None, mock_config_entry: MockConfigEntry
) -> MockConfigEntry:
    """Load the integration with one paired device."""
    mock_config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(mock_config_entry.entry_id)
    await hass.async_block_till_done()
    return mock_config_entry


@pytest.fixture
async def second_entry(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> MockConfigEntry:
    """Load a second paired device next to the first."""
    entry = MockConfigEntry(
        domain=DOMAIN,
        unique_id=MAC2,
        title="XiaoZhi xiaozhi-sim EE:02",
        data={
            CONF_MAC: MAC2,
            CONF_CLIENT_ID: client_id_for(MAC2),
            CONF_TOKEN: TOKEN2,
            CONF_BOARD: BOARD,
            CONF_FIRMWARE: FIRMWARE,
        },
    )
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry


@pytest.fixture
async def behind_proxy(hass: HomeAssistant) -> None:
    """Run Home Assistant behind a reverse proxy that says who is asking."""
    assert await async_setup_component(
        hass,
        "http",
        {"http": {"use_x_forwarded_for": True, "trusted_proxies": ["127.0.0.1"]}},
    )


@pytest.fixture
async def client(
    setup_integration: None,
    hass_client_no_auth: Callable[[], Awaitable[TestClient[Any, Any]]],
) -> TestClient[Any, Any]:
    """Return an unauthenticated client on Home Assistant's HTTP server."""
    return await hass_client_no_auth()


def device_headers(mac: str = MAC, **extra: str) -> dict[str, str]:
    """Return the headers the firmware sends with its OTA check."""
    return {
        "Device-Id": mac,
        "Client-Id": client_id_for(mac),
        "User-Agent": f"{BOARD}/{FIRMWARE}",
        "Accept-Language": "zh-CN",
        "Activation-Version": "1",
        **extra,
    }


def system_info(mac: str = MAC) -> dict[str, Any]:
    """Return the body of a firmware OTA check."""
    return {
        "version": 2,
        "mac_address": mac,
        "application": {"name": "xiaozhi", "version": FIRMWARE},
        "board": {"type": BOARD, "name": BOARD},
    }


WS_URL = INTERNAL_URL.replace("http://", "ws://") + "/api/xiaozhi/v1/"
OTA_URL = INTERNAL_URL + "/api/xiaozhi/v1/ota/"


@pytest.fixture
async def simulators(
    client: TestClient[Any, Any],
) -> AsyncGenerator[Callable[..., SimulatedDevice]]:
    """Return a factory of simulated devices talking to Home Assistant.

    Devices reach Home Assistant's real HTTP app through the test client;
    every one is stopped at the end of the test.
    """
    devices: list[SimulatedDevice] = []

    def make(**kwargs: Any) -> SimulatedDevice:
        # A device keeps its identity across restarts: one Client-Id per MAC.
        kwargs.setdefault("client_id", client_id_for(kwargs.get("mac", DEFAULT_MAC)))
        kwargs.setdefault("activation_poll_interval", 0.01)
        kwargs.setdefault("retry_delay", 0.01)
        kwargs.setdefault("reboot_delay", 0.01)
        device = SimulatedDevice(
            DeviceConfig(**kwargs), http=client, url_rewriter=relative_url
        )
        devices.append(device)
        return device

    yield make
    for device in devices:
        await device.stop()


@pytest.fixture
async def simulator(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return a paired simulated device, connected to Home Assistant."""
    device = simulators(ws_url=WS_URL, token=TOKEN)
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda d: d.connected)
    return device


async def wait_for_runtime(
    runtime: XiaozhiRuntime,
    predicate: Callable[[XiaozhiRuntime], bool],
    timeout: float = 5,
) -> None:
    """Wait until ``predicate(runtime)`` holds, woken by the device's listeners."""
    changed = asyncio.Event()
    removers = [
        runtime.entry_data.async_subscribe_state(changed.set),
        runtime.entry_data.async_subscribe_events(lambda _event: changed.set()),
    ]
    try:
        async with asyncio.timeout(timeout):
            while not predicate(runtime):
                await changed.wait()
                changed.clear()
    finally:
        for remove in removers:
            remove()


def failed_logins(hass: HomeAssistant, address: str = "127.0.0.1") -> int:
    """Return the wrong device credentials counted for ``address``."""
    return hass.data[DATA_KEY].logins.failures(address)


def device_entries(hass: HomeAssistant) -> list[ConfigEntry]:
    """Return the entries of paired devices (not the server entry)."""
    return [
        entry
        for entry in hass.config_entries.async_entries(DOMAIN)
        if entry.unique_id != SERVER_UNIQUE_ID
    ]
