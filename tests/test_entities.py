"""Entities: the set per device, every read and write path, persistence, changes."""

from collections.abc import Callable, Generator
from http import HTTPStatus
from typing import Any
from unittest.mock import patch

from homeassistant.components.button import SERVICE_PRESS
from homeassistant.components.notify import (
    ATTR_MESSAGE,
    ATTR_TITLE,
    SERVICE_SEND_MESSAGE,
)
from homeassistant.components.number import ATTR_VALUE, SERVICE_SET_VALUE
from homeassistant.components.select import ATTR_OPTION, SERVICE_SELECT_OPTION
from homeassistant.const import (
    ATTR_ENTITY_ID,
    SERVICE_TURN_OFF,
    SERVICE_TURN_ON,
    STATE_OFF,
    STATE_ON,
    STATE_UNAVAILABLE,
    STATE_UNKNOWN,
    Platform,
)
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr, entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_capture_events,
    snapshot_platform,
)
from syrupy.assertion import SnapshotAssertion

from custom_components.xiaozhi import PLATFORMS
from custom_components.xiaozhi.const import (
    CONF_CLIENT_ID,
    CONF_KEEPALIVE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    EVENT_XIAOZHI,
)
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import (
    TINY_JPEG,
    PropertySpec,
    SimulatedDevice,
    ToolSpec,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
)
from simulator.cli import client_id_for

from .conftest import MAC, TOKEN, WS_URL, wait_for_runtime

MAC2 = "aa:bb:cc:dd:ee:02"
TOKEN2 = "second-device-token-0123456789abcdef"
LEVEL_TOOL = ToolSpec(
    name="self.motor.set_speed",
    description="Set the motor speed.",
    properties=[PropertySpec(name="speed", type="integer", minimum=0, maximum=10)],
)
BOARD_TOOLS = [rgb_light_tool(), no_arg_tool(), bool_tool(), LEVEL_TOOL]


def entity_id(hass: HomeAssistant, platform: str, key: str, mac: str = MAC) -> str:
    """Return the entity ID of a device entity by its key."""
    found = er.async_get(hass).async_get_entity_id(platform, DOMAIN, f"{mac}-{key}")
    assert found is not None, f"no {platform} {key}"
    return found


@pytest.fixture
def fixed_image_tokens() -> Generator[None]:
    """Make image access tokens the same on every run."""
    with patch("random.SystemRandom.getrandbits", return_value=0x5EED):
        yield


@pytest.fixture
async def rich_entry(hass: HomeAssistant, setup_integration: None) -> MockConfigEntry:
    """Return the entry of the second, richer device."""
    entry = MockConfigEntry(
        domain=DOMAIN,
        unique_id=MAC2,
        title="XiaoZhi camera-box EE:02",
        data={
            CONF_MAC: MAC2,
            CONF_CLIENT_ID: client_id_for(MAC2),
            CONF_TOKEN: TOKEN2,
            "board": "camera-box",
        },
    )
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry


