"""Devices connect: pairing end to end, the MCP session, faults and limits."""

import asyncio
from collections.abc import Callable
import logging
import time
from typing import Any
from unittest.mock import patch

from aiohttp.test_utils import TestClient
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import CONF_KEEPALIVE, CONF_TOKEN, DOMAIN
from custom_components.xiaozhi.protocol import DeviceEvent
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from custom_components.xiaozhi.transport.uploads import VISION_ANSWER
from simulator import (
    TINY_JPEG,
    SimulatedDevice,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
)
from simulator.cli import client_id_for

from .conftest import MAC, OTA_URL, TOKEN, WS_URL, wait_for_runtime

SIMPLE_TOOLS = [rgb_light_tool(), no_arg_tool(), bool_tool()]


def tools_list_requests(device: SimulatedDevice) -> list[dict[str, Any]]:
    """Return the tools/list requests the device received."""
    return [r for r in device.mcp_requests if r.get("method") == "tools/list"]


async def test_pair_then_connect(
    hass: HomeAssistant,
    setup_integration: None,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """A device given only the OTA URL pairs, connects, lists 40 tools, reports."""
    device = simulators(ota_url=OTA_URL, extra_tools=many_tools(40), battery=True)
    device.start()
    code = await device.wait_activation_code()
    await hass.async_block_till_done()
    flow = next(iter(hass.config_entries.flow.async_progress_by_handler(DOMAIN)))
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {"code": code}
    )
    entry = result["result"]
    await device.wait_connected()
    runtime: XiaozhiRuntime = entry.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)

    assert device.token == entry.data[CONF_TOKEN]
    assert device.activated
    pages = tools_list_requests(device)
    assert len(pages) >= 4  # 40 bulk tools + built-ins at ~8000 bytes a page
    assert all(page["params"]["withUserTools"] is True for page in pages)
    assert pages[0]["params"]["cursor"] == ""
    assert len(runtime.entry_data.tools) == len(device.tools)
    assert {tool.name for tool in runtime.entry_data.tools.values()} == {
        tool.name for tool in device.tools
    }
    assert runtime.entry_data.tools["self.reboot"].user_only is True
    assert runtime.entry_data.tools["self.audio_speaker.set_volume"].user_only is False
    assert runtime.entry_data.status.raw["audio_speaker"]["volume"] == 70
    assert runtime.entry_data.status.raw["battery"]["level"] == 85
    assert runtime.entry_data.board == "xiaozhi-sim"
    assert runtime.entry_data.firmware == "2.0.4"
    assert runtime.entry_data.link is not None
    assert runtime.entry_data.link.client_id == device.config.client_id
    initialize = next(r for r in device.mcp_requests if r["method"] == "initialize")
    vision = initialize["params"]["capabilities"]["vision"]
    assert vision["url"] == "http://192.168.1.10:8123/api/xiaozhi/v1/vision"
    assert vision["token"] == runtime.session.vision_token
    hello = device.server_hello
    assert hello is not None
    assert hello["transport"] == "websocket"
    assert hello["session_id"] == runtime.session.session_id
    assert hello["audio_params"]["format"] == "opus"


