"""Pairing: the device checks in at the OTA endpoint, the user types its code."""

import socket
from typing import Any
from unittest.mock import patch

from aiohttp.test_utils import TestClient
from freezegun.api import FrozenDateTimeFactory
from homeassistant.config_entries import (
    SOURCE_IGNORE,
    SOURCE_INTEGRATION_DISCOVERY,
    SOURCE_USER,
)
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers.network import NoURLAvailableError
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_fire_time_changed,
)

from custom_components.xiaozhi.const import (
    CONF_CALL_TIMEOUT,
    CONF_KEEPALIVE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    MAX_CODE_ATTEMPTS,
    URL_ACTIVATE,
    URL_OTA,
    WAIT_FOR_DEVICE_TIMEOUT,
)
from custom_components.xiaozhi.data import DATA_KEY
from custom_components.xiaozhi.endpoints import EndpointSettings, Transport
from simulator.cli import client_id_for

from .conftest import BOARD, FIRMWARE, MAC, TOKEN, device_headers, system_info

MAC2 = "aa:bb:cc:dd:ee:02"


async def check_in(client: TestClient[Any, Any], mac: str = MAC) -> dict[str, Any]:
    """Do what the firmware does at boot; return the OTA answer."""
    response = await client.post(
        URL_OTA, json=system_info(mac), headers=device_headers(mac)
    )
    assert response.status == 200
    return await response.json()


async def activate_status(client: TestClient[Any, Any], mac: str = MAC) -> int:
    """Poll the activation endpoint like the firmware; return the status."""
    response = await client.post(URL_ACTIVATE, json={}, headers=device_headers(mac))
    return response.status


def discovery_flows(hass: HomeAssistant) -> list[dict[str, Any]]:
    """Return the flows in progress for the integration."""
    return list(hass.config_entries.flow.async_progress_by_handler(DOMAIN))