@pytest.fixture
async def rich_device(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return the richer device, connected: camera, battery, board tools."""
    device = simulators(
        mac=MAC2,
        ws_url=WS_URL,
        token=TOKEN2,
        board="camera-box",
        camera=True,
        battery=True,
        extra_tools=[*BOARD_TOOLS, *many_tools(40)],
    )
    await device.connect()
    await wait_for_runtime(rich_entry.runtime_data, lambda d: d.connected)
    await hass.async_block_till_done()
    return device


@pytest.mark.parametrize(
    "platforms",
    [[platform] for platform in PLATFORMS],
    ids=[platform.value for platform in PLATFORMS],
)
@pytest.mark.usefixtures("fixed_image_tokens", "entity_registry_enabled_by_default")
async def test_entity_sets(
    hass: HomeAssistant,
    entity_registry: er.EntityRegistry,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
    platforms: list[Platform],
    snapshot: SnapshotAssertion,
) -> None:
    """Each device gets the entities for what it offers and reports.

    No picture was taken yet: image entities advertise no picture.
    """
    await hass.async_block_till_done()
    for entry in (init_integration, rich_entry):
        if er.async_entries_for_config_entry(entity_registry, entry.entry_id):
            await snapshot_platform(hass, entity_registry, snapshot, entry.entry_id)


async def test_device_registry(
    hass: HomeAssistant, rich_entry: MockConfigEntry, rich_device: SimulatedDevice
) -> None:
    """The device carries its MAC, board and firmware."""
    device = dr.async_get(hass).async_get_device_by_identifier(
        (DOMAIN, MAC2), rich_entry.entry_id
    )
    assert device is not None
    assert device.connections == {(dr.CONNECTION_NETWORK_MAC, MAC2)}
    assert (device.manufacturer, device.model, device.sw_version) == (
        "XiaoZhi",
        "camera-box",
        "2.0.4",
    )
    assert device.name == "XiaoZhi camera-box EE:02"


async def test_number_and_select(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Volume, brightness and theme read the status and change on confirmation."""
    volume = entity_id(hass, "number", "volume")
    brightness = entity_id(hass, "number", "screen_brightness")
    theme = entity_id(hass, "select", "theme")
    assert hass.states.get(volume).state == "70"
    assert hass.states.get(brightness).state == "80"
    assert hass.states.get(theme).state == "light"

    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: volume, ATTR_VALUE: 35},
        blocking=True,
    )
    assert simulator.state.volume == 35
    assert hass.states.get(volume).state == "35"
    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: brightness, ATTR_VALUE: 12},
        blocking=True,
    )
    assert simulator.state.brightness == 12
    await hass.services.async_call(
        "select",
        SERVICE_SELECT_OPTION,
        {ATTR_ENTITY_ID: theme, ATTR_OPTION: "dark"},
        blocking=True,
    )
    assert simulator.state.theme == "dark"
    assert hass.states.get(theme).state == "dark"

    # A change made on the device shows up with the next status read.
    simulator.state.volume = 55
    await init_integration.runtime_data.session.refresh_status()
    assert hass.states.get(volume).state == "55"


async def test_value_unchanged_when_device_refuses(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """A refused command raises and leaves the shown value alone."""
    volume = entity_id(hass, "number", "volume")
    simulator.faults.silent = True
    init_integration.runtime_data.session.call_timeout = 0.05
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "number",
            SERVICE_SET_VALUE,
            {ATTR_ENTITY_ID: volume, ATTR_VALUE: 20},
            blocking=True,
        )
    assert err.value.translation_key == "timeout"
    assert hass.states.get(volume).state == "70"


async def test_sensors(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
) -> None:
    """Status values become sensors."""
    assert hass.states.get(entity_id(hass, "sensor", "battery", MAC2)).state == "85"
    charging = entity_id(hass, "binary_sensor", "charging", MAC2)
    assert hass.states.get(charging).state == STATE_OFF
    signal = entity_id(hass, "sensor", "wifi_signal", MAC2)
    assert hass.states.get(signal).state == "strong"
    temperature = entity_id(hass, "sensor", "chip_temperature", MAC2)
    assert hass.states.get(temperature).state == "41.5"
    connected = entity_id(hass, "binary_sensor", "connected", MAC2)
    assert hass.states.get(connected).state == STATE_ON

    rich_device.state.charging = True
    rich_device.state.battery_level = 86
    rich_device.state.signal = "weak"
    await rich_entry.runtime_data.session.refresh_status()
    assert hass.states.get(charging).state == STATE_ON
    assert hass.states.get(signal).state == "weak"
    assert hass.states.get(entity_id(hass, "sensor", "battery", MAC2)).state == "86"


