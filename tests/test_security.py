"""Every endpoint refuses what it must, and no secret reaches a log.

Two paired devices are loaded side by side so that each refusal is also a
proof that one device's credentials never open, replace or feed another's.
"""

import asyncio
from collections.abc import Callable
from ipaddress import ip_address
import logging
from typing import Any

from aiohttp import FormData, WSServerHandshakeError
from aiohttp.test_utils import TestClient
from freezegun.api import FrozenDateTimeFactory
from homeassistant.config_entries import SOURCE_RECONFIGURE, SOURCE_USER
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType, UnknownFlow
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_fire_time_changed,
)
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)

from custom_components.xiaozhi.const import (
    CODE_TTL,
    CONF_TOKEN,
    DOMAIN,
    URL_ACTIVATE,
    URL_OTA,
    URL_SNAPSHOT,
    URL_VISION,
    URL_WEBSOCKET,
)
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import TINY_JPEG, SimulatedDevice, relative_url
from simulator.cli import client_id_for

from .conftest import (
    MAC,
    MAC2,
    OTA_URL,
    TOKEN,
    TOKEN2,
    WS_URL,
    device_entries,
    device_headers,
    failed_logins,
    system_info,
    wait_for_runtime,
)

LOOPBACK = ip_address("127.0.0.1")
VOLUME = "self.audio_speaker.set_volume"
PHOTO = "self.camera.take_photo"


@pytest.fixture
async def both_connected(
    init_integration: MockConfigEntry,
    second_entry: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> tuple[SimulatedDevice, SimulatedDevice]:
    """Connect a camera device to each entry."""
    first = simulators(ws_url=WS_URL, token=TOKEN, camera=True)
    second = simulators(ws_url=WS_URL, token=TOKEN2, mac=MAC2, camera=True)
    await first.connect()
    await second.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda d: d.connected)
    await wait_for_runtime(second_entry.runtime_data, lambda d: d.connected)
    return first, second


def photo_form(content: bytes = TINY_JPEG) -> FormData:
    """Return a vision upload as the firmware sends it."""
    form = FormData()
    form.add_field("question", "what is this?")
    form.add_field("file", content, filename="camera.jpg", content_type="image/jpeg")
    return form


def bearer(token: str, mac: str = MAC) -> dict[str, str]:
    """Return the headers of an authenticated device request (its identity)."""
    return {
        "Authorization": f"Bearer {token}",
        "Device-Id": mac,
        "Client-Id": client_id_for(mac),
    }


# --- the WebSocket ---------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Device-Id": MAC},
        bearer("wrong-token"),
        bearer(TOKEN[:-1]),
        bearer(TOKEN + "x"),
        bearer(TOKEN.upper()),
        {"Authorization": TOKEN, "Device-Id": MAC},
        {"Authorization": f"Token {TOKEN}", "Device-Id": MAC},
        bearer(TOKEN2),
        bearer(TOKEN, MAC2),
        bearer(TOKEN, "aa:bb:cc:dd:ee:99"),
        {"Authorization": f"Bearer {TOKEN}", "Client-Id": client_id_for(MAC)},
        {"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC},
        {**bearer(TOKEN), "Client-Id": client_id_for(MAC2)},
        {**bearer(TOKEN), "Client-Id": "0b5e8f7c-3f7d-4a57-9f7e-1c2d3e4f5a6b"},
    ],
    ids=[
        "no-token",
        "wrong-token",
        "token-prefix",
        "token-longer",
        "token-other-case",
        "no-scheme",
        "other-scheme",
        "other-device-token",
        "token-for-other-device-id",
        "unknown-device-id",
        "no-device-id",
        "no-client-id",
        "other-device-client-id",
        "unknown-client-id",
    ],
)
async def test_websocket_refuses_and_leaves_the_live_link_alone(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    second_entry: MockConfigEntry,
    both_connected: tuple[SimulatedDevice, SimulatedDevice],
    client: TestClient[Any, Any],
    headers: dict[str, str],
) -> None:
    """A refused socket is 401 before the upgrade and kicks no device off.

    Token, Device-Id and Client-Id must all be the same device's; every
    refusal counts as a failed login towards Home Assistant's IP ban.
    """
    first, second = both_connected
    sessions = (
        init_integration.runtime_data.session,
        second_entry.runtime_data.session,
    )
    before = failed_logins(hass)
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(URL_WEBSOCKET, headers=headers)
    assert err.value.status == 401
    assert failed_logins(hass) == before + 1
    assert (
        init_integration.runtime_data.session,
        second_entry.runtime_data.session,
    ) == sessions
    assert first.connected
    assert second.connected
    assert first.close_reasons == second.close_reasons == []