async def test_call_tool_results(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Every result shape comes back parsed; bad arguments never reach the device."""
    device = simulators(ws_url=WS_URL, token=TOKEN, extra_tools=SIMPLE_TOOLS)
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)

    result = await runtime.commands.async_call_tool(
        "self.audio_speaker.set_volume", {"volume": 33}, check=False
    )
    assert (result.is_error, result.text, result.json) == (False, "true", True)
    assert device.state.volume == 33

    result = await runtime.commands.async_call_tool(
        "self.get_device_status", check=False
    )
    assert result.json["audio_speaker"] == {"volume": 33}

    # The firmware answers an unknown theme with "false", not an error.
    result = await runtime.commands.async_call_tool(
        "self.screen.set_theme", {"theme": "blue"}, check=False
    )
    assert (result.is_error, result.json) == (False, False)

    # A device-side failure (firmware: error without code), past our checks.
    assert runtime.session is not None
    result = await runtime.session.call_tool(
        "self.audio_speaker.set_volume", {"volume": 500}
    )
    assert result.is_error
    assert result.code is None
    assert result.text
    result = await runtime.session.call_tool("self.nope", {})
    assert result.is_error
    assert "self.nope" in result.text

    calls_before = len(device.calls)
    with pytest.raises(ServiceValidationError) as err:
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 101}, check=False
        )
    assert err.value.translation_key == "out_of_range"
    with pytest.raises(ServiceValidationError) as err:
        await runtime.commands.async_call_tool(
            "self.light.set_rgb", {"r": 1, "g": 2}, check=False
        )
    assert err.value.translation_key == "missing_argument"
    with pytest.raises(ServiceValidationError) as err:
        await runtime.commands.async_call_tool(
            "self.led.set_enabled", {"enabled": "yes"}, check=False
        )
    assert err.value.translation_key == "invalid_type"
    with pytest.raises(ServiceValidationError) as err:
        await runtime.commands.async_call_tool("self.nope", check=False)
    assert err.value.translation_key == "unknown_tool"
    assert len(device.calls) == calls_before


async def test_other_implementation_errors(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Errors with codes and isError results are understood too."""
    device = simulators(ws_url=WS_URL, token=TOKEN, other_implementation=True)
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)

    assert runtime.session is not None
    result = await runtime.session.call_tool(
        "self.audio_speaker.set_volume", {"volume": 500}
    )
    assert result.is_error
    assert result.code == -32603
    assert result.text
    # A failing tool reports a result with isError: true (no code).
    result = await runtime.session.call_tool(
        "self.screen.snapshot", {"url": "http://192.168.1.10:8123/nowhere"}
    )
    assert result.is_error
    assert result.code is None
    assert result.text
    result = await runtime.session.call_tool("self.nope", {})
    assert result.is_error
    assert result.code == -32601


async def test_invalid_json_error_frame(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """The firmware's unescaped error frame fails the call with its message."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.invalid_error_json = True
    assert runtime.session is not None
    started = time.monotonic()
    result = await runtime.session.call_tool(
        "self.audio_speaker.set_volume", {"volume": 500}
    )
    assert time.monotonic() - started < 2
    assert result.is_error
    assert '"' in result.text


async def test_silent_device_times_out(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """A device that never answers makes the call time out, nothing hangs."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.silent = True
    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 10}, timeout=0.05, check=False
        )
    assert err.value.translation_key == "timeout"
    assert runtime.session is not None
    assert runtime.session.mcp.pending_count == 0
    # The device talks again: the session is still usable.
    simulator.faults.silent = False
    result = await runtime.commands.async_call_tool(
        "self.audio_speaker.set_volume", {"volume": 11}, check=False
    )
    assert result.text == "true"


async def test_drop_mid_call_fails_fast(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """A link that drops during a call fails the call at once."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.drop_on_call = {"self.audio_speaker.set_volume"}
    started = time.monotonic()
    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 10}, check=False
        )
    assert time.monotonic() - started < 1
    assert err.value.translation_key == "connection_lost"
    await wait_for_runtime(runtime, lambda d: d.session is None)
    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 10}, check=False
        )
    assert err.value.translation_key == "not_connected"


async def test_a_dropped_link_says_what_it_cut_short(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Speech sent on a link that dropped names what it was, never "?"."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    channel = runtime.channel
    assert channel is not None
    await simulator.disconnect()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    with pytest.raises(HomeAssistantError) as err:
        await channel.async_start_speaking()
    assert err.value.translation_key == "connection_lost"
    assert err.value.translation_placeholders["tool"] == "tts"
    with pytest.raises(HomeAssistantError) as err:
        await channel.async_send_audio(b"\x01", 0)
    assert err.value.translation_placeholders["tool"] == "audio"
    assert "?" not in str(err.value)


async def test_duplicate_and_wrong_id_replies(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Replies are matched by id: duplicates are dropped, strays ignored."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.duplicate_replies = True
    results = await asyncio.gather(
        *(
            runtime.commands.async_call_tool(
                "self.audio_speaker.set_volume", {"volume": v}, check=False
            )
            for v in (1, 2, 3)
        )
    )
    assert [r.text for r in results] == ["true"] * 3
    simulator.faults.duplicate_replies = False
    simulator.faults.reply_id_offset = 1000
    with pytest.raises(HomeAssistantError):
        await runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 4}, timeout=0.1, check=False
        )
    assert runtime.connected


async def test_replaced_by_new_connection(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """A second authenticated connection replaces the first one."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    first_session = runtime.session
    simulator.faults.silent = True
    pending = asyncio.ensure_future(
        runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 5}, check=False
        )
    )
    await simulator.wait_for(lambda: len(simulator.mcp_requests) > 0)

    second = simulators(ws_url=WS_URL, token=TOKEN)
    await second.connect()
    await simulator.wait_disconnected()
    with pytest.raises(HomeAssistantError) as err:
        await pending
    assert err.value.translation_key == "connection_lost"
    await wait_for_runtime(
        runtime, lambda d: d.connected and d.session is not first_session
    )
    result = await runtime.commands.async_call_tool(
        "self.audio_speaker.set_volume", {"volume": 6}, check=False
    )
    assert result.text == "true"
    assert second.state.volume == 6