async def test_buttons_and_images(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
    hass_client: Any,
) -> None:
    """Photo and screen buttons fill the image entities; reboot restarts."""
    photo = entity_id(hass, "image", "last_photo", MAC2)
    screen = entity_id(hass, "image", "screen", MAC2)
    assert hass.states.get(photo).state == STATE_UNKNOWN

    await hass.services.async_call(
        "button",
        SERVICE_PRESS,
        {ATTR_ENTITY_ID: entity_id(hass, "button", "take_photo", MAC2)},
        blocking=True,
    )
    assert rich_device.photos_taken == 1
    assert hass.states.get(photo).state != STATE_UNKNOWN
    client = await hass_client()
    response = await client.get(f"/api/image_proxy/{photo}")
    assert response.status == HTTPStatus.OK
    assert await response.read() == TINY_JPEG

    await hass.services.async_call(
        "button",
        SERVICE_PRESS,
        {ATTR_ENTITY_ID: entity_id(hass, "button", "refresh_screen", MAC2)},
        blocking=True,
    )
    assert len(rich_device.snapshots) == 1
    assert hass.states.get(screen).state != STATE_UNKNOWN
    response = await client.get(f"/api/image_proxy/{screen}")
    assert await response.read() == TINY_JPEG
    # The one-time upload URL is spent.
    url, _quality = rich_device.snapshots[0]
    response = await client.post(url.split("8123", 1)[1], data=b"")
    assert response.status == HTTPStatus.UNAUTHORIZED

    await hass.services.async_call(
        "button",
        SERVICE_PRESS,
        {ATTR_ENTITY_ID: entity_id(hass, "button", "reboot", MAC2)},
        blocking=True,
    )
    await rich_device.wait_for(lambda: rich_device.reboot_count == 1)


async def test_generic_tool_entities(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
) -> None:
    """Tools map to entities by schema, named from short descriptions."""
    button = entity_id(hass, "button", "tool-self.dog.forward", MAC2)
    switch = entity_id(hass, "switch", "tool-self.led.set_enabled", MAC2)
    number = entity_id(hass, "number", "tool-self.motor.set_speed", MAC2)
    light = entity_id(hass, "light", "tool-self.light.set_rgb", MAC2)
    registry = er.async_get(hass)
    assert registry.async_get(button).original_name == "Walk one step forward"
    assert registry.async_get(switch).original_name == "Status LED"
    assert registry.async_get(number).original_name == "Motor speed"
    assert registry.async_get(light).original_name == "Light"
    # The bulk tools take three arguments of mixed types: actions only.
    assert not [
        entry
        for entry in er.async_entries_for_config_entry(registry, rich_entry.entry_id)
        if "bulk" in entry.unique_id
    ]

    await hass.services.async_call(
        "button", SERVICE_PRESS, {ATTR_ENTITY_ID: button}, blocking=True
    )
    assert rich_device.calls[-1].name == "self.dog.forward"

    assert hass.states.get(switch).state == STATE_UNKNOWN
    assert hass.states.get(switch).attributes["assumed_state"] is True
    await hass.services.async_call(
        "switch", SERVICE_TURN_ON, {ATTR_ENTITY_ID: switch}, blocking=True
    )
    assert rich_device.calls[-1].arguments == {"enabled": True}
    assert hass.states.get(switch).state == STATE_ON
    await hass.services.async_call(
        "switch", SERVICE_TURN_OFF, {ATTR_ENTITY_ID: switch}, blocking=True
    )
    assert rich_device.calls[-1].arguments == {"enabled": False}
    assert hass.states.get(switch).state == STATE_OFF

    state = hass.states.get(number)
    assert (state.attributes["min"], state.attributes["max"]) == (0, 10)
    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: number, ATTR_VALUE: 7},
        blocking=True,
    )
    assert rich_device.calls[-1].arguments == {"speed": 7}
    assert hass.states.get(number).state == "7"