async def test_each_token_opens_only_its_own_device(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    second_entry: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """A device's link lands on its own entry; the other entry stays away."""
    second = simulators(ws_url=WS_URL, token=TOKEN2, mac=MAC2)
    await second.connect()
    await wait_for_runtime(second_entry.runtime_data, lambda d: d.connected)
    assert init_integration.runtime_data.session is None
    result = await second_entry.runtime_data.commands.async_call_tool(
        VOLUME, {"volume": 3}, check=False
    )
    assert result.text == "true"
    assert second.state.volume == 3


# --- pairing ---------------------------------------------------------------------


async def test_expired_pairing_code_issues_no_token(
    hass: HomeAssistant,
    client: TestClient[Any, Any],
    freezer: FrozenDateTimeFactory,
) -> None:
    """An expired code pairs nothing: its flow ends, activation is 404, no token."""
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    old_code = (await response.json())["activation"]["code"]
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    response = await client.post(URL_ACTIVATE, json={}, headers=device_headers())
    assert response.status == 202

    freezer.tick(CODE_TTL + 1)
    # The device polls before the expiry timer ran: the code is dead already.
    response = await client.post(URL_ACTIVATE, json={}, headers=device_headers())
    assert response.status == 404
    assert list(hass.config_entries.flow.async_progress_by_handler(DOMAIN)) == []
    with pytest.raises(UnknownFlow):
        await hass.config_entries.flow.async_configure(
            flow["flow_id"], {"code": old_code}
        )
    async_fire_time_changed(hass)
    await hass.async_block_till_done()
    assert device_entries(hass) == []

    # Checking in again gets a new code, never a token; the old code is dead.
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    answer = await response.json()
    assert answer["activation"]["code"] != old_code
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    if answer["activation"]["code"] != old_code:  # one chance in a million
        result = await hass.config_entries.flow.async_configure(
            flow["flow_id"], {"code": old_code}
        )
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"code": "invalid_code"}
    assert device_entries(hass) == []


# --- vision and snapshot uploads -------------------------------------------------


async def test_vision_token_is_bound_to_its_session_and_device(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    second_entry: MockConfigEntry,
    both_connected: tuple[SimulatedDevice, SimulatedDevice],
    client: TestClient[Any, Any],
) -> None:
    """Only the live session's token, sent with its own Device-Id, uploads."""
    first, _second = both_connected
    runtime: XiaozhiRuntime = init_integration.runtime_data
    other: XiaozhiRuntime = second_entry.runtime_data
    assert runtime.session is not None
    assert other.session is not None
    token, other_token = runtime.session.vision_token, other.session.vision_token

    for headers in (
        bearer(other_token),  # the other device's token for this device
        bearer(token, MAC2),  # this device's token for the other device
        bearer(TOKEN),  # the device token is not a vision token
        {"Authorization": f"Bearer {token}"},
    ):
        response = await client.post(URL_VISION, data=photo_form(), headers=headers)
        assert response.status == 401
    assert runtime.entry_data.last_photo is None
    assert other.entry_data.last_photo is None
    # A vision token does not open the WebSocket either.
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(URL_WEBSOCKET, headers=bearer(token))
    assert err.value.status == 401

    response = await client.post(URL_VISION, data=photo_form(), headers=bearer(token))
    assert response.status == 200
    assert runtime.entry_data.last_photo is not None
    assert other.entry_data.last_photo is None

    # Replayed after a reconnect: the old session's token is dead.
    await first.disconnect()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    response = await client.post(URL_VISION, data=photo_form(), headers=bearer(token))
    assert response.status == 401
    await first.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.session.vision_token != token
    response = await client.post(URL_VISION, data=photo_form(), headers=bearer(token))
    assert response.status == 401
    result = await runtime.commands.async_call_tool(
        PHOTO, {"question": "again?"}, check=False
    )
    assert result.is_error is False


