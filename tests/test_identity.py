"""Device identity: credentials go to the device that paired, not to its MAC."""

from collections.abc import Callable
from http import HTTPStatus
from ipaddress import ip_address
import logging
from typing import Any

from aiohttp import WSServerHandshakeError
from aiohttp.test_utils import TestClient
from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import issue_registry as ir
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import (
    CONF_CLIENT_ID,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    MAX_PENDING_PER_ADDRESS,
    URL_ACTIVATE,
    URL_OTA,
    URL_VISION,
    URL_WEBSOCKET,
)
from simulator import SimulatedDevice
from simulator.cli import client_id_for

from .conftest import (
    MAC,
    OTA_URL,
    TOKEN,
    WS_URL,
    device_entries,
    device_headers,
    failed_logins,
    system_info,
    wait_for_runtime,
)

NEW_IDENTITY = "3d0c7a52-6d3e-4f0e-9f51-0a8f1e2b7c44"
VOLUME = "self.audio_speaker.set_volume"
LOOPBACK = ip_address("127.0.0.1")


def ws_headers(token: str = TOKEN, client_id: str | None = None) -> dict[str, str]:
    """Return the headers of a device's WebSocket handshake."""
    headers = {"Authorization": f"Bearer {token}", "Device-Id": MAC}
    if client_id is not None:
        headers["Client-Id"] = client_id
    return headers