async def test_events_activity_and_notify(
    hass: HomeAssistant,
    entity_registry_enabled_by_default: None,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
) -> None:
    """Device traffic drives the event entity, the bus and the activity sensor."""
    events = async_capture_events(hass, EVENT_XIAOZHI)
    event_entity = entity_id(hass, "event", "event")
    activity = entity_id(hass, "sensor", "activity")
    runtime: XiaozhiRuntime = init_integration.runtime_data
    assert hass.states.get(activity).state == "idle"

    await simulator.send_listen("detect", text="你好小智")
    await wait_for_runtime(runtime, lambda d: d.entry_data.activity == "listening")
    await hass.async_block_till_done()
    state = hass.states.get(event_entity)
    assert state.attributes["event_type"] == "wake_word"
    assert state.attributes["text"] == "你好小智"
    assert hass.states.get(activity).state == "listening"
    assert events[-1].data == {
        "device_id": runtime.entry_data.device_id,
        "type": "wake_word",
        "text": "你好小智",
    }

    await simulator.send_notification(
        "notifications/state_changed", {"newState": "speaking", "oldState": "listening"}
    )
    await wait_for_runtime(runtime, lambda d: d.entry_data.activity == "speaking")
    await simulator.send_abort()
    await wait_for_runtime(runtime, lambda d: d.entry_data.activity == "idle")
    await hass.async_block_till_done()
    assert hass.states.get(event_entity).attributes["event_type"] == "aborted"

    await hass.services.async_call(
        "notify",
        SERVICE_SEND_MESSAGE,
        {
            ATTR_ENTITY_ID: entity_id(hass, "notify", "screen_message"),
            ATTR_TITLE: "Door",
            ATTR_MESSAGE: "Someone is at the door",
        },
        blocking=True,
    )
    await simulator.wait_for(lambda: bool(simulator.alerts))
    assert simulator.alerts[-1]["status"] == "Door"
    assert simulator.alerts[-1]["message"] == "Someone is at the door"


@pytest.mark.parametrize("hang_up", ["disconnect", "drop_link"])
async def test_a_websocket_device_that_hangs_up_keeps_its_state(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    hang_up: str,
) -> None:
    """Hanging up is how a WebSocket device ends a conversation: not a failure.

    Whoever closes, and however, its entities keep their state and its
    connection shows as it did; commands say it is not connected.
    """
    volume = entity_id(hass, "number", "volume")
    connected = entity_id(hass, "binary_sensor", "connected")
    runtime: XiaozhiRuntime = init_integration.runtime_data
    result = getattr(simulator, hang_up)()
    if result is not None:
        await result
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await hass.async_block_till_done()
    assert hass.states.get(volume).state == "70"
    assert hass.states.get(connected).state == STATE_ON

    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 1}, check=False
        )
    assert err.value.translation_key == "not_connected"

    await simulator.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    await hass.async_block_till_done()
    assert hass.states.get(volume).state == "70"


