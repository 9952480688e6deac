"""A real Assist pipeline with fake engines, and devices that speak and listen."""

import asyncio
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant.const import EVENT_STATE_CHANGED, STATE_UNAVAILABLE
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.helpers import (
    area_registry as ar,
    device_registry as dr,
    entity_registry as er,
)
from homeassistant.helpers.event import async_track_state_change_event
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import (
    CONF_BOARD,
    CONF_CLIENT_ID,
    CONF_FIRMWARE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
)
from simulator import SimulatedDevice
from simulator.cli import client_id_for
from tests.conftest import (
    BOARD,
    FIRMWARE,
    LOOPBACK_OTA_URL,
    MAC,
    TOKEN,
    WS_URL,
    wait_for_runtime,
)
from tests.voice.engines import Voice, async_setup_engines, loud, tts_cache_in

__all__ = ["Voice", "loud", "mac_of", "satellite_id", "token_of"]


def satellite_id(hass: HomeAssistant, mac: str = MAC) -> str:
    """Return the satellite entity of the device (of the box with ``mac``)."""
    entity_id = er.async_get(hass).async_get_entity_id(
        "assist_satellite", DOMAIN, f"{mac}-assist_satellite"
    )
    assert entity_id is not None
    return entity_id


def state_reached(
    hass: HomeAssistant, entity_id: str, state: str
) -> asyncio.Future[None]:
    """Return a future that resolves once ``entity_id`` is in ``state``."""
    reached: asyncio.Future[None] = hass.loop.create_future()

    @callback
    def changed(event: Event[EventStateChangedData]) -> None:
        new = event.data["new_state"]
        if new is not None and new.state == state and not reached.done():
            reached.set_result(None)
            stop()

    stop = async_track_state_change_event(hass, entity_id, changed)
    return reached


@pytest.fixture
def tts_cache(tmp_path: Path) -> Generator[None]:
    """Keep text-to-speech files in the test's own directory."""
    with tts_cache_in(tmp_path):
        yield


@pytest.fixture
async def voice(hass: HomeAssistant, tts_cache: None) -> Voice:
    """Set up fake speech-to-text, text-to-speech and agent entities."""
    return await async_setup_engines(hass)


@pytest.fixture
def went_unavailable(hass: HomeAssistant) -> Generator[list[str]]:
    """Record every entity that becomes unavailable, even for a moment."""
    entities: list[str] = []

    @callback
    def record(event: Event[EventStateChangedData]) -> None:
        new = event.data["new_state"]
        if new is not None and new.state == STATE_UNAVAILABLE:
            entities.append(new.entity_id)

    stop = hass.bus.async_listen(EVENT_STATE_CHANGED, record)
    yield entities
    stop()


@pytest.fixture
async def setup_integration(voice: Voice, setup_integration: None) -> None:
    """Set the integration up after the engines: they make the default pipeline."""


@pytest.fixture(autouse=True)
async def _home_assistant_serves_its_media(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """Make Home Assistant's own URLs (media, the chime) reach its test server.

    Announcement media is fetched over HTTP like any other media; in tests
    Home Assistant's web server is the test client's.
    """
    hass.config.internal_url = str(client.make_url("/")).rstrip("/")


@pytest.fixture
async def talker(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return the paired device, ready to be woken (it dials when woken)."""
    del hass
    return simulators(ws_url=WS_URL, token=TOKEN, mic_speed=4.0)


async def connected(device: SimulatedDevice, entry: MockConfigEntry) -> None:
    """Connect a device and wait until Home Assistant has its tools."""
    await device.connect()
    await wait_for_runtime(entry.runtime_data, lambda d: d.connected)


def mac_of(index: int) -> str:
    """Return the MAC of the ``index``-th box of a test."""
    return f"aa:bb:cc:dd:ee:{0x10 + index:02x}"


def token_of(index: int) -> str:
    """Return the token of the ``index``-th box of a test."""
    return f"arbitration-test-token-{index:02d}-0123456789abcdef"


@pytest.fixture
def boxes(
    hass: HomeAssistant, setup_integration: None
) -> Callable[..., Awaitable[list[MockConfigEntry]]]:
    """Return a factory of paired boxes, each in the area given (None: none)."""

    async def make(*areas: str | None, **options: Any) -> list[MockConfigEntry]:
        entries = []
        area_registry = ar.async_get(hass)
        for index, area in enumerate(areas):
            entry = MockConfigEntry(
                domain=DOMAIN,
                unique_id=mac_of(index),
                title=f"Box {index}",
                data={
                    CONF_MAC: mac_of(index),
                    CONF_CLIENT_ID: client_id_for(mac_of(index)),
                    CONF_TOKEN: token_of(index),
                    CONF_BOARD: BOARD,
                    CONF_FIRMWARE: FIRMWARE,
                },
                options=options,
            )
            entry.add_to_hass(hass)
            assert await hass.config_entries.async_setup(entry.entry_id)
            if area is not None:
                area_id = (
                    area_registry.async_get_area_by_name(area)
                    or area_registry.async_create(area)
                ).id
                dr.async_get(hass).async_update_device(
                    entry.runtime_data.entry_data.device_id, area_id=area_id
                )
            entries.append(entry)
        await hass.async_block_till_done()
        return entries

    return make


@pytest.fixture
def devices(
    simulators: Callable[..., SimulatedDevice],
) -> Callable[..., Awaitable[list[SimulatedDevice]]]:
    """Return a factory of connected simulated boxes for the entries given."""

    async def make(
        entries: list[MockConfigEntry], *, mqtt: bool = False
    ) -> list[SimulatedDevice]:
        made = []
        for index, entry in enumerate(entries):
            if mqtt:
                device = simulators(
                    ota_url=LOOPBACK_OTA_URL, mac=mac_of(index), mic_speed=4.0
                )
                await device.provision()
            else:
                device = simulators(
                    ws_url=WS_URL,
                    token=token_of(index),
                    mac=mac_of(index),
                    mic_speed=4.0,
                )
            await device.connect()
            assert device.uses_mqtt is mqtt
            await wait_for_runtime(entry.runtime_data, lambda r: r.connected)
            made.append(device)
        return made

    return make