async def ota(
    client: TestClient[Any, Any],
    mac: str = MAC,
    *,
    client_id: str | None = None,
    forwarded_for: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """Check in at the OTA address as the firmware does; return status and body."""
    headers = device_headers(mac)
    if client_id is not None:
        headers["Client-Id"] = client_id
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    response = await client.post(URL_OTA, json=system_info(mac), headers=headers)
    return response.status, await response.json()


# --- handing out the token -------------------------------------------------------


@pytest.mark.parametrize(
    "client_id",
    [NEW_IDENTITY, client_id_for("aa:bb:cc:dd:ee:02"), client_id_for(MAC).upper()],
    ids=["other", "other-device's", "other-case"],
)
async def test_ota_gives_the_token_only_to_the_identity_that_paired(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    client_id: str,
) -> None:
    """The paired MAC with another Client-Id gets a pairing code, never the token.

    It may be the device after a factory reset: not a failed login.
    """
    status, answer = await ota(client, client_id=client_id)
    assert status == HTTPStatus.OK
    # Its own pending link (a code to show), not the paired device's token.
    assert answer["websocket"]["token"] != TOKEN
    assert TOKEN not in str(answer)
    assert len(answer["activation"]["code"]) == 6
    assert failed_logins(hass) == 0

    status, answer = await ota(client)
    assert status == HTTPStatus.OK
    assert answer["websocket"]["token"] == TOKEN


async def test_ota_needs_a_client_id(
    init_integration: MockConfigEntry, client: TestClient[Any, Any]
) -> None:
    """Without a usable Client-Id nothing is handed out: no token, no code."""
    for value in ("", " ", "a" * 65, "bad id"):
        status, answer = await ota(client, client_id=value)
        assert status == HTTPStatus.BAD_REQUEST
        assert "Client-Id" in answer["error"]
    headers = device_headers()
    del headers["Client-Id"]
    response = await client.post(URL_OTA, json=system_info(), headers=headers)
    assert response.status == HTTPStatus.BAD_REQUEST
    assert TOKEN not in await response.text()


async def test_websocket_with_another_client_id_is_refused_and_counted(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """The token and MAC of a device, with another identity, is a failed login."""
    for client_id in (NEW_IDENTITY, None):
        with pytest.raises(WSServerHandshakeError) as err:
            await client.ws_connect(URL_WEBSOCKET, headers=ws_headers(TOKEN, client_id))
        assert err.value.status == HTTPStatus.UNAUTHORIZED
    assert failed_logins(hass) == 2
    ws = await client.ws_connect(
        URL_WEBSOCKET, headers=ws_headers(TOKEN, client_id_for(MAC))
    )
    await ws.close()


async def test_vision_upload_needs_the_identity(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    client: TestClient[Any, Any],
) -> None:
    """The session's vision token with another Client-Id uploads nothing."""
    device = simulators(ws_url=WS_URL, token=TOKEN, camera=True)
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.session is not None
    response = await client.post(
        URL_VISION,
        data=b"",
        headers={
            "Authorization": f"Bearer {runtime.session.vision_token}",
            "Device-Id": MAC,
            "Client-Id": NEW_IDENTITY,
        },
    )
    assert response.status == HTTPStatus.UNAUTHORIZED
    assert runtime.entry_data.last_photo is None
    await runtime.commands.async_take_photo()
    assert runtime.entry_data.last_photo is not None


# --- pairing that a flood cannot block --------------------------------------------


async def test_a_flood_from_one_address_does_not_block_another(
    hass: HomeAssistant,
    behind_proxy: None,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Forty made-up devices from one address; a real one elsewhere still pairs."""
    caplog.set_level(logging.WARNING)
    statuses = []
    for index in range(40):
        mac = f"02:66:00:00:00:{index:02x}"
        status, _answer = await ota(client, mac, forwarded_for="192.168.1.66")
        statuses.append(status)
    assert statuses == [HTTPStatus.OK] * MAX_PENDING_PER_ADDRESS + [
        HTTPStatus.TOO_MANY_REQUESTS
    ] * (40 - MAX_PENDING_PER_ADDRESS)
    refusals = [r for r in caplog.records if "192.168.1.66" in r.getMessage()]
    assert len(refusals) == 1, "one warning per address and window"
    assert refusals[0].levelno == logging.WARNING

    status, answer = await ota(client, "aa:bb:cc:dd:ee:07", forwarded_for="192.168.1.7")
    assert status == HTTPStatus.OK
    assert len(answer["activation"]["code"]) == 6
    await hass.async_block_till_done()
    cards = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert len(cards) == MAX_PENDING_PER_ADDRESS + 1
    assert {card["context"]["unique_id"] for card in cards} >= {"aa:bb:cc:dd:ee:07"}


# --- a device reset to factory settings ------------------------------------------


async def test_factory_reset_device_pairs_again_with_its_code(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    simulators: Callable[..., SimulatedDevice],
    client: TestClient[Any, Any],
) -> None:
    """A new identity with a paired MAC pairs with the code on its screen.

    The paired identity keeps working until the code is typed, and stops then.
    """
    reset = simulators(ota_url=OTA_URL, client_id=NEW_IDENTITY)
    reset.start()
    code = await reset.wait_activation_code()
    await hass.async_block_till_done()
    (card,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert card["context"]["source"] == SOURCE_INTEGRATION_DISCOVERY
    assert card["step_id"] == "pair_again"
    assert card["context"]["title_placeholders"] == {"name": init_integration.title}

    # Until the code is typed, nothing changes for the paired identity.
    runtime = init_integration.runtime_data
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 11}, check=False)
    ).text == "true"
    _status, answer = await ota(client)
    assert answer["websocket"]["token"] == TOKEN
    response = await client.post(
        URL_ACTIVATE,
        json={},
        headers={**device_headers(), "Client-Id": NEW_IDENTITY},
    )
    assert response.status == HTTPStatus.ACCEPTED

    result = await hass.config_entries.flow.async_configure(
        card["flow_id"], {"code": "000000" if code != "000000" else "111111"}
    )
    assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(
        card["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "paired_again"
    assert init_integration.data[CONF_CLIENT_ID] == NEW_IDENTITY
    assert init_integration.data[CONF_MAC] == MAC
    new_token = init_integration.data[CONF_TOKEN]
    assert new_token != TOKEN
    assert len(device_entries(hass)) == 1

    # The reset device activates, fetches its token and connects.
    await reset.wait_connected()
    assert reset.token == new_token
    await wait_for_runtime(init_integration.runtime_data, lambda d: d.connected)
    # The old identity is out: no token at the OTA address, no socket.
    await simulator.wait_disconnected()
    _status, answer = await ota(client)
    assert "activation" in answer
    assert answer["websocket"]["token"] != new_token
    with pytest.raises(WSServerHandshakeError):
        await client.ws_connect(
            URL_WEBSOCKET, headers=ws_headers(TOKEN, client_id_for(MAC))
        )


# --- devices paired before identities were recorded -------------------------------


@pytest.fixture
async def unbound_entry(
    hass: HomeAssistant, setup_integration: None, mock_config_entry: MockConfigEntry
) -> MockConfigEntry:
    """Load a device paired before Client-Ids were recorded."""
    data = dict(mock_config_entry.data)
    del data[CONF_CLIENT_ID]
    entry = MockConfigEntry(
        domain=DOMAIN,
        unique_id=mock_config_entry.unique_id,
        title=mock_config_entry.title,
        data=data,
    )
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry


async def test_device_paired_before_is_bound_on_first_connection(
    hass: HomeAssistant,
    unbound_entry: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    client: TestClient[Any, Any],
    issue_registry: ir.IssueRegistry,
) -> None:
    """Today's behaviour and a repair issue until the device proves its token."""
    issue_id = f"not_bound_{unbound_entry.entry_id}"
    issue = issue_registry.async_get_issue(DOMAIN, issue_id)
    assert issue is not None
    assert issue.severity is ir.IssueSeverity.WARNING
    assert issue.translation_key == "not_bound"
    # Until then, the token goes to the MAC as before.
    _status, answer = await ota(client, client_id=NEW_IDENTITY)
    assert answer["websocket"]["token"] == TOKEN

    device = simulators(ws_url=WS_URL, token=TOKEN)
    await device.connect()
    await wait_for_runtime(unbound_entry.runtime_data, lambda d: d.connected)
    assert unbound_entry.data[CONF_CLIENT_ID] == device.config.client_id
    assert issue_registry.async_get_issue(DOMAIN, issue_id) is None
    # From now on only that identity gets the token or a socket.
    _status, answer = await ota(client, client_id=NEW_IDENTITY)
    assert "activation" in answer
    assert answer["websocket"]["token"] != TOKEN
    with pytest.raises(WSServerHandshakeError):
        await client.ws_connect(URL_WEBSOCKET, headers=ws_headers(TOKEN, NEW_IDENTITY))


async def test_repair_issue_goes_with_the_entry(
    hass: HomeAssistant,
    unbound_entry: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
) -> None:
    """Removing an unbound device removes its repair issue too."""
    assert await hass.config_entries.async_remove(unbound_entry.entry_id)
    await hass.async_block_till_done()
    assert (
        issue_registry.async_get_issue(DOMAIN, f"not_bound_{unbound_entry.entry_id}")
        is None
    )
