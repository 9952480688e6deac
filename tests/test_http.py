"""The device endpoints refuse what they must, with clear statuses."""

from typing import Any

from aiohttp import FormData, WSServerHandshakeError
from aiohttp.test_utils import TestClient
from homeassistant.config_entries import (
    SOURCE_IGNORE,
    ConfigEntryDisabler,
    ConfigEntryState,
)
from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import (
    CONF_MAC,
    DOMAIN,
    MAX_OTA_BODY,
    MAX_PENDING_DEVICES,
    MAX_PENDING_PER_ADDRESS,
    MAX_PHOTO_BYTES,
    URL_ACTIVATE,
    URL_OTA,
    URL_VISION,
    URL_WEBSOCKET,
)
from custom_components.xiaozhi.domain_data import DATA_KEY
from simulator import TINY_JPEG
from simulator.cli import client_id_for

from .conftest import (
    MAC,
    TOKEN,
    WS_URL,
    device_headers,
    failed_logins,
    system_info,
    wait_for_runtime,
)


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({}, b"{}", 400),
        ({"Device-Id": "not-a-mac"}, b"{}", 400),
        (device_headers(), b"{not json", 400),
        (device_headers(), b"[1, 2]", 400),
        (device_headers(), b"x" * (MAX_OTA_BODY + 1), 413),
    ],
    ids=["no-device-id", "bad-device-id", "bad-json", "not-object", "too-large"],
)
@pytest.mark.parametrize("url", [URL_OTA, URL_ACTIVATE])
async def test_malformed_ota_requests(
    hass: HomeAssistant,
    client: TestClient[Any, Any],
    url: str,
    headers: dict[str, str],
    body: bytes,
    status: int,
) -> None:
    """Malformed check-ins get a 4xx with a reason, never a 500."""
    response = await client.post(url, data=body, headers=headers)
    assert response.status == status
    assert (await response.json())["error"]
    assert list(hass.config_entries.flow.async_progress_by_handler(DOMAIN)) == []


