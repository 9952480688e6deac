"""Hostile devices and clients against the real HTTP app: Home Assistant holds.

Links that drop, devices that never answer or answer twice, oversized and
garbage frames, a thousand reconnects, two devices with one MAC, a token
changed under a live link, reloads and shutdown with devices connected, and
endpoints flooded with bad requests.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
import dataclasses
import gc
from http import HTTPStatus
import itertools
import json
import logging
import random
import time
import tracemalloc
from typing import Any
import warnings

from aiohttp import ClientSession, ClientWebSocketResponse, FormData, WSMsgType
from aiohttp.test_utils import TestClient
from homeassistant.config_entries import ConfigEntryState
from homeassistant.const import ATTR_ENTITY_ID
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import (
    CONF_TOKEN,
    DOMAIN,
    MAX_OTA_BODY,
    URL_ACTIVATE,
    URL_OTA,
    URL_SNAPSHOT,
    URL_VISION,
    URL_WEBSOCKET,
)
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.protocol import CloseReason, DeviceEvent, DeviceSession
from custom_components.xiaozhi.protocol.messages import MAX_DEPTH
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import TINY_JPEG, DeviceConnectionError, SimulatedDevice
from simulator.cli import client_id_for
from tests.conftest import (
    MAC,
    TOKEN,
    WS_URL,
    device_headers,
    system_info,
    wait_for_runtime,
)

pytestmark = pytest.mark.slow

VOLUME = "self.audio_speaker.set_volume"
STATUS = "self.get_device_status"
HELLO_NO_MCP = json.dumps(
    {
        "type": "hello",
        "version": 1,
        "transport": "websocket",
        "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1},
    }
)
IDENTITY = {"Device-Id": MAC, "Client-Id": client_id_for(MAC)}
WS_HEADERS = {"Authorization": f"Bearer {TOKEN}", **IDENTITY}


def tool_calls(device: SimulatedDevice, name: str) -> list[dict[str, Any]]:
    """Return the tools/call requests for ``name`` the device received."""
    return [
        request
        for request in device.mcp_requests
        if request.get("method") == "tools/call"
        and request.get("params", {}).get("name") == name
    ]


async def open_raw_link(
    client: TestClient[Any, Any] | ClientSession, url: Any = URL_WEBSOCKET
) -> ClientWebSocketResponse:
    """Open a WebSocket as a device without MCP and finish the hello exchange."""
    ws = await client.ws_connect(url, headers=WS_HEADERS)
    await ws.send_str(HELLO_NO_MCP)
    message = await ws.receive(timeout=5)
    assert message.type is WSMsgType.TEXT
    assert json.loads(message.data)["type"] == "hello"
    return ws


async def reconnect_and_call(
    simulator: SimulatedDevice, runtime: XiaozhiRuntime, volume: int
) -> None:
    """Connect the device again and prove a tool call works end to end."""
    await simulator.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": volume}, check=False)
    ).text == "true"


def integration_tasks() -> list[asyncio.Task[Any]]:
    """Return the running tasks that are somewhere inside integration code."""
    found = []
    for task in asyncio.all_tasks():
        if task is asyncio.current_task():
            continue
        awaited: Any = task.get_coro()
        while awaited is not None:
            code = getattr(awaited, "cr_code", None) or getattr(
                awaited, "gi_code", None
            )
            if code is not None and "custom_components/xiaozhi" in code.co_filename:
                found.append(task)
                break
            awaited = getattr(awaited, "cr_await", None) or getattr(
                awaited, "gi_yieldfrom", None
            )
    return found


# --- a link that drops, a device that never answers or answers twice ----------


async def test_drop_mid_call_fails_within_100_ms(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Once the link drops, a call waiting for an answer fails at once."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.silent = True
    call = asyncio.ensure_future(
        runtime.commands.async_call_tool(VOLUME, {"volume": 10}, check=False)
    )
    await simulator.wait_for(lambda: bool(tool_calls(simulator, VOLUME)))

    started = time.monotonic()
    simulator.drop_link()
    with pytest.raises(HomeAssistantError) as err:
        await call
    elapsed = time.monotonic() - started

    assert err.value.translation_key == "connection_lost"
    assert elapsed < 0.1, f"the call failed {elapsed * 1000:.0f} ms after the drop"
    await wait_for_runtime(runtime, lambda d: d.session is None)
    assert simulator.close_reason == "dropped"
    # The device comes back and works.
    simulator.faults.silent = False
    await reconnect_and_call(simulator, runtime, 11)


async def test_silent_device_times_out_and_nothing_stays_pending(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Calls and listings time out; nothing hangs; the link is kept."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    session = runtime.session
    assert session is not None
    simulator.faults.silent = True
    async with asyncio.timeout(5):
        outcomes = await asyncio.gather(
            *(
                runtime.commands.async_call_tool(
                    VOLUME, {"volume": volume}, timeout=0.05, check=False
                )
                for volume in range(5)
            ),
            return_exceptions=True,
        )
        session.request_timeout = 0.05
        with pytest.raises(HomeAssistantError) as err:
            await runtime.commands.async_refresh()
    assert all(
        isinstance(outcome, HomeAssistantError) and outcome.translation_key == "timeout"
        for outcome in outcomes
    )
    assert err.value.translation_key == "timeout"
    assert session.mcp.pending_count == 0
    assert len(tool_calls(simulator, VOLUME)) == 5

    simulator.faults.silent = False
    result = await runtime.commands.async_call_tool(VOLUME, {"volume": 12}, check=False)
    assert result.text == "true"
    assert runtime.session is session
    assert session.mcp.pending_count == 0


async def test_second_answer_to_one_request_is_ignored(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first reply wins; a second one, same or different, changes nothing."""
    caplog.set_level(logging.DEBUG, logger="custom_components.xiaozhi.protocol")
    runtime: XiaozhiRuntime = init_integration.runtime_data
    assert runtime.session is not None

    # Different replies to one id, sent by hand.
    simulator.faults.silent = True
    call = asyncio.ensure_future(
        runtime.commands.async_call_tool(VOLUME, {"volume": 13}, check=False)
    )
    await simulator.wait_for(lambda: bool(tool_calls(simulator, VOLUME)))
    request_id = tool_calls(simulator, VOLUME)[-1]["id"]
    for reply in (
        {"result": {"content": [{"type": "text", "text": "first"}]}},
        {"result": {"content": [{"type": "text", "text": "second"}]}},
        {"error": {"message": "third"}},
    ):
        await simulator.send_mcp_payload(
            json.dumps({"jsonrpc": "2.0", "id": request_id, **reply})
        )
    result = await call
    assert (result.is_error, result.text) == (False, "first")

    # The firmware repeating every reply, while other calls wait.
    simulator.faults.silent = False
    simulator.faults.duplicate_replies = True
    caplog.clear()
    volume = await runtime.commands.async_call_tool(VOLUME, {"volume": 31}, check=False)
    theme = await runtime.commands.async_call_tool(
        "self.screen.set_theme", {"theme": "dark"}, check=False
    )
    status = await runtime.commands.async_call_tool(STATUS, check=False)
    simulator.faults.duplicate_replies = False
    # One more round trip: every duplicate before it has been read.
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 32}, check=False)
    ).text == "true"

    assert (volume.text, theme.text) == ("true", "true")
    assert status.json["audio_speaker"]["volume"] == 31
    assert status.json["screen"]["theme"] == "dark"
    ignored = [
        record
        for record in caplog.records
        if record.getMessage().startswith("Ignoring MCP reply to unknown or answered")
    ]
    assert len(ignored) == 3
    assert runtime.session.mcp.pending_count == 0


