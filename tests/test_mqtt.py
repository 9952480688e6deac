"""Devices on MQTT + UDP: always reachable, over real TCP and UDP on loopback.

Simulated devices take the OTA answer's ``mqtt`` block and connect with
aiomqtt (paho-mqtt underneath) to the integration's own endpoint, exactly as
the firmware connects to a broker.
"""

import asyncio
from collections.abc import Callable
from dataclasses import replace
import socket
from typing import Any

from aiohttp.test_utils import TestClient
from homeassistant import config_entries
from homeassistant.const import ATTR_ENTITY_ID
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er, issue_registry as ir
from homeassistant.setup import async_setup_component
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import ClientSessionGenerator

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.protocol.mqtt.link import MqttLink
from custom_components.xiaozhi.protocol.mqtt.packets import Connect, encode_connect
from custom_components.xiaozhi.protocol.ota import topics
from custom_components.xiaozhi.settings import ServerSettings, Transport
from simulator import SimulatedDevice
from tests.conftest import (
    LOOPBACK_OTA_URL,
    MAC,
    TOKEN,
    device_headers,
    failed_logins,
    system_info,
    wait_for_runtime,
)

pytestmark = pytest.mark.mqtt_endpoint


def _endpoints(hass: HomeAssistant) -> Any:
    return hass.data[DATA_KEY].endpoints