async def test_ota_chunked_body_too_large(client: TestClient[Any, Any]) -> None:
    """A body without Content-Length is still cut at the limit."""

    async def chunks() -> Any:
        for _ in range(MAX_OTA_BODY // 1024 + 2):
            yield b"x" * 1024

    response = await client.post(URL_OTA, data=chunks(), headers=device_headers())
    assert response.status == 413


async def test_ota_empty_body_and_dash_mac(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """An empty body is tolerated and MAC spellings are normalised."""
    response = await client.post(
        URL_OTA.rstrip("/"),
        data=b"",
        headers={
            "Device-Id": MAC.upper().replace(":", "-"),
            "Client-Id": "0b5e8f7c-3f7d-4a57-9f7e-1c2d3e4f5a6b",
            "User-Agent": "box/1.2",
        },
    )
    assert response.status == 200
    assert "activation" in await response.json()
    await hass.async_block_till_done()
    flow = next(iter(hass.config_entries.flow.async_progress_by_handler(DOMAIN)))
    assert flow["context"]["unique_id"] == MAC
    assert (
        flow["context"]["title_placeholders"]["name"] == f"XiaoZhi {MAC.upper()} (box)"
    )


async def test_ota_ignored_device(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """A device the user ignored is not offered for pairing again."""
    MockConfigEntry(domain=DOMAIN, unique_id=MAC, source=SOURCE_IGNORE).add_to_hass(
        hass
    )
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    assert response.status == 403
    response = await client.post(URL_ACTIVATE, headers=device_headers())
    assert response.status == 404
    assert list(hass.config_entries.flow.async_progress_by_handler(DOMAIN)) == []


async def test_ota_disabled_device(
    hass: HomeAssistant,
    client: TestClient[Any, Any],
    mock_config_entry: MockConfigEntry,
) -> None:
    """A disabled device gets no token."""
    MockConfigEntry(
        domain=DOMAIN,
        unique_id=MAC,
        data=mock_config_entry.data,
        disabled_by=ConfigEntryDisabler.USER,
    ).add_to_hass(hass)
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    assert response.status == 403


async def test_ota_known_device_without_internal_url(
    hass: HomeAssistant,
    hass_client_no_auth: Any,
    mock_config_entry: MockConfigEntry,
) -> None:
    """Without a configured URL the device is sent back where it came from."""
    assert await async_setup_component(hass, "homeassistant", {})
    assert await async_setup_component(hass, DOMAIN, {})
    mock_config_entry.add_to_hass(hass)
    client = await hass_client_no_auth()
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    assert response.status == 200
    websocket = (await response.json())["websocket"]
    assert websocket["url"] == f"ws://{client.host}:{client.port}{URL_WEBSOCKET}"
    assert websocket["token"] == TOKEN


def _failed_logins(hass: HomeAssistant) -> int:
    return failed_logins(hass)


@pytest.mark.parametrize(
    "headers",
    [
        device_headers(),
        device_headers(Authorization="Bearer wrong-token"),
        device_headers(Authorization=f"Basic {TOKEN}"),
        device_headers(Authorization="Bearer "),
        device_headers("aa:bb:cc:dd:ee:99", Authorization=f"Bearer {TOKEN}"),
        {"Authorization": f"Bearer {TOKEN}"},
    ],
    ids=["no-token", "wrong-token", "not-bearer", "empty", "other-mac", "no-mac"],
)
async def test_websocket_refused_before_upgrade(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    headers: dict[str, str],
) -> None:
    """Bad credentials get 401 before the upgrade and count as failed logins."""
    before = _failed_logins(hass)
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(URL_WEBSOCKET, headers=headers)
    assert err.value.status == 401
    assert _failed_logins(hass) == before + 1


async def test_websocket_entry_not_loaded(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """A paired device whose entry is not loaded is told so."""
    await hass.config_entries.async_unload(init_integration.entry_id)
    assert init_integration.state is ConfigEntryState.NOT_LOADED
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(
            URL_WEBSOCKET, headers=device_headers(Authorization=f"Bearer {TOKEN}")
        )
    assert err.value.status == 503


async def test_websocket_entry_disabled(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """A disabled device is refused."""
    await hass.config_entries.async_set_disabled_by(
        init_integration.entry_id, ConfigEntryDisabler.USER
    )
    await hass.async_block_till_done()
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(
            URL_WEBSOCKET, headers=device_headers(Authorization=f"Bearer {TOKEN}")
        )
    assert err.value.status == 403


async def test_websocket_token_of_other_device(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """One device's token does not open another device's link."""
    other = MockConfigEntry(
        domain=DOMAIN,
        unique_id="aa:bb:cc:dd:ee:02",
        data={**init_integration.data, CONF_MAC: "aa:bb:cc:dd:ee:02", "token": "t2"},
    )
    other.add_to_hass(hass)
    with pytest.raises(WSServerHandshakeError) as err:
        await client.ws_connect(
            URL_WEBSOCKET,
            headers=device_headers(
                "aa:bb:cc:dd:ee:02", Authorization=f"Bearer {TOKEN}"
            ),
        )
    assert err.value.status == 401


@pytest.mark.parametrize(
    "headers",
    [
        {},
        device_headers(),
        device_headers(Authorization="Bearer guess"),
        device_headers("aa:bb:cc:dd:ee:99", Authorization="Bearer guess"),
    ],
    ids=["nothing", "no-token", "wrong-token", "unknown-device"],
)
async def test_vision_refused(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    headers: dict[str, str],
) -> None:
    """Uploads need the current session's vision token."""
    before = _failed_logins(hass)
    response = await client.post(URL_VISION, data=b"x", headers=headers)
    assert response.status == 401
    assert _failed_logins(hass) == before + 1


async def test_ota_caps_pending_pairings(
    hass: HomeAssistant, behind_proxy: None, client: TestClient[Any, Any]
) -> None:
    """One address waits with 4 devices at most; when all wait, the busiest yields."""

    async def check_in(mac: str, address: str) -> int:
        response = await client.post(
            URL_OTA,
            json=system_info(mac),
            headers={**device_headers(mac), "X-Forwarded-For": address},
        )
        return response.status

    for index in range(MAX_PENDING_PER_ADDRESS):
        assert await check_in(f"aa:bb:cc:dd:01:{index:02x}", "10.0.1.1") == 200
    assert await check_in("aa:bb:cc:dd:01:ff", "10.0.1.1") == 429
    for index in range(MAX_PENDING_DEVICES - MAX_PENDING_PER_ADDRESS):
        mac = f"aa:bb:cc:dd:{index // 256:02x}:{index % 256:02x}"
        assert await check_in(mac, f"10.0.0.{index}") == 200
    # Full: a newcomer elsewhere is let in; the oldest of 10.0.1.1 made room.
    assert await check_in("aa:bb:cc:ff:ff:ff", "10.0.2.1") == 200
    pairing = hass.data[DATA_KEY].pairing
    assert pairing.pending_for("aa:bb:cc:dd:01:00") == []
    assert pairing.pending_for("aa:bb:cc:ff:ff:ff")
    # A device already waiting still gets its code.
    assert await check_in("aa:bb:cc:dd:00:00", "10.0.0.0") == 200
    await hass.async_block_till_done()


async def test_ota_hands_out_wss_behind_tls(
    hass: HomeAssistant, init_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """With an https:// internal URL the device is told to dial wss://."""
    await async_process_ha_core_config(
        hass, {"internal_url": "https://ha.example.org:8123"}
    )
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    websocket = (await response.json())["websocket"]
    assert websocket["url"] == f"wss://ha.example.org:8123{URL_WEBSOCKET}"


async def test_vision_part_over_the_limit_is_refused(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Any,
    client: TestClient[Any, Any],
) -> None:
    """A chunked upload (no length) is cut off at the photo limit: 413."""
    device = simulators(ws_url=WS_URL, token=TOKEN, camera=True)
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.session is not None

    async def body() -> Any:
        yield (
            b'--b\r\nContent-Disposition: form-data; name="file"; '
            b'filename="camera.jpg"\r\nContent-Type: image/jpeg\r\n\r\n\xff\xd8\xff'
        )
        for _ in range(MAX_PHOTO_BYTES // 65536 + 2):
            yield b"\x00" * 65536
        yield b"\r\n--b--\r\n"

    response = await client.post(
        URL_VISION,
        data=body(),
        headers={
            "Authorization": f"Bearer {runtime.session.vision_token}",
            "Device-Id": MAC,
            "Client-Id": client_id_for(MAC),
            "Content-Type": "multipart/form-data; boundary=b",
        },
    )
    assert response.status == 413
    assert runtime.entry_data.last_photo is None


@pytest.mark.parametrize(
    "photo",
    [
        b"\xff\xd8\xff<html><script>alert(1)</script></html>",
        TINY_JPEG[: len(TINY_JPEG) // 2],  # cut short
    ],
    ids=["html_behind_a_jpeg_header", "truncated"],
)
async def test_vision_upload_must_decode_as_a_picture(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Any,
    client: TestClient[Any, Any],
    photo: bytes,
) -> None:
    """Only a picture is kept and served back as image/jpeg."""
    device = simulators(ws_url=WS_URL, token=TOKEN, camera=True)
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.session is not None
    form = FormData()
    form.add_field("question", "what is this?")
    form.add_field("file", photo, filename="camera.jpg", content_type="image/jpeg")
    response = await client.post(
        URL_VISION,
        data=form,
        headers={
            "Authorization": f"Bearer {runtime.session.vision_token}",
            "Device-Id": MAC,
            "Client-Id": client_id_for(MAC),
        },
    )
    assert response.status == 400
    assert "not a JPEG picture" in await response.text()
    assert runtime.entry_data.last_photo is None
