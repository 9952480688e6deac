"""Pairing: the device checks in at the OTA endpoint, the user types its code."""

import socket
from typing import Any
from unittest.mock import patch

from aiohttp.test_utils import TestClient
from freezegun.api import FrozenDateTimeFactory
from homeassistant.config_entries import (
    SOURCE_IGNORE,
    SOURCE_INTEGRATION_DISCOVERY,
    SOURCE_SYSTEM,
    SOURCE_USER,
    ConfigEntryDisabler,
    ConfigEntryState,
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
from pytest_homeassistant_custom_component.test_util.aiohttp import AiohttpClientMocker

from custom_components.xiaozhi.const import (
    CONF_CALL_TIMEOUT,
    CONF_KEEPALIVE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    MAX_CODE_ATTEMPTS,
    URL_ACTIVATE,
    URL_OTA,
)
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.settings import (
    DEFAULT_RELEASES_URL,
    SERVER_UNIQUE_ID,
    Transport,
)
from simulator.cli import client_id_for

from .conftest import BOARD, FIRMWARE, MAC, TOKEN, device_headers, system_info

MAC2 = "aa:bb:cc:dd:ee:02"
WEBSOCKET_ONLY = {"transport": "websocket", "mqtt_port": 1885, "udp_port": 1886}


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
        "name": f"XiaoZhi {MAC.upper()} ({BOARD})"
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
    """A code typed after expiry ends the card's flow with a clear reason."""
    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    result = discovery_flows(hass)[0]
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
    )
    await hass.async_block_till_done()
    result = await hass.config_entries.flow.async_init(
        DOMAIN,
        context={"source": SOURCE_INTEGRATION_DISCOVERY},
        data={CONF_MAC: MAC},
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "already_configured"


async def test_the_first_flow_makes_home_assistant_the_server(
    hass: HomeAssistant, internal_url: str, socket_enabled: None
) -> None:
    """Without a server entry, adding the integration creates it, settings first."""
    assert await async_setup_component(hass, "homeassistant", {})
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "server"
    assert result["description_placeholders"] == {
        "ota_url": "http://192.168.1.10:8123/api/xiaozhi/v1/ota/"
    }
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {**WEBSOCKET_ONLY, "mqtt_port": 1883}
    )
    assert result["errors"] == {"mqtt_port": "port_reserved"}
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], WEBSOCKET_ONLY
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["title"] == "XiaoZhi server"
    server = result["result"]
    assert server.unique_id == SERVER_UNIQUE_ID
    assert server.options == {**WEBSOCKET_ONLY, **LATER_DEFAULTS}
    await hass.async_block_till_done()
    assert server.state is ConfigEntryState.LOADED

    # From now on the same button pairs a device by its code.
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    assert result["step_id"] == "code"
    # A second server is refused.
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_SYSTEM}, data={}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "already_configured"


async def test_a_paired_installation_gets_its_server_entry(
    hass: HomeAssistant,
    internal_url: str,
    mock_config_entry: MockConfigEntry,
    hass_storage: dict[str, Any],
) -> None:
    """Devices paired before the server entry existed: it appears by itself."""
    hass_storage["xiaozhi.endpoints"] = {
        "version": 1,
        "minor_version": 1,
        "key": "xiaozhi.endpoints",
        "data": WEBSOCKET_ONLY,
    }
    assert await async_setup_component(hass, "homeassistant", {})
    mock_config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(mock_config_entry.entry_id)
    await hass.async_block_till_done()
    server = hass.config_entries.async_entry_for_domain_unique_id(
        DOMAIN, SERVER_UNIQUE_ID
    )
    assert server is not None
    assert server.options == {**WEBSOCKET_ONLY, **LATER_DEFAULTS}
    assert "xiaozhi.endpoints" not in hass_storage