async def test_discovery_pairing(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """An unknown device gets a code; typing it creates the entry."""
    answer = await check_in(client)
    activation = answer["activation"]
    assert len(activation["code"]) == 6
    assert activation["code"].isdigit()
    assert activation["code"] in activation["message"]
    assert activation["challenge"]
    assert 0 < activation["timeout_ms"] <= 600_000
    # A link for clients that connect before pairing; its token is the one
    # the device gets once paired.
    pending_token = answer["websocket"]["token"]
    assert len(pending_token) >= 32
    assert answer["server_time"]["timestamp"] > 0
    assert await activate_status(client) == 202

    await hass.async_block_till_done()
    flows = discovery_flows(hass)
    assert len(flows) == 1
    flow = flows[0]
    assert flow["context"]["source"] == SOURCE_INTEGRATION_DISCOVERY
    assert flow["context"]["unique_id"] == MAC
    assert flow["context"]["title_placeholders"] == {
        "name": f"XiaoZhi {BOARD} ({MAC.upper()})"
    }
    assert flow["step_id"] == "pair"

    # The device checks in again: same code, no second flow.
    again = await check_in(client)
    assert again["activation"]["code"] == activation["code"]
    await hass.async_block_till_done()
    assert len(discovery_flows(hass)) == 1

    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {"code": activation["code"]}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == f"XiaoZhi {BOARD} EE:01"
    entry = result["result"]
    assert entry.unique_id == MAC
    assert entry.data[CONF_MAC] == MAC
    token = entry.data[CONF_TOKEN]
    assert token == pending_token

    assert await activate_status(client) == 200
    answer = await check_in(client)
    assert answer["websocket"] == {
        "url": "ws://192.168.1.10:8123/api/xiaozhi/v1/",
        "token": token,
        "version": 1,
    }
    assert "activation" not in answer


async def test_wrong_code_then_rotation(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """Wrong codes are refused; after too many the code changes."""
    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    flow_id = discovery_flows(hass)[0]["flow_id"]
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"

    for _ in range(MAX_CODE_ATTEMPTS - 1):
        result = await hass.config_entries.flow.async_configure(
            flow_id, {"code": wrong}
        )
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"code": "invalid_code"}

    result = await hass.config_entries.flow.async_configure(flow_id, {"code": wrong})
    assert result["errors"] == {"code": "code_rotated"}

    new_code = (await check_in(client))["activation"]["code"]
    assert new_code != code
    # The old code no longer works, the new one does (spaces tolerated).
    result = await hass.config_entries.flow.async_configure(flow_id, {"code": code})
    assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(
        flow_id, {"code": f" {new_code[:3]} {new_code[3:]} "}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY


async def test_code_expires(
    hass: HomeAssistant, client: TestClient[Any, Any], freezer: FrozenDateTimeFactory
) -> None:
    """An unused code expires and its stale flow ends."""
    await check_in(client)
    await hass.async_block_till_done()
    assert len(discovery_flows(hass)) == 1

    freezer.tick(601)
    async_fire_time_changed(hass)
    await hass.async_block_till_done()

    assert discovery_flows(hass) == []
    assert await activate_status(client) == 404
    # Checking in again starts over with a new flow.
    await check_in(client)
    await hass.async_block_till_done()
    assert len(discovery_flows(hass)) == 1


async def test_code_expired_while_form_open(
    hass: HomeAssistant, client: TestClient[Any, Any], freezer: FrozenDateTimeFactory
) -> None:
    """A code typed after expiry ends the user's flow with a clear reason."""
    code = (await check_in(client))["activation"]["code"]
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    await hass.async_block_till_done()
    result = await hass.config_entries.flow.async_configure(result["flow_id"])
    assert result["step_id"] == "pair"

    freezer.tick(601)
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "code_expired"
    async_fire_time_changed(hass)
    await hass.async_block_till_done()


@pytest.mark.parametrize("paired", [False, True], ids=["new", "paired"])
async def test_discovery_without_a_live_code_aborts(
    hass: HomeAssistant,
    setup_integration: None,
    mock_config_entry: MockConfigEntry,
    paired: bool,
) -> None:
    """A discovery with no identity waiting for its MAC has nothing to pair."""
    if paired:
        mock_config_entry.add_to_hass(hass)
    result = await hass.config_entries.flow.async_init(
        DOMAIN,
        context={"source": SOURCE_INTEGRATION_DISCOVERY},
        data={CONF_MAC: MAC},
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "code_expired"


async def test_discovery_of_an_ignored_device_aborts(
    hass: HomeAssistant, setup_integration: None
) -> None:
    """A device the user ignored stays ignored, even with a code waiting."""
    MockConfigEntry(domain=DOMAIN, unique_id=MAC, source=SOURCE_IGNORE).add_to_hass(
        hass
    )
    hass.data[DATA_KEY].pairing.check_in(
        mac=MAC,
        client_id=client_id_for(MAC),
        address="192.168.1.20",
        board=BOARD,
        firmware=FIRMWARE,
        paired=True,
    )
    await hass.async_block_till_done()
    result = await hass.config_entries.flow.async_init(
        DOMAIN,
        context={"source": SOURCE_INTEGRATION_DISCOVERY},
        data={CONF_MAC: MAC},
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "already_configured"


async def test_user_flow_waits_for_device(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """Add integration explains the OTA address, then pairs the next device."""
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "user"
    assert result["description_placeholders"] == {
        "ota_url": "http://192.168.1.10:8123/api/xiaozhi/v1/ota/"
    }

    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.SHOW_PROGRESS
    assert result["progress_action"] == "wait_for_device"
    flow_id = result["flow_id"]

    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    # The waiting flow took the device: no separate discovery flow.
    assert [flow["flow_id"] for flow in discovery_flows(hass)] == [flow_id]

    result = await hass.config_entries.flow.async_configure(flow_id)
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "pair"
    assert result["description_placeholders"] == {
        "name": f"XiaoZhi {BOARD} ({MAC.upper()})",
        "board": BOARD,
        "mac": MAC.upper(),
    }
    result = await hass.config_entries.flow.async_configure(flow_id, {"code": code})
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["result"].unique_id == MAC


async def test_user_flow_takes_pending_device(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """A device that checked in before the user started is paired at once."""
    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    discovered = discovery_flows(hass)[0]["flow_id"]

    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    await hass.async_block_till_done()
    result = await hass.config_entries.flow.async_configure(result["flow_id"])
    assert result["step_id"] == "pair"
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    # The discovery flow for the same device ended with the new entry.
    await hass.async_block_till_done()
    assert discovered not in {flow["flow_id"] for flow in discovery_flows(hass)}


async def test_user_flow_no_device(
    hass: HomeAssistant, setup_integration: None, freezer: FrozenDateTimeFactory
) -> None:
    """Nobody checks in: the flow ends and says what to check."""
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.SHOW_PROGRESS

    freezer.tick(WAIT_FOR_DEVICE_TIMEOUT + 1)
    async_fire_time_changed(hass)
    await hass.async_block_till_done()
    result = await hass.config_entries.flow.async_configure(result["flow_id"])
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "no_device"


async def test_user_flow_without_internal_url(hass: HomeAssistant) -> None:
    """Without a known address the instructions still show a usable example."""
    assert await async_setup_component(hass, "homeassistant", {})
    with patch(
        "custom_components.xiaozhi.config_flow.get_url",
        side_effect=NoURLAvailableError,
    ):
        result = await hass.config_entries.flow.async_init(
            DOMAIN, context={"source": SOURCE_USER}
        )
    assert result["description_placeholders"] == {
        "ota_url": "http://homeassistant.local:8123/api/xiaozhi/v1/ota/"
    }


async def test_user_flow_device_already_paired(
    hass: HomeAssistant,
    client: TestClient[Any, Any],
    mock_config_entry: MockConfigEntry,
) -> None:
    """A device that was paired meanwhile by discovery ends the user flow."""
    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    discovered = discovery_flows(hass)[0]["flow_id"]
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    await hass.async_block_till_done()
    user_flow = result["flow_id"]

    result = await hass.config_entries.flow.async_configure(discovered, {"code": code})
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await hass.async_block_till_done()
    assert user_flow not in {flow["flow_id"] for flow in discovery_flows(hass)}


async def test_reconfigure_issues_new_token(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """Reconfigure replaces the token; the old one stops working."""
    entry = init_integration
    result = await entry.start_reconfigure_flow(hass)
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "reconfigure"
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reconfigure_successful"
    assert entry.data[CONF_TOKEN] != TOKEN
    assert len(entry.data[CONF_TOKEN]) >= 32


WEBSOCKET_ONLY = {"transport": "websocket", "mqtt_port": 1885, "udp_port": 1886}


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_options(hass: HomeAssistant, init_integration: MockConfigEntry) -> None:
    """Options set the command timeout and the keep-alive of the device."""
    entry = init_integration
    result = await hass.config_entries.options.async_init(entry.entry_id)
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "init"
    # The dialog says which device it is for.
    assert result["description_placeholders"]["name"] == entry.title
    result = await hass.config_entries.options.async_configure(
        result["flow_id"],
        {CONF_CALL_TIMEOUT: 12, CONF_KEEPALIVE: False, "transport": WEBSOCKET_ONLY},
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert entry.options == {CONF_CALL_TIMEOUT: 12, CONF_KEEPALIVE: False}
    assert entry.runtime_data.call_timeout == 12
    assert entry.runtime_data.keepalive is False
    endpoints = hass.data[DATA_KEY].endpoints
    assert endpoints.settings == EndpointSettings(
        transport=Transport.WEBSOCKET, mqtt_port=1885, udp_port=1886
    )
    assert not endpoints.active


@pytest.mark.parametrize("field", ["mqtt_port", "udp_port"])
@pytest.mark.parametrize("port", [1883, 8883])
async def test_options_refuse_a_brokers_port(
    hass: HomeAssistant, init_integration: MockConfigEntry, field: str, port: int
) -> None:
    result = await hass.config_entries.options.async_init(init_integration.entry_id)
    transport = {**WEBSOCKET_ONLY, "transport": "auto", field: port}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"],
        {CONF_CALL_TIMEOUT: 30, CONF_KEEPALIVE: True, "transport": transport},
    )
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {"base": "port_reserved"}
    assert result["description_placeholders"]["port"] == str(port)


async def test_options_open_the_endpoint_and_report_a_taken_port(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    socket_enabled: None,
    hass_storage: dict[str, Any],
) -> None:
    """MQTT + UDP opens at once; a port in use is said, and nothing changes."""
    endpoints = hass.data[DATA_KEY].endpoints
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        busy = taken.getsockname()[1]
        result = await hass.config_entries.options.async_init(init_integration.entry_id)
        transport = {"transport": "auto", "mqtt_port": busy, "udp_port": 1886}
        result = await hass.config_entries.options.async_configure(
            result["flow_id"],
            {CONF_CALL_TIMEOUT: 30, CONF_KEEPALIVE: True, "transport": transport},
        )
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"base": "port_unavailable"}
        assert result["description_placeholders"]["port"] == str(busy)
        assert "in use" in result["description_placeholders"]["error"]
        assert endpoints.settings.transport is Transport.WEBSOCKET
        assert not endpoints.active

        mqtt_port, udp_port = _free_port(), _free_port(socket.SOCK_DGRAM)
        transport = {"transport": "auto", "mqtt_port": mqtt_port, "udp_port": udp_port}
        result = await hass.config_entries.options.async_configure(
            result["flow_id"],
            {CONF_CALL_TIMEOUT: 30, CONF_KEEPALIVE: True, "transport": transport},
        )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert endpoints.active
    assert endpoints.mqtt.port == mqtt_port
    assert endpoints.udp.port == udp_port
    assert hass_storage["xiaozhi.endpoints"]["data"] == {
        "transport": "auto",
        "mqtt_port": mqtt_port,
        "udp_port": udp_port,
    }
    await endpoints.async_stop()