@pytest.fixture
async def mqtt_device(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return the paired device, provisioned by OTA and connected over MQTT."""
    device = simulators(ota_url=LOOPBACK_OTA_URL, mqtt_reconnect_delay=0.05)
    await device.provision()
    assert device.uses_mqtt
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    return device


async def test_ota_answer_offers_mqtt_and_websocket(
    hass: HomeAssistant, init_integration: MockConfigEntry, client: TestClient
) -> None:
    response = await client.post(
        "/api/xiaozhi/v1/ota/", headers=device_headers(), json=system_info()
    )
    answer = await response.json()
    port = _endpoints(hass).mqtt.port
    up, down = topics(MAC)
    assert answer["mqtt"] == {
        "endpoint": f"127.0.0.1:{port}",
        "client_id": device_headers()["Client-Id"],
        "username": MAC,
        "password": TOKEN,
        "keepalive": 120,
        "publish_topic": up,
        "subscribe_topic": down,
    }
    assert answer["websocket"]["token"] == TOKEN
    assert port not in (1883, 8883)


async def test_idle_device_is_reachable(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
    entity_registry: er.EntityRegistry,
) -> None:
    """No wake word: a volume change and a screen message arrive over MQTT."""
    runtime = init_integration.runtime_data
    assert isinstance(runtime.session.link, MqttLink)
    assert mqtt_device.server_hello is None  # no conversation was opened
    volume = entity_registry.async_get_entity_id("number", DOMAIN, f"{MAC}-volume")
    assert volume is not None
    await hass.services.async_call(
        "number", "set_value", {ATTR_ENTITY_ID: volume, "value": 30}, blocking=True
    )
    assert mqtt_device.state.volume == 30
    notify = entity_registry.async_get_entity_id(
        "notify", DOMAIN, f"{MAC}-screen_message"
    )
    await hass.services.async_call(
        "notify",
        "send_message",
        {ATTR_ENTITY_ID: notify, "title": "Door", "message": "Someone rang"},
        blocking=True,
    )
    await mqtt_device.wait_for(lambda: bool(mqtt_device.alerts))
    assert mqtt_device.alerts[-1]["message"] == "Someone rang"
    assert hass.states.get(volume).state == "30"


async def _raw_login(
    port: int, client_id: str, username: str, password: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        encode_connect(
            Connect(client_id=client_id, username=username, password=password.encode())
        )
    )
    return reader, writer, await reader.readexactly(4)


async def test_impostor_is_refused_and_the_device_keeps_working(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
    entity_registry: er.EntityRegistry,
) -> None:
    """Same client id and MAC, wrong token: CONNACK 0x04, a failed login."""
    port = _endpoints(hass).mqtt.port
    client_id = mqtt_device.config.client_id
    _reader, writer, connack = await _raw_login(port, client_id, MAC, "wrong")
    assert connack == bytes([0x20, 0x02, 0x00, 0x04])
    writer.close()
    # Right token, someone else's identity: refused as well.
    _reader, writer, connack = await _raw_login(port, "other-client", MAC, TOKEN)
    assert connack[3] == 0x04
    writer.close()
    await hass.async_block_till_done()
    assert failed_logins(hass) == 2

    runtime = init_integration.runtime_data
    assert runtime.connected
    await runtime.commands.async_set_volume(40)
    assert mqtt_device.state.volume == 40
    assert mqtt_device.close_reasons == []


async def test_messages_to_another_topic_reach_nobody(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Publishing to another device's topic does not make it say anything."""
    runtime = init_integration.runtime_data
    events: list[Any] = []
    runtime.entry_data.async_subscribe_events(events.append)
    link = mqtt_device._mqtt
    link.publish_topic = topics("aa:bb:cc:dd:ee:02")[0]
    await mqtt_device.send_abort()
    link.publish_topic = topics(MAC)[0]
    await mqtt_device.send_listen("detect", text="hello")
    await wait_for_runtime(runtime, lambda _m: bool(events))
    assert [event.type for event in events] == ["wake_word"]
    assert "to topic 'xiaozhi/aabbccddee02/up'" in caplog.text


async def test_refusals_by_state(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """A disabled device gets 0x05, one that is not loaded 0x03."""
    port = _endpoints(hass).mqtt.port
    client_id = init_integration.data["client_id"]
    await hass.config_entries.async_unload(init_integration.entry_id)
    _reader, writer, connack = await _raw_login(port, client_id, MAC, TOKEN)
    assert connack[3] == 0x03
    writer.close()
    await hass.config_entries.async_set_disabled_by(
        init_integration.entry_id, config_entries.ConfigEntryDisabler.USER
    )
    _reader, writer, connack = await _raw_login(port, client_id, MAC, TOKEN)
    assert connack[3] == 0x05
    writer.close()
    await hass.async_block_till_done()
    assert failed_logins(hass) == 0


async def test_removing_the_device_closes_its_connection(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
) -> None:
    mqtt_device.config = replace(mqtt_device.config, mqtt_reconnect_delay=3600)
    await hass.config_entries.async_remove(init_integration.entry_id)
    await mqtt_device.wait_disconnected()
    assert _endpoints(hass).mqtt.connections == 0


async def test_a_dropped_connection_fails_pending_calls(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
) -> None:
    runtime = init_integration.runtime_data
    mqtt_device.faults.silent = True
    call = asyncio.create_task(runtime.commands.async_set_volume(10))
    await mqtt_device.wait_for(lambda: bool(mqtt_device.mcp_requests))
    await mqtt_device.disconnect()  # the connection drops
    with pytest.raises(HomeAssistantError):
        await asyncio.wait_for(call, 2)


def free_port(kind: socket.SocketKind) -> int:
    """Return a port that is free now (the form takes no port 0)."""
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        return int(probe.getsockname()[1])


async def test_port_in_use_raises_a_repair_issue_fixed_from_the_repair(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    server_entry: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
    hass_client: ClientSessionGenerator,
) -> None:
    """The endpoint cannot open at start: a repair says so, and its flow fixes it."""
    endpoints = _endpoints(hass)
    await endpoints.async_stop()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        busy = taken.getsockname()[1]
        await endpoints.async_start(ServerSettings(mqtt_port=busy, udp_port=0))
        issue = issue_registry.async_get_issue(DOMAIN, "port_unavailable_mqtt_port")
        assert issue is not None
        assert issue.is_fixable
        assert issue.translation_placeholders["port"] == str(busy)
        # Why, in words of the user's language, not the system's.
        assert issue.translation_placeholders["error"] == "another program uses it"
        assert not endpoints.active

        assert await async_setup_component(hass, "repairs", {})
        repairs = await hass_client()
        response = await repairs.post(
            "/api/repairs/issues/fix",
            json={"handler": DOMAIN, "issue_id": "port_unavailable_mqtt_port"},
        )
        flow = await response.json()
        assert flow["step_id"] == "ports"
        # The port is still taken: the form says so, and nothing changes.
        udp_port = free_port(socket.SOCK_DGRAM)
        response = await repairs.post(
            f"/api/repairs/issues/fix/{flow['flow_id']}",
            json={"transport": "auto", "mqtt_port": busy, "udp_port": udp_port},
        )
        flow = await response.json()
        assert flow["errors"] == {"mqtt_port": "port_unavailable"}
        assert not endpoints.active
    mqtt_port = free_port(socket.SOCK_STREAM)
    response = await repairs.post(
        f"/api/repairs/issues/fix/{flow['flow_id']}",
        json={"transport": "auto", "mqtt_port": mqtt_port, "udp_port": udp_port},
    )
    assert (await response.json())["type"] == "create_entry"
    assert endpoints.active
    assert issue_registry.async_get_issue(DOMAIN, "port_unavailable_mqtt_port") is None
    assert server_entry.options["mqtt_port"] == mqtt_port


async def test_the_port_repair_keeps_the_settings_it_does_not_show(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    server_entry: MockConfigEntry,
    hass_client: ClientSessionGenerator,
) -> None:
    """Its fix saves the transport and ports; the firmware settings stay."""
    kept = {
        "firmware_releases_url": "https://example.com/releases",
        "firmware_prereleases": True,
        "wake_arbitration": False,
    }
    hass.config_entries.async_update_entry(
        server_entry, options={**server_entry.options, **kept}
    )
    endpoints = _endpoints(hass)
    await endpoints.async_stop()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        await endpoints.async_start(
            ServerSettings(mqtt_port=taken.getsockname()[1], udp_port=0)
        )
    assert await async_setup_component(hass, "repairs", {})
    repairs = await hass_client()
    response = await repairs.post(
        "/api/repairs/issues/fix",
        json={"handler": DOMAIN, "issue_id": "port_unavailable_mqtt_port"},
    )
    flow = await response.json()
    ports = {
        "transport": "auto",
        "mqtt_port": free_port(socket.SOCK_STREAM),
        "udp_port": free_port(socket.SOCK_DGRAM),
    }
    response = await repairs.post(
        f"/api/repairs/issues/fix/{flow['flow_id']}", json=ports
    )
    assert (await response.json())["type"] == "create_entry"
    assert server_entry.options == {**ports, **kept}


async def test_moving_the_ports_in_the_options_clears_the_port_repairs(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    server_entry: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
) -> None:
    """Both ports were taken at start; moving them in the options ends both repairs."""
    endpoints = _endpoints(hass)
    await endpoints.async_stop()
    with (
        socket.socket() as tcp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        tcp.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        tcp.listen()
        udp.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        await endpoints.async_start(
            ServerSettings(
                mqtt_port=tcp.getsockname()[1], udp_port=udp.getsockname()[1]
            )
        )
        issues = ("port_unavailable_mqtt_port", "port_unavailable_udp_port")
        assert all(issue_registry.async_get_issue(DOMAIN, i) for i in issues)

        result = await hass.config_entries.options.async_init(server_entry.entry_id)
        result = await hass.config_entries.options.async_configure(
            result["flow_id"],
            {
                "transport": "auto",
                "mqtt_port": free_port(socket.SOCK_STREAM),
                "udp_port": free_port(socket.SOCK_DGRAM),
            },
        )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert endpoints.active
    assert not any(issue_registry.async_get_issue(DOMAIN, i) for i in issues)


async def test_an_unloaded_server_leaves_no_port_repair(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    server_entry: MockConfigEntry,
    issue_registry: ir.IssueRegistry,
) -> None:
    """Nothing to repair while the server is off."""
    endpoints = _endpoints(hass)
    await endpoints.async_stop()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        await endpoints.async_start(
            ServerSettings(mqtt_port=taken.getsockname()[1], udp_port=0)
        )
    assert issue_registry.async_get_issue(DOMAIN, "port_unavailable_mqtt_port")
    assert await hass.config_entries.async_unload(server_entry.entry_id)
    assert issue_registry.async_get_issue(DOMAIN, "port_unavailable_mqtt_port") is None


async def test_a_refused_port_changes_nothing(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
) -> None:
    """New ports are opened before anything is touched: a busy one changes nothing."""
    endpoints = _endpoints(hass)
    port = endpoints.mqtt.port
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the endpoint binds
        taken.listen()
        busy = taken.getsockname()[1]
        errors = await endpoints.async_apply(
            ServerSettings(mqtt_port=busy, udp_port=endpoints.settings.udp_port)
        )
    assert errors.keys() == {"mqtt_port"}
    assert endpoints.mqtt.port == port
    assert mqtt_device.reboot_count == 0
    assert init_integration.runtime_data.connected


async def test_new_settings_restart_connected_devices(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    mqtt_device: SimulatedDevice,
) -> None:
    """Devices learn where to connect at start-up: they are restarted."""
    endpoints = _endpoints(hass)
    old_port = endpoints.mqtt.port
    await endpoints.async_apply(ServerSettings(transport=Transport.WEBSOCKET))
    assert mqtt_device.reboot_count == 1
    assert not endpoints.active
    # Back on WebSocket after its restart (the OTA answer has no mqtt block).
    await mqtt_device.wait_for(
        lambda: mqtt_device.connected and not mqtt_device.uses_mqtt
    )
    assert mqtt_device.mqtt_config is None
    assert old_port is not None