# --- oversized and garbage frames ----------------------------------------------


async def test_ten_megabyte_frame_closes_the_link_and_the_device_comes_back(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A frame over the limit ends the link with a log line; nothing else."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    frame = json.dumps({"type": "listen", "state": "detect", "text": "x" * 10_000_000})
    await simulator.send_raw(frame)
    await simulator.wait_disconnected()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    assert "WebSocket error" in caplog.text
    assert "exceeds limit" in caplog.text

    await reconnect_and_call(simulator, runtime, 14)


async def test_garbage_frames_are_dropped_and_the_link_stays(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Binary garbage is counted, text garbage logged; the device keeps working."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    session = runtime.session
    assert session is not None
    events: list[DeviceEvent] = []
    runtime.entry_data.async_subscribe_events(events.append)
    rng = random.Random(20240612)  # noqa: S311 - reproducible garbage

    garbage = [rng.randbytes(size) for size in (1, 7, 16, 4096, 65_536, 1_000_000)]
    for data in garbage:
        await simulator.send_bytes(data)
    deep = MAX_DEPTH * 2
    for text in (
        "\x00" * 1000,
        "{" * 100_000,
        '{"type":"custom","payload":' + "[" * deep + "]" * deep + "}",
        '{"type":"custom","payload":' + "[" * 2000 + "]" * 2000 + "}",
        json.dumps({"type": "mcp", "payload": {"id": [[1]], "result": "x"}}),
        json.dumps({"type": ["listen"], "state": "detect"}),
    ):
        await simulator.send_raw(text)
    await simulator.send_listen("detect", text="still here")
    await wait_for_runtime(runtime, lambda d: d.entry_data.activity == "listening")

    assert runtime.session is session
    assert session.audio_frames == len(garbage)
    assert session.audio_bytes == sum(map(len, garbage))
    # Only the wake word came through; frames too deep to store were dropped.
    assert [event.type for event in events] == ["wake_word"]
    assert "Ignoring malformed frame" in caplog.text
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 15}, check=False)
    ).text == "true"