async def test_on_demand_link_keeps_last_state(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Without keep-alive, entities keep their last state; commands still raise."""
    hass.config_entries.async_update_entry(
        init_integration, options={CONF_KEEPALIVE: False}
    )
    volume = entity_id(hass, "number", "volume")
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await simulator.disconnect()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await hass.async_block_till_done()
    assert hass.states.get(volume).state == "70"
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "number",
            SERVICE_SET_VALUE,
            {ATTR_ENTITY_ID: volume, ATTR_VALUE: 20},
            blocking=True,
        )
    assert err.value.translation_key == "not_connected"


async def test_restart_restores_entities(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
) -> None:
    """After a restart the entities exist with their last values before reconnect."""
    hass.config_entries.async_update_entry(
        init_integration, options={CONF_KEEPALIVE: False}
    )
    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: entity_id(hass, "number", "volume"), ATTR_VALUE: 44},
        blocking=True,
    )
    await simulator.stop()
    await hass.config_entries.async_reload(init_integration.entry_id)
    await hass.async_block_till_done()

    runtime: XiaozhiRuntime = init_integration.runtime_data
    assert not runtime.connected
    assert "self.audio_speaker.set_volume" in runtime.entry_data.tools
    assert hass.states.get(entity_id(hass, "number", "volume")).state == "44"
    assert hass.states.get(entity_id(hass, "select", "theme")).state == "light"
    assert hass.states.get(entity_id(hass, "button", "reboot")).state == STATE_UNKNOWN


async def test_stored_state_loaded_at_startup(
    hass: HomeAssistant,
    hass_storage: dict[str, Any],
    setup_integration: None,
    mock_config_entry: MockConfigEntry,
) -> None:
    """Entities come from the stored tool list, unavailable until the device is back."""
    hass_storage[f"{DOMAIN}.{mock_config_entry.entry_id}"] = {
        "version": 1,
        "key": f"{DOMAIN}.{mock_config_entry.entry_id}",
        "data": {
            "tools": [
                {"name": "self.audio_speaker.set_volume", "inputSchema": {}},
                {"name": "self.dog.forward", "inputSchema": {}},
            ],
            "status": {"audio_speaker": {"volume": 12}, "battery": {"level": 50}},
            "board": "stored-board",
            "firmware": "1.9.0",
        },
    }
    mock_config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(mock_config_entry.entry_id)
    await hass.async_block_till_done()

    assert (
        hass.states.get(entity_id(hass, "number", "volume")).state == STATE_UNAVAILABLE
    )
    assert hass.states.get(entity_id(hass, "button", "tool-self.dog.forward"))
    assert hass.states.get(entity_id(hass, "sensor", "battery"))
    device = dr.async_get(hass).async_get_device_by_identifier(
        (DOMAIN, MAC), mock_config_entry.entry_id
    )
    assert (device.model, device.sw_version) == ("stored-board", "1.9.0")


async def test_tools_added_and_removed(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """The entity set follows the tool list: new tools add, gone tools remove."""
    device = simulators(ws_url=WS_URL, token=TOKEN, extra_tools=[no_arg_tool()])
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    await hass.async_block_till_done()
    old = entity_id(hass, "button", "tool-self.dog.forward")

    device.tools = [
        tool for tool in device.tools if tool.name != "self.dog.forward"
    ] + [bool_tool()]
    await hass.services.async_call(
        DOMAIN, "refresh", {"device_id": runtime.entry_data.device_id}, blocking=True
    )
    await hass.async_block_till_done()
    registry = er.async_get(hass)
    assert registry.async_get(old) is None
    assert hass.states.get(old) is None
    assert hass.states.get(entity_id(hass, "switch", "tool-self.led.set_enabled"))


async def test_entity_follows_a_tool_whose_schema_changes(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
) -> None:
    """A firmware update changes a tool's argument: the live entity follows."""
    number = entity_id(hass, "number", "tool-self.motor.set_speed", MAC2)
    assert hass.states.get(number).attributes["max"] == 10
    rich_device.tools = [
        tool for tool in rich_device.tools if tool.name != "self.motor.set_speed"
    ] + [
        ToolSpec(
            name="self.motor.set_speed",
            description="Set the motor speed.",
            properties=[
                PropertySpec(name="level", type="integer", minimum=0, maximum=200)
            ],
        )
    ]
    await hass.services.async_call(
        DOMAIN, "refresh", {"device_id": rich_entry.runtime_data.entry_data.device_id}
    )
    await hass.async_block_till_done()
    assert entity_id(hass, "number", "tool-self.motor.set_speed", MAC2) == number
    assert hass.states.get(number).attributes["max"] == 200

    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: number, ATTR_VALUE: 150},
        blocking=True,
    )
    assert rich_device.calls[-1].name == "self.motor.set_speed"
    assert rich_device.calls[-1].arguments == {"level": 150}
    assert hass.states.get(number).state == "150"