async def test_user_flow_pairs_the_device_whose_code_is_typed(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """The code on the user's screen decides, whatever else waits."""
    await check_in(client, MAC2)
    code = (await check_in(client))["activation"]["code"]
    await hass.async_block_till_done()
    cards = {flow["context"]["unique_id"]: flow for flow in discovery_flows(hass)}
    assert cards.keys() == {MAC, MAC2}

    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "code"
    assert result["description_placeholders"] == {
        "ota_url": "http://192.168.1.10:8123/api/xiaozhi/v1/ota/"
    }
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["result"].unique_id == MAC
    assert result["title"] == f"XiaoZhi {BOARD} EE:01"
    await hass.async_block_till_done()
    # Its card closed; the other device's card stays.
    assert {flow["context"]["unique_id"] for flow in discovery_flows(hass)} == {MAC2}


async def test_user_flow_wrong_codes_rotate_every_code(
    hass: HomeAssistant, client: TestClient[Any, Any]
) -> None:
    """Misses count across flows; at the limit every waiting device gets a new code.

    A code typed is matched against every waiting device, so a new flow per
    guess must not reset the count.
    """
    code = (await check_in(client))["activation"]["code"]
    wrong = f"{(int(code) + 1) % 1_000_000:06d}"
    for _ in range(MAX_CODE_ATTEMPTS - 1):
        result = await hass.config_entries.flow.async_init(
            DOMAIN, context={"source": SOURCE_USER}
        )
        result = await hass.config_entries.flow.async_configure(
            result["flow_id"], {"code": wrong}
        )
        assert result["errors"] == {"code": "invalid_code"}
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": wrong}
    )
    assert result["errors"] == {"code": "code_rotated"}
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["errors"] == {"code": "invalid_code"}  # the old code is gone
    new_code = (await check_in(client))["activation"]["code"]
    assert new_code != code
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": new_code}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY


async def test_user_flow_pairs_a_reset_device_again(
    hass: HomeAssistant, client: TestClient[Any, Any], init_integration: MockConfigEntry
) -> None:
    """The code of a paired MAC with a new identity pairs that device again."""
    response = await client.post(
        URL_OTA,
        json=system_info(),
        headers={**device_headers(), "Client-Id": "factory-reset-identity"},
    )
    code = (await response.json())["activation"]["code"]
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {"code": code}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "paired_again"
    assert init_integration.data["client_id"] == "factory-reset-identity"


async def test_user_flow_needs_the_server_loaded(
    hass: HomeAssistant, setup_integration: None, server_entry: MockConfigEntry
) -> None:
    assert await hass.config_entries.async_unload(server_entry.entry_id)
    hass.data.pop(DATA_KEY)
    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "server_not_loaded"


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


async def test_reconfigure_an_unloaded_device(
    hass: HomeAssistant, setup_integration: None, mock_config_entry: MockConfigEntry
) -> None:
    """A disabled or failed device still gets its new token."""
    mock_config_entry.add_to_hass(hass)
    result = await mock_config_entry.start_reconfigure_flow(hass)
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reconfigure_successful"
    assert mock_config_entry.data[CONF_TOKEN] != TOKEN


async def test_reconfiguring_the_server_changes_its_settings(
    hass: HomeAssistant, setup_integration: None, server_entry: MockConfigEntry
) -> None:
    """The server has no token: Reconfigure shows its settings, as Configure does."""
    result = await server_entry.start_reconfigure_flow(hass)
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "server_settings"
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"],
        {
            "transport": "websocket",
            "mqtt_port": 1883,
            "udp_port": 1886,
            "firmware_prereleases": True,
        },
    )
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {"mqtt_port": "port_reserved"}
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"],
        {
            "transport": "websocket",
            "mqtt_port": 1885,
            "udp_port": 1886,
            "firmware_prereleases": True,
        },
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "server_settings_saved"
    assert server_entry.options["transport"] == "websocket"
    assert server_entry.options["firmware_prereleases"] is True


# The settings the first flow does not ask for, as they start.
LATER_DEFAULTS = {
    "firmware_releases_url": DEFAULT_RELEASES_URL,
    "firmware_prereleases": False,
    "wake_arbitration": True,
}


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_device_options(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """A device's options: timeout, keep-alive, tools for the agent, wake check."""
    entry = init_integration
    result = await hass.config_entries.options.async_init(entry.entry_id)
    assert result["type"] is FlowResultType.FORM
    assert result["step_id"] == "device"
    # The dialog says which device it is for.
    assert result["description_placeholders"]["name"] == entry.title
    # The false-wake check is off until asked for.
    assert entry.runtime_data.options.false_wake_check is False
    options = {
        CONF_CALL_TIMEOUT: 12,
        CONF_KEEPALIVE: False,
        "agent_tools": False,
        "false_wake_check": True,
    }
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], options
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert entry.options == options
    assert entry.runtime_data.options.call_timeout == 12
    assert entry.runtime_data.options.keepalive is False
    assert entry.runtime_data.options.agent_tools is False
    assert entry.runtime_data.options.false_wake_check is True