async def test_entry_removal_revokes(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Removing the entry closes the socket at once and the token stops working."""
    assert await hass.config_entries.async_remove(init_integration.entry_id)
    await simulator.wait_disconnected()
    again = simulators(ws_url=WS_URL, token=TOKEN)
    with pytest.raises(Exception, match="401"):
        await again.connect()


async def test_reconfigure_rotates_token(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """A new token reaches the device through a restart and its OTA check."""
    device = simulators(ota_url=OTA_URL)
    device.start()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert device.token == TOKEN

    result = await init_integration.start_reconfigure_flow(hass)
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["reason"] == "reconfigure_successful"
    new_token = init_integration.data[CONF_TOKEN]
    await device.wait_for(lambda: device.reboot_count == 1)
    await device.wait_for(lambda: device.connected and device.token == new_token)
    await wait_for_runtime(runtime, lambda d: d.connected)

    old = simulators(ws_url=WS_URL, token=TOKEN)
    with pytest.raises(Exception, match="401"):
        await old.connect()


async def test_events_and_malformed_input(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Device messages become events; garbage is logged and the session goes on."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    events: list[DeviceEvent] = []
    got = asyncio.Event()

    def listener(event: DeviceEvent) -> None:
        events.append(event)
        got.set()

    runtime.entry_data.async_subscribe_events(listener)

    await simulator.send_raw("this is not JSON")
    await simulator.send_raw('{"type": 5}')
    await simulator.send_raw('["hello"]')
    await simulator.send_bytes(b"\xff\xfe garbage")
    await simulator.send_audio(3)
    await simulator.send_listen("detect", text="你好小智")
    await simulator.send_listen("start", mode="manual")
    await simulator.send_abort("wake_word_detected")
    await simulator.send_notification(
        "notifications/state_changed", {"newState": "idle", "oldState": "speaking"}
    )
    await simulator.send_raw('{"type": "custom", "payload": {"x": 1}}')
    await simulator.send_raw('{"type": "huge", "payload": "' + "x" * 5000 + '"}')
    async with asyncio.timeout(5):
        while len(events) < 6:
            await got.wait()
            got.clear()

    assert [e.type for e in events] == [
        "wake_word",
        "listening_started",
        "aborted",
        "notification",
        "message",
        "message",
    ]
    assert events[0].data == {"text": "你好小智"}
    assert events[1].data == {"mode": "manual"}
    assert events[2].data == {"reason": "wake_word_detected"}
    assert events[3].data == {
        "method": "notifications/state_changed",
        "params": {"newState": "idle", "oldState": "speaking"},
    }
    assert events[4].data == {"frame": {"type": "custom", "payload": {"x": 1}}}
    assert events[5].data == {"frame": {"type": "huge", "truncated": True}}
    assert runtime.session is not None
    assert runtime.session.audio_frames == 4
    assert "Ignoring malformed frame" in caplog.text
    result = await runtime.commands.async_call_tool(
        "self.audio_speaker.set_volume", {"volume": 9}, check=False
    )
    assert result.text == "true"


async def test_keepalive_holds_idle_device(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Keep-alive traffic stops the device's idle timer from closing the link."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    with patch("custom_components.xiaozhi.runtime.KEEPALIVE_INTERVAL", 0.05):
        device = simulators(ws_url=WS_URL, token=TOKEN, idle_timeout=0.3)
        await device.connect()
        await wait_for_runtime(runtime, lambda d: d.connected)
    status_calls = lambda: [  # noqa: E731
        c for c in device.calls if c.name == "self.get_device_status"
    ]
    # Keep-alive status reads land well past the idle timeout.
    await device.wait_for(lambda: len(status_calls()) >= 12, timeout=5)
    assert device.connected
    assert device.close_reasons == []
    assert runtime.connected


async def test_keepalive_off_respects_idle_close(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without keep-alive the device's own idle close is normal, not an error."""
    hass.config_entries.async_update_entry(
        init_integration, options={CONF_KEEPALIVE: False}
    )
    runtime: XiaozhiRuntime = init_integration.runtime_data
    device = simulators(ws_url=WS_URL, token=TOKEN, idle_timeout=0.2)
    await device.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    caplog.clear()
    await device.wait_disconnected()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    assert device.close_reason == "idle_timeout"
    assert not [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("custom_components")
    ]


async def test_options_apply_to_live_link(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Turning keep-alive on for a live link starts it without reconnecting."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    session = runtime.session
    with patch("custom_components.xiaozhi.runtime.KEEPALIVE_INTERVAL", 0.05):
        hass.config_entries.async_update_entry(
            init_integration, options={CONF_KEEPALIVE: False, "call_timeout": 7}
        )
        hass.config_entries.async_update_entry(
            init_integration, options={CONF_KEEPALIVE: True, "call_timeout": 7}
        )
        await hass.async_block_till_done()
    assert runtime.session is session
    assert session is not None
    assert session.call_timeout == 7
    since = len(simulator.calls)
    await simulator.wait_for_call("self.get_device_status", since=since)


async def test_device_without_mcp(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """An old device without MCP still connects and sends events."""
    device = simulators(ws_url=WS_URL, token=TOKEN, features=False)
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.entry_data.tools == {}
    assert device.mcp_requests == []


async def test_hello_timeout(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """A socket that never says hello is closed."""
    with patch("custom_components.xiaozhi.runtime.HELLO_TIMEOUT", 0.05):
        ws = await client.ws_connect(
            "/api/xiaozhi/v1/",
            headers={
                "Authorization": f"Bearer {TOKEN}",
                "Device-Id": MAC,
                "Client-Id": client_id_for(MAC),
            },
        )
        message = await ws.receive(timeout=5)
    assert message.type.name in {"CLOSE", "CLOSED", "CLOSING"}
    await ws.close()


async def test_vision_upload(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    client: TestClient[Any, Any],
) -> None:
    """A photo goes to Home Assistant; its answer goes back to the caller."""
    device = simulators(ws_url=WS_URL, token=TOKEN, camera=True)
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    result = await runtime.commands.async_call_tool(
        "self.camera.take_photo", {"question": "What is on the table?"}, check=False
    )
    assert result.is_error is False
    assert result.text == VISION_ANSWER
    photo = runtime.entry_data.last_photo
    assert photo is not None
    assert photo.content == TINY_JPEG
    assert photo.question == "What is on the table?"

    old_token = runtime.session.vision_token
    headers = {
        "Authorization": f"Bearer {old_token}",
        "Device-Id": MAC,
        "Client-Id": client_id_for(MAC),
    }

    def form(content: bytes) -> Any:
        from aiohttp import FormData

        data = FormData()
        data.add_field("question", "q")
        data.add_field(
            "file", content, filename="camera.jpg", content_type="image/jpeg"
        )
        return data

    response = await client.post(
        "/api/xiaozhi/v1/vision", data=form(b"GIF89a"), headers=headers
    )
    assert response.status == 400
    response = await client.post(
        "/api/xiaozhi/v1/vision", data=b"plain", headers=headers
    )
    assert response.status == 400
    response = await client.post(
        "/api/xiaozhi/v1/vision",
        data=form(TINY_JPEG + b"\0" * (3 * 1024 * 1024)),
        headers=headers,
    )
    assert response.status == 413

    # After a reconnect the old session's token is refused.
    await device.disconnect()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await device.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    response = await client.post(
        "/api/xiaozhi/v1/vision", data=form(TINY_JPEG), headers=headers
    )
    assert response.status == 401


async def test_unload_and_stop_with_connected_device(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Unloading closes the link cleanly; pending calls fail at once."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.silent = True
    pending = asyncio.ensure_future(
        runtime.commands.async_call_tool(
            "self.audio_speaker.set_volume", {"volume": 5}, check=False
        )
    )
    await simulator.wait_for(lambda: len(simulator.mcp_requests) > 0)
    assert await hass.config_entries.async_unload(init_integration.entry_id)
    assert init_integration.state is ConfigEntryState.NOT_LOADED
    with pytest.raises(HomeAssistantError):
        await pending
    await simulator.wait_disconnected()