async def test_snapshot_url_works_once(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    client: TestClient[Any, Any],
) -> None:
    """The screen upload URL is single use and forgotten after the refresh."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await runtime.commands.async_refresh_screen()
    assert runtime.entry_data.screen is not None
    first_picture = runtime.entry_data.screen
    ((url, _quality),) = simulator.snapshots

    response = await client.post(relative_url(url), data=photo_form())
    assert response.status == 401
    response = await client.post(f"{URL_SNAPSHOT}/not-a-token", data=photo_form())
    assert response.status == 401
    assert runtime.entry_data.screen is first_picture


# --- secrets stay out of logs and diagnostics --------------------------------------


@pytest.fixture
async def platform_views(hass: HomeAssistant, setup_integration: None) -> None:
    """Set up the platforms with HTTP views before the test client starts.

    An entry created by pairing sets its platforms up later, when the HTTP
    router no longer takes new routes.
    """
    for component in ("image", "repairs"):
        assert await async_setup_component(hass, component, {})
    await hass.async_block_till_done()


async def test_tokens_never_reach_logs_or_diagnostics(
    hass: HomeAssistant,
    platform_views: None,
    simulators: Callable[..., SimulatedDevice],
    hass_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pair, connect, call, photograph, snapshot, rotate the token: no secret logged.

    Every logger runs at DEBUG. The simulated device's own records are left
    out of the check: it traces every frame it receives (the vision token of
    ``initialize`` included) and its connection errors show the request
    headers; that is the device's log, not Home Assistant's.
    """
    caplog.set_level(logging.DEBUG)
    device = simulators(ota_url=OTA_URL, camera=True)
    device.start()
    code = await device.wait_activation_code()
    await hass.async_block_till_done()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {"code": code}
    )
    entry = result["result"]
    runtime: XiaozhiRuntime = entry.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    device_tokens = [entry.data[CONF_TOKEN]]
    vision_tokens: list[str] = []

    async def use_the_device() -> None:
        assert runtime.session is not None
        vision_tokens.append(runtime.session.vision_token)
        assert (
            await runtime.commands.async_call_tool(VOLUME, {"volume": 44}, check=False)
        ).text == "true"
        await runtime.session.refresh_status()
        photo = await runtime.commands.async_call_tool(
            PHOTO, {"question": "who is there?"}, check=False
        )
        assert photo.is_error is False
        await runtime.commands.async_refresh_screen()

    await use_the_device()
    diagnostics = [await get_diagnostics_for_config_entry(hass, hass_client, entry)]

    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_RECONFIGURE, "entry_id": entry.entry_id}
    )
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["reason"] == "reconfigure_successful"
    device_tokens.append(entry.data[CONF_TOKEN])
    await device.wait_for(lambda: device.connected and device.token == device_tokens[1])
    await wait_for_runtime(runtime, lambda d: d.connected)
    await use_the_device()
    diagnostics.append(await get_diagnostics_for_config_entry(hass, hass_client, entry))

    assert device_tokens[0] != device_tokens[1]
    assert vision_tokens[0] != vision_tokens[1]
    snapshot_tokens = [url.rsplit("/", 1)[1] for url, _quality in device.snapshots]
    assert len(snapshot_tokens) == 2
    assert device.photos_taken == 2
    records = [
        record for record in caplog.records if not record.name.startswith("simulator")
    ]
    assert any(
        record.levelno == logging.DEBUG and record.name.startswith("custom_components")
        for record in records
    )
    logged = "\n".join(caplog.handler.format(record) for record in records)
    for secret in device_tokens + vision_tokens:
        assert secret not in logged
        assert secret not in str(diagnostics)
    # A snapshot URL is spent by its upload; the web server's access log may
    # show it afterwards, the integration never does.
    integration_log = "\n".join(
        caplog.handler.format(record)
        for record in records
        if record.name.startswith("custom_components")
    )
    for secret in snapshot_tokens:
        assert secret not in integration_log


async def test_a_pairing_flood_from_16_addresses_leaves_room_for_a_quiet_one(
    hass: HomeAssistant, behind_proxy: None, client: TestClient[Any, Any]
) -> None:
    """16 addresses fill every waiting place; a device elsewhere still pairs.

    Each flooding address keeps as many identities waiting as it may; the
    real device, on another address, gets its code on its first check-in and
    the user pairs it with that code.
    """
    loop = asyncio.get_running_loop()
    for host in range(16):
        for number in range(4):
            mac = f"02:00:00:00:{host:02x}:{number:02x}"
            response = await client.post(
                URL_OTA,
                json=system_info(mac),
                headers=device_headers(mac, **{"X-Forwarded-For": f"10.9.{host}.1"}),
            )
            assert response.status == 200
    started = loop.time()
    response = await client.post(
        URL_OTA,
        json=system_info(),
        headers=device_headers(**{"X-Forwarded-For": "192.168.7.7"}),
    )
    assert response.status == 200
    code = (await response.json())["activation"]["code"]
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["result"].unique_id == MAC
    assert loop.time() - started < 1.0