async def test_rgb_light(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
) -> None:
    """The light sends its colour through set_rgb, scaled by brightness."""
    light = entity_id(hass, "light", "tool-self.light.set_rgb", MAC2)
    state = hass.states.get(light)
    assert state.state == STATE_UNKNOWN
    assert state.attributes["assumed_state"] is True

    await hass.services.async_call(
        "light",
        SERVICE_TURN_ON,
        {ATTR_ENTITY_ID: light, "rgb_color": (255, 128, 0), "brightness": 128},
        blocking=True,
    )
    assert rich_device.calls[-1].name == "self.light.set_rgb"
    assert rich_device.calls[-1].arguments == {"r": 128, "g": 64, "b": 0}
    state = hass.states.get(light)
    assert state.state == STATE_ON
    assert state.attributes["rgb_color"] == (255, 128, 0)
    assert state.attributes["brightness"] == 128

    await hass.services.async_call(
        "light", SERVICE_TURN_OFF, {ATTR_ENTITY_ID: light}, blocking=True
    )
    assert rich_device.calls[-1].arguments == {"r": 0, "g": 0, "b": 0}
    assert hass.states.get(light).state == STATE_OFF

    # On again: the last colour at full brightness of what was set.
    await hass.services.async_call(
        "light", SERVICE_TURN_ON, {ATTR_ENTITY_ID: light}, blocking=True
    )
    assert rich_device.calls[-1].arguments == {"r": 128, "g": 64, "b": 0}


async def test_image_advertises_no_picture_until_there_is_one(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
    hass_client: Any,
) -> None:
    """No picture, no URL: the frontend asks for nothing it cannot get."""
    photo = entity_id(hass, "image", "last_photo", MAC2)
    assert "entity_picture" not in hass.states.get(photo).attributes
    await rich_entry.runtime_data.commands.async_take_photo()
    await hass.async_block_till_done()
    url = hass.states.get(photo).attributes["entity_picture"]
    client = await hass_client()
    response = await client.get(url)
    assert response.status == HTTPStatus.OK
    assert await response.read() == TINY_JPEG


async def test_state_change_notification_is_one_logbook_line(
    hass: HomeAssistant,
    entity_registry_enabled_by_default: None,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
) -> None:
    """A reported state change moves the activity, not the event entity too."""
    event_entity = entity_id(hass, "event", "event")
    activity = entity_id(hass, "sensor", "activity")
    runtime: XiaozhiRuntime = init_integration.runtime_data
    events = async_capture_events(hass, EVENT_XIAOZHI)
    await simulator.send_notification("notifications/custom", {"x": 1})
    await wait_for_runtime(runtime, lambda _d: bool(events))
    await hass.async_block_till_done()
    before = hass.states.get(event_entity)
    assert before.attributes["event_type"] == "notification"

    await simulator.send_notification(
        "notifications/state_changed", {"newState": "speaking", "oldState": "idle"}
    )
    await wait_for_runtime(runtime, lambda d: d.entry_data.activity == "speaking")
    await hass.async_block_till_done()
    assert hass.states.get(activity).state == "speaking"
    assert hass.states.get(event_entity) == before


async def test_assumed_states_survive_a_restart(
    hass: HomeAssistant,
    rich_entry: MockConfigEntry,
    rich_device: SimulatedDevice,
) -> None:
    """Light, switch and number states the device never reports are restored."""
    hass.config_entries.async_update_entry(rich_entry, options={CONF_KEEPALIVE: False})
    light = entity_id(hass, "light", "tool-self.light.set_rgb", MAC2)
    switch = entity_id(hass, "switch", "tool-self.led.set_enabled", MAC2)
    number = entity_id(hass, "number", "tool-self.motor.set_speed", MAC2)
    await hass.services.async_call(
        "light",
        SERVICE_TURN_ON,
        {ATTR_ENTITY_ID: light, "rgb_color": (0, 0, 255), "brightness": 51},
        blocking=True,
    )
    await hass.services.async_call(
        "switch", SERVICE_TURN_ON, {ATTR_ENTITY_ID: switch}, blocking=True
    )
    await hass.services.async_call(
        "number",
        SERVICE_SET_VALUE,
        {ATTR_ENTITY_ID: number, ATTR_VALUE: 4},
        blocking=True,
    )
    await rich_device.stop()
    assert await hass.config_entries.async_reload(rich_entry.entry_id)
    await hass.async_block_till_done()

    state = hass.states.get(light)
    assert state.state == STATE_ON
    assert state.attributes["rgb_color"] == (0, 0, 255)
    assert state.attributes["brightness"] == 51
    assert hass.states.get(switch).state == STATE_ON
    assert hass.states.get(number).state == "4"