async def test_invalid_utf8_text_frame_closes_the_link(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A text frame that is not UTF-8 ends the link; the device reconnects."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    ws = simulator._ws
    assert ws is not None
    await ws.send_frame(b'{"type":"listen","text":"\xff\xfe"}', WSMsgType.TEXT)
    await simulator.wait_disconnected()
    await wait_for_runtime(runtime, lambda d: d.session is None)
    assert "WebSocket error" in caplog.text

    await reconnect_and_call(simulator, runtime, 16)


async def test_odd_status_shapes_do_not_break_entities(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """A status with the wrong shapes shows nothing wrong and is set right."""
    device = simulators(ws_url=WS_URL, token=TOKEN)
    odd = {"audio_speaker": 5, "screen": ["bright"], "battery": {"level": "full"}}

    async def odd_status(_device: SimulatedDevice, _arguments: Any) -> Any:
        return odd

    device.tools = [
        dataclasses.replace(tool, handler=odd_status) if tool.name == STATUS else tool
        for tool in device.tools
    ]
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert runtime.entry_data.status.raw == odd

    registry = er.async_get(hass)
    volume = registry.async_get_entity_id("number", "xiaozhi", f"{MAC}-volume")
    assert volume is not None
    assert hass.states.get(volume).state == "unknown"
    await hass.services.async_call(
        "number", "set_value", {ATTR_ENTITY_ID: volume, "value": 40}, blocking=True
    )
    assert device.state.volume == 40
    assert runtime.entry_data.status.raw["audio_speaker"] == {"volume": 40}
    assert hass.states.get(volume).state == "40"


async def test_unencodable_arguments_fail_cleanly(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """Arguments JSON cannot carry give a clear error and the link stays."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    session = runtime.session
    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(
            "self.screen.set_theme", {"theme": "unpaired \ud800"}, check=False
        )
    assert err.value.translation_key == "device_error"
    with pytest.raises(HomeAssistantError) as err:
        await runtime.commands.async_call_tool(VOLUME, {"volume": 2**64}, check=False)
    assert err.value.translation_key == "out_of_range"
    assert runtime.session is session
    assert session is not None
    assert session.mcp.pending_count == 0
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 17}, check=False)
    ).text == "true"


# --- many connections ----------------------------------------------------------

CYCLES = 1000
BATCH = 100


def _traced_bytes() -> int:
    """Return the bytes allocated outside logging, pytest and tracemalloc."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, logging.__file__),
            tracemalloc.Filter(False, "*/_pytest/*"),
            tracemalloc.Filter(False, "<frozen *>"),
            tracemalloc.Filter(False, "<unknown>"),
        ]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_thousand_connect_cycles_leave_nothing_behind(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """1 000 connect/disconnect cycles: no task and no memory piles up.

    The device side is a plain aiohttp session (the test client keeps every
    WebSocket it opened until the end of the test), records are not kept
    (caplog would hold thousands) and asyncio's debug mode, which keeps a
    traceback per task and callback, is off.
    """
    caplog.set_level(logging.WARNING)
    loop = asyncio.get_running_loop()
    debug = loop.get_debug()
    loop.set_debug(False)
    runtime: XiaozhiRuntime = init_integration.runtime_data
    url = client.make_url(URL_WEBSOCKET)

    async def cycle(http: ClientSession) -> None:
        ws = await open_raw_link(http, url)
        await wait_for_runtime(runtime, lambda d: d.connected)
        await ws.close()
        await wait_for_runtime(runtime, lambda d: d.session is None)

    tasks: list[int] = []
    memory: list[int] = []
    try:
        async with ClientSession() as http:
            for _ in range(BATCH):  # warm up caches, pools and lazy imports
                await cycle(http)
            tracemalloc.start()
            try:
                for _ in range(CYCLES // BATCH):
                    for _ in range(BATCH):
                        await cycle(http)
                    await hass.async_block_till_done()
                    gc.collect()
                    tasks.append(len(asyncio.all_tasks()))
                    memory.append(_traced_bytes())
            finally:
                tracemalloc.stop()
    finally:
        loop.set_debug(debug)

    # The first sample is the baseline: tracing starts with the first batch.
    growth = [after - before for before, after in itertools.pairwise(memory)]
    assert max(tasks) - min(tasks) <= 3, tasks
    assert tasks[-1] <= tasks[0] + 1, tasks
    assert memory[-1] - memory[0] < 256 * 1024, memory
    assert not all(step > 0 for step in growth), memory
    assert runtime.session is None
    assert integration_tasks() == []


# --- one MAC, two devices; a token changed under a live link ------------------


async def test_second_device_with_one_mac_replaces_the_first(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    client: TestClient[Any, Any],
) -> None:
    """The newcomer wins; the first link is closed with a reason, its calls fail."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    first = await open_raw_link(client)
    await wait_for_runtime(runtime, lambda d: d.connected)
    first_session = runtime.session
    assert first_session is not None
    pending = asyncio.ensure_future(first_session.call_tool("self.anything", {}, 30))
    request = await first.receive(timeout=5)
    assert json.loads(request.data)["payload"]["method"] == "tools/call"

    second = await open_raw_link(client)
    # The first link was closed before the newcomer got its hello.
    assert pending.done()
    with pytest.raises(Exception, match="replaced") as err:
        pending.result()
    assert type(err.value).__name__ == "ConnectionClosedError"
    closing = await first.receive(timeout=5)
    assert closing.type is WSMsgType.CLOSE
    assert closing.extra == "replaced by a new connection"
    assert first_session.close_reason is CloseReason.REPLACED
    await wait_for_runtime(
        runtime, lambda d: d.connected and d.session is not first_session
    )
    await second.close()
    await first.close()
    await wait_for_runtime(runtime, lambda d: d.session is None)


async def test_token_change_ends_the_link_and_the_old_token(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    client: TestClient[Any, Any],
) -> None:
    """Reconfiguring a connected device closes its link; the old token is dead."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    device = simulators(ws_url=WS_URL, token=TOKEN, user_tools=False)
    await device.connect()
    await wait_for_runtime(runtime, lambda d: d.connected)
    old_session = runtime.session
    assert old_session is not None
    device.faults.silent = True
    pending = asyncio.ensure_future(
        runtime.commands.async_call_tool(VOLUME, {"volume": 5}, check=False)
    )
    await device.wait_for(lambda: bool(tool_calls(device, VOLUME)))

    result = await init_integration.start_reconfigure_flow(hass)
    result = await hass.config_entries.flow.async_configure(result["flow_id"], {})
    assert result["reason"] == "reconfigure_successful"
    new_token = init_integration.data[CONF_TOKEN]
    assert new_token != TOKEN

    assert pending.done()
    with pytest.raises(HomeAssistantError) as err:
        await pending
    assert err.value.translation_key == "connection_lost"
    await device.wait_disconnected()
    assert device.close_reason == "server_closed"
    assert old_session.close_reason is CloseReason.SERVER_CLOSED
    await wait_for_runtime(runtime, lambda d: d.session is None)

    with pytest.raises(DeviceConnectionError, match="401"):
        await device.connect(token=TOKEN)
    response = await client.post(
        URL_VISION,
        data=b"",
        headers={"Authorization": f"Bearer {old_session.vision_token}", **IDENTITY},
    )
    assert response.status == 401
    device.faults.silent = False
    await device.connect(token=new_token)
    await wait_for_runtime(runtime, lambda d: d.connected)
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 18}, check=False)
    ).text == "true"


# --- reload and shutdown --------------------------------------------------------


async def test_reload_with_a_connected_device(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """A reload closes the link cleanly; the device reconnects to the new runtime."""
    old_runtime: XiaozhiRuntime = init_integration.runtime_data
    old_session = old_runtime.session
    assert old_session is not None
    assert await hass.config_entries.async_reload(init_integration.entry_id)
    await hass.async_block_till_done()
    assert init_integration.state is ConfigEntryState.LOADED
    await simulator.wait_disconnected()
    assert old_session.closed
    assert old_runtime.session is None

    runtime: XiaozhiRuntime = init_integration.runtime_data
    assert runtime is not old_runtime
    await reconnect_and_call(simulator, runtime, 19)
    entry = hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, MAC)
    assert entry is not None
    assert entry.runtime_data is runtime
    # Nothing of the old link is still running (handshake, keep-alive...).
    assert not old_session._tasks
    assert old_session.mcp.pending_count == 0


async def test_stop_with_devices_connected_leaves_nothing_running(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    client: TestClient[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Shutdown closes every link and leaves no task, socket or warning."""
    runtime: XiaozhiRuntime = init_integration.runtime_data
    simulator.faults.silent = True
    pending = asyncio.ensure_future(
        runtime.commands.async_call_tool(VOLUME, {"volume": 5}, check=False)
    )
    await simulator.wait_for(lambda: bool(tool_calls(simulator, VOLUME)))
    # A second socket that has not said hello yet: its session waits for it.
    silent_socket = await client.ws_connect(URL_WEBSOCKET, headers=WS_HEADERS)
    reader = asyncio.ensure_future(silent_socket.receive(timeout=10))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await hass.async_stop()
        with pytest.raises(HomeAssistantError):
            await pending
        closing = await reader
        await simulator.wait_disconnected()
        gc.collect()

    assert closing.type in (WSMsgType.CLOSE, WSMsgType.CLOSED)
    assert runtime.session is None
    assert integration_tasks() == []
    assert [str(warning.message) for warning in caught] == []
    for bad in (
        "Task was destroyed",
        "Task exception was never retrieved",
        "Unclosed",
        "was never awaited",
        "Error doing job",
        "Traceback",
    ):
        assert bad not in caplog.text
    await silent_socket.close()


# --- endpoints flooded with bad requests ---------------------------------------


def _random_mac(rng: random.Random) -> str:
    return ":".join(f"{rng.randrange(256):02x}" for _ in range(6))


def _bad_device_ids(rng: random.Random) -> list[str]:
    return [
        "",
        " ",
        "not-a-mac",
        "aa:bb:cc:dd:ee",
        "aa:bb:cc:dd:ee:ff:00",
        "aa-bb:cc-dd:ee-ff",
        "gg:hh:ii:jj:kk:ll",
        "aabbccddeeff00",
        MAC + "\t" + MAC,
        "".join(rng.choice("0123456789abcdef:- ") for _ in range(rng.randrange(40))),
    ]


def _multipart(rng: random.Random, boundary: str) -> bytes:
    """Return a multipart body cut, mangled or mislabelled in a random way."""
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="question"\r\n\r\n'
        "what?\r\n".encode(),
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="camera.jpg"\r\nContent-Type: image/jpeg\r\n\r\n'
        ).encode()
        + rng.choice([b"GIF89a", TINY_JPEG[:2], rng.randbytes(64), b""])
        + b"\r\n",
        f"--{boundary}--\r\n".encode(),
    ]
    match rng.randrange(8):
        case 0:
            body = b"".join(parts[:-1])  # no closing boundary
        case 1:
            body = b"".join(parts)[: rng.randrange(1, 200)]  # cut anywhere
        case 2:
            body = parts[0] + parts[2]  # no file
        case 3:
            body = b"".join(parts).replace(b"Content-Disposition", b"X-Nothing")
        case 4:
            body = (
                f"--{boundary}\r\nContent-Type: multipart/mixed; boundary=in\r\n\r\n"
                "--in\r\n\r\nx\r\n--in--\r\n"
                f"--{boundary}--\r\n"
            ).encode()
        case 5:
            body = rng.randbytes(rng.randrange(1, 4096))
        case 6:
            # A part header line far over the parser's limit.
            pad = "a" * 70_000
            body = (
                f"--{boundary}\r\nContent-Disposition: form-data; name=file\r\n"
                f"X-Pad: {pad}\r\n\r\n"
            ).encode()
        case _:
            body = b"".join(parts).replace(b"\r\n", b"\n")
    return body


FLOODER = "10.0.0.66"


async def _flood(
    client: TestClient[Any, Any],
    rng: random.Random,
    vision_token: str,
    snapshot_tokens: AsyncIterator[str],
    source: str,
) -> list[tuple[str, str, int]]:
    """Send a few hundred bad requests from ``source`` (through the proxy).

    Return (method, url, status) of each.
    """
    statuses: list[tuple[str, str, int]] = []

    async def send(method: str, url: str, **kwargs: Any) -> None:
        kwargs["headers"] = {**kwargs.get("headers", {}), "X-Forwarded-For": source}
        response = await client.request(method, url, **kwargs)
        await response.read()
        statuses.append((method, url, response.status))

    for url in (URL_OTA, URL_ACTIVATE):
        for device_id in _bad_device_ids(rng):
            await send("POST", url, headers={"Device-Id": device_id}, data=b"{}")
        for _ in range(60):
            body = rng.choice(
                [
                    b"\x00" + rng.randbytes(rng.randrange(512)),
                    b"[1, 2, 3]",
                    b'"a string"',
                    b"42",
                    b"null",
                    b'{"board": ',
                    b"\xff\xfe{}",
                    b"{" * 10_000,
                    b"x" * (MAX_OTA_BODY + 1),
                ]
            )
            await send("POST", url, headers=device_headers(_random_mac(rng)), data=body)
        for method in ("GET", "PUT", "DELETE"):
            await send(method, url, headers=device_headers())

    good_vision = {"Authorization": f"Bearer {vision_token}", **IDENTITY}
    for headers in (
        {},
        {"Device-Id": MAC},
        {"Authorization": f"Bearer {vision_token}"},
        {"Authorization": vision_token, "Device-Id": MAC},
        {"Authorization": "Bearer ", "Device-Id": MAC},
        {"Authorization": f"Basic {vision_token}", "Device-Id": MAC},
        {"Authorization": f"Bearer {vision_token}x", "Device-Id": MAC},
        {"Authorization": f"Bearer {vision_token}", "Device-Id": _random_mac(rng)},
        {"Authorization": f"Bearer {TOKEN}", "Device-Id": MAC},
    ):
        await send("POST", URL_VISION, headers=headers, data=b"x")
    for _ in range(60):
        boundary = rng.choice(["b0undary", "x" * 80, "", "a b", "---"])
        content_type = rng.choice(
            [
                f"multipart/form-data; boundary={boundary}",
                "multipart/form-data",
                f'multipart/form-data; boundary="{boundary}"',
                "image/jpeg",
                "text/plain",
                "",
            ]
        )
        await send(
            "POST",
            URL_VISION,
            headers={**good_vision, "Content-Type": content_type},
            data=_multipart(rng, boundary or "b"),
        )
    form = FormData()
    form.add_field("file", TINY_JPEG + b"\0" * (3 * 1024 * 1024), filename="c.jpg")
    await send("POST", URL_VISION, headers=good_vision, data=form)
    await send("GET", URL_VISION, headers=good_vision)

    for _ in range(20):
        await send("POST", f"{URL_SNAPSHOT}/{rng.randbytes(8).hex()}", data=b"x")
    for _ in range(30):
        token = await anext(snapshot_tokens)
        await send(
            "POST",
            f"{URL_SNAPSHOT}/{token}",
            headers={"Content-Type": "multipart/form-data; boundary=b"},
            data=_multipart(rng, "b"),
        )
        # One-time: the same URL is refused afterwards.
        await send("POST", f"{URL_SNAPSHOT}/{token}", data=b"x")

    for headers in (
        {},
        {"Authorization": "Bearer nope", "Device-Id": MAC},
        {"Authorization": f"Bearer {TOKEN}", "Device-Id": _random_mac(rng)},
        WS_HEADERS,  # a plain GET, no upgrade
    ):
        await send("GET", URL_WEBSOCKET, headers=headers)
    return statuses


@pytest.mark.filterwarnings("ignore::aiohttp.BadContentDispositionHeader")
async def test_endpoints_refuse_a_flood_of_bad_requests(
    hass: HomeAssistant,
    behind_proxy: None,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    client: TestClient[Any, Any],
) -> None:
    """Hundreds of bad requests: all 4xx, none 5xx; good ones still work after.

    The flooding address is shut out once it got too many credentials wrong;
    the device, on its own address, is not.
    """
    runtime: XiaozhiRuntime = init_integration.runtime_data
    session: DeviceSession | None = runtime.session
    assert session is not None
    assert runtime.channel is not None
    uploads = runtime.channel.urls
    assert uploads is not None

    async def snapshot_tokens() -> AsyncIterator[str]:
        while True:
            url, _revoke = uploads.mint_snapshot_url()
            yield url.rpartition("/")[2]

    statuses = await _flood(
        client,
        random.Random(7),  # noqa: S311 - reproducible garbage
        session.vision_token,
        snapshot_tokens(),
        FLOODER,
    )
    assert len(statuses) >= 300
    unexpected = [entry for entry in statuses if not 400 <= entry[2] < 500]
    assert unexpected == []
    assert statuses[-1][2] == HTTPStatus.FORBIDDEN
    assert hass.data[DATA_KEY].logins.blocked(FLOODER)
    assert runtime.entry_data.last_photo is None
    assert runtime.entry_data.screen is None
    assert list(hass.config_entries.flow.async_progress()) == []

    # Good requests still get through.
    response = await client.post(URL_OTA, json=system_info(), headers=device_headers())
    assert response.status == 200
    assert (await response.json())["websocket"]["token"] == TOKEN
    assert runtime.session is session
    assert (
        await runtime.commands.async_call_tool(VOLUME, {"volume": 20}, check=False)
    ).text == "true"
    form = FormData()
    form.add_field("question", "q")
    form.add_field("file", TINY_JPEG, filename="camera.jpg", content_type="image/jpeg")
    response = await client.post(
        URL_VISION,
        data=form,
        headers={"Authorization": f"Bearer {session.vision_token}", **IDENTITY},
    )
    assert response.status == 200
    assert runtime.entry_data.last_photo is not None