@pytest.mark.parametrize("field", ["mqtt_port", "udp_port"])
@pytest.mark.parametrize("port", [1883, 8883])
async def test_server_options_refuse_a_brokers_port(
    hass: HomeAssistant,
    setup_integration: None,
    server_entry: MockConfigEntry,
    field: str,
    port: int,
) -> None:
    result = await hass.config_entries.options.async_init(server_entry.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {**WEBSOCKET_ONLY, "transport": "auto", field: port}
    )
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {field: "port_reserved"}


async def test_server_options_open_the_endpoint_and_report_a_taken_port(
    hass: HomeAssistant,
    setup_integration: None,
    server_entry: MockConfigEntry,
    socket_enabled: None,
) -> None:
    """MQTT + UDP opens at once; a port in use is said, and nothing changes."""
    endpoints = hass.data[DATA_KEY].endpoints
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        busy = taken.getsockname()[1]
        result = await hass.config_entries.options.async_init(server_entry.entry_id)
        assert result["step_id"] == "server"
        result = await hass.config_entries.options.async_configure(
            result["flow_id"],
            {"transport": "auto", "mqtt_port": busy, "udp_port": 1886},
        )
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"mqtt_port": "port_unavailable"}
        assert result["description_placeholders"]["port"] == str(busy)
        assert "another program uses it" in result["description_placeholders"]["error"]
        assert endpoints.settings.transport is Transport.WEBSOCKET
        assert not endpoints.active

        mqtt_port, udp_port = _free_port(), _free_port(socket.SOCK_DGRAM)
        settings = {"transport": "auto", "mqtt_port": mqtt_port, "udp_port": udp_port}
        result = await hass.config_entries.options.async_configure(
            result["flow_id"], settings
        )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert endpoints.active
    assert endpoints.mqtt.port == mqtt_port
    assert endpoints.udp.port == udp_port
    assert server_entry.options == {**settings, **LATER_DEFAULTS}
    await endpoints.async_stop()


async def test_server_options_of_a_disabled_server_open_nothing(
    hass: HomeAssistant,
    setup_integration: None,
    server_entry: MockConfigEntry,
) -> None:
    """A disabled server keeps its new settings for when it is enabled."""
    await hass.config_entries.async_set_disabled_by(
        server_entry.entry_id, ConfigEntryDisabler.USER
    )
    await hass.async_block_till_done()
    settings = {"transport": "auto", "mqtt_port": 18850, "udp_port": 18860}
    result = await hass.config_entries.options.async_init(server_entry.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], settings
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert server_entry.options == {**settings, **LATER_DEFAULTS}
    assert not hass.data[DATA_KEY].endpoints.active


async def test_server_options_choose_where_firmware_comes_from(
    hass: HomeAssistant,
    setup_integration: None,
    server_entry: MockConfigEntry,
    aioclient_mock: AiohttpClientMocker,
) -> None:
    """A fork's releases, prereleases; an address that is not http(s) is refused.

    A new address is read once: one that answers no release list is refused,
    saying what came back. Wake word arbitration is turned off in the same
    form.
    """
    fork = "https://api.github.com/repos/someone/xiaozhi-esp32/releases"
    typo = "https://api.github.com/repos/someone/xiaozhi-esp32/relases"
    aioclient_mock.get(fork, json=[])
    aioclient_mock.get(typo, status=404)
    result = await hass.config_entries.options.async_init(server_entry.entry_id)
    settings = {
        **WEBSOCKET_ONLY,
        "firmware_releases_url": "ftp://example.com/releases",
        "firmware_prereleases": True,
        "wake_arbitration": False,
    }
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], settings
    )
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {"firmware_releases_url": "invalid_url"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {**settings, "firmware_releases_url": typo}
    )
    assert result["errors"] == {"firmware_releases_url": "releases_unreadable"}
    assert result["description_placeholders"]["error"].startswith("HTTP 404")
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {**settings, "firmware_releases_url": fork}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert server_entry.options["firmware_releases_url"] == fork
    assert server_entry.options["firmware_prereleases"] is True
    assert server_entry.options["wake_arbitration"] is False
