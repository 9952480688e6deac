"""The WebSocket side: headers, hello, session id, dispatch, link lifecycle."""

import asyncio
import json
import logging
import struct

from aiohttp.test_utils import TestClient
import pytest

from aioxiaozhi.testing import (
    DeviceConnectionError,
    DeviceError,
    HelloTimeoutError,
    ServerHelloRejected,
    SimulatedDevice,
    relative_url,
)

from .conftest import WAIT, Conn, DeviceFactory, FakeServer

HELLO_TEXT = (
    '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket",'
    '"audio_params":{"format":"opus","sample_rate":16000,"channels":1,'
    '"frame_duration":60}}'
)


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("abc123", "Bearer abc123"),
        ("Token abc123", "Token abc123"),
        ("Bearer abc123", "Bearer abc123"),
        (None, None),
        ("", None),
    ],
)
async def test_handshake_headers(
    server: FakeServer,
    make_device: DeviceFactory,
    token: str | None,
    expected: str | None,
) -> None:
    device = make_device(token=token, mac="AA:BB:CC:DD:EE:42", client_id="cid-1")
    await device.connect()
    conn = await server.conn()
    assert conn.headers.get("Authorization") == expected
    assert conn.headers["Protocol-Version"] == "1"
    assert conn.headers["Device-Id"] == "aa:bb:cc:dd:ee:42"
    assert conn.headers["Client-Id"] == "cid-1"


async def test_connect_arguments_override_config(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(ws_url=None, token="old")
    await device.connect(server.ws_url, "new")
    conn = await server.conn()
    assert conn.headers["Authorization"] == "Bearer new"
    assert device.ws_url == server.ws_url


async def test_hello_is_first_frame_exactly(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, conn = connected
    assert conn.texts[0] == HELLO_TEXT
    assert device.sent[0] == HELLO_TEXT
    assert device.session_id == "sess-1"
    assert device.server_audio_params == {
        "format": "opus",
        "sample_rate": 24000,
        "channels": 1,
        "frame_duration": 60,
    }
    assert device.server_hello is not None
    assert device.connect_count == 1
    assert "connected=True" in repr(device)


async def test_hello_variants(server: FakeServer, make_device: DeviceFactory) -> None:
    device = make_device(
        protocol_version=3,
        extra_features={"aec": True},
        hello_extra={"text_font": {"size": 20}},
    )
    await device.connect()
    hello = json.loads((await server.conn()).texts[0])
    assert hello["version"] == 3
    assert hello["features"] == {"aec": True, "mcp": True}
    assert hello["text_font"] == {"size": 20}

    old = make_device(features=False, mac="aa:bb:cc:dd:ee:02")
    await old.connect()
    assert "features" not in json.loads((await server.conn(1)).texts[0])


async def test_hello_timeout(server: FakeServer, make_device: DeviceFactory) -> None:
    server.hello = None
    device = make_device(hello_timeout=0.1)
    with pytest.raises(HelloTimeoutError):
        await device.connect()
    assert not device.connected
    assert device.close_reason == "hello_timeout"
    await (await server.conn()).wait_closed()


async def test_hello_with_other_transport_is_ignored(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.hello = {"type": "hello", "transport": "mqtt", "session_id": "x"}
    device = make_device(hello_timeout=0.1)
    with pytest.raises(HelloTimeoutError):
        await device.connect()
    assert not device.crashed
    assert device.session_id == ""


@pytest.mark.parametrize(
    "hello",
    [
        {"type": "hello", "session_id": "s"},
        {"type": "hello", "transport": 1, "session_id": "s"},
    ],
)
async def test_hello_without_transport_crashes(
    server: FakeServer, make_device: DeviceFactory, hello: dict[str, object]
) -> None:
    server.hello = hello
    device = make_device(reconnect_delay=0.01)
    with pytest.raises(ServerHelloRejected):
        await device.connect()
    assert device.crashed
    assert device.close_reason == "fatal_hello"
    await (await server.conn()).wait_closed()


async def test_server_closing_before_hello(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.hello = None
    device = make_device()
    task = asyncio.create_task(device.connect())
    conn = await server.conn()
    await conn.ws.close()
    with pytest.raises(DeviceConnectionError):
        await task
    assert device.close_reason == "server_closed"


async def test_frames_before_hello_are_dispatched(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.hello = None
    device = make_device()
    task = asyncio.create_task(device.connect())
    conn = await server.conn()
    await conn.frame(lambda f: f.get("type") == "hello")
    await conn.send_mcp({"jsonrpc": "2.0", "method": "initialize", "id": 1})
    reply = await conn.reply(1)
    assert reply["result"]["protocolVersion"] == "2024-11-05"
    assert conn.texts[-1].startswith('{"session_id":"","type":"mcp"')
    await conn.send({"type": "hello", "transport": "websocket", "session_id": "late"})
    await task
    assert device.session_id == "late"


async def test_connect_errors(server: FakeServer, make_device: DeviceFactory) -> None:
    device = make_device(ws_url=None)
    with pytest.raises(DeviceConnectionError, match="No WebSocket URL"):
        await device.connect()
    refused = make_device(ws_url="ws://127.0.0.1:1/ws", mac="aa:bb:cc:dd:ee:02")
    with pytest.raises(DeviceConnectionError):
        await refused.connect()
    assert refused.close_reason == "connect_failed"
    assert refused.state.activity == "idle"
    ok = make_device(mac="aa:bb:cc:dd:ee:03")
    await ok.connect()
    with pytest.raises(DeviceError, match="Already connected"):
        await ok.connect()
    assert len(server.conns) == 1


async def test_session_id_is_echoed(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    await device.send_listen("start", "manual")
    await device.send_listen("detect", text="hi xiaozhi")
    await device.send_listen("stop")
    await device.send_abort()
    await device.send_abort("wake_word_detected")
    await device.send_notification("notifications/custom", {"a": 1})
    await device.send_notification("notifications/empty")
    await conn.until(lambda: len(conn.texts) >= 8)
    assert conn.texts[1:8] == [
        '{"session_id":"sess-1","type":"listen","state":"start","mode":"manual"}',
        '{"session_id":"sess-1","type":"listen","state":"detect","text":"hi xiaozhi"}',
        '{"session_id":"sess-1","type":"listen","state":"stop"}',
        '{"session_id":"sess-1","type":"abort"}',
        '{"session_id":"sess-1","type":"abort","reason":"wake_word_detected"}',
        (
            '{"session_id":"sess-1","type":"mcp","payload":{"jsonrpc":"2.0",'
            '"method":"notifications/custom","params":{"a":1}}}'
        ),
        (
            '{"session_id":"sess-1","type":"mcp","payload":{"jsonrpc":"2.0",'
            '"method":"notifications/empty"}}'
        ),
    ]


async def test_other_implementation_sends_empty_session_id(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(other_implementation=True)
    await device.connect()
    conn = await server.conn()
    await device.send_listen("start")
    frame = await conn.frame(lambda f: f.get("type") == "listen")
    assert frame["session_id"] == ""
    reply = await conn.request("initialize", {})
    assert reply["result"]["serverInfo"]["version"] == "2.0.4"
    assert conn.frames[-1]["session_id"] == ""


async def test_activity_and_notifications(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(notifications=True)
    await device.connect()
    conn = await server.conn()

    def notes() -> list[dict[str, str]]:
        return [
            f["payload"]["params"]
            for f in conn.frames
            if f.get("type") == "mcp"
            and f["payload"].get("method") == "notifications/state_changed"
        ]

    await device.send_listen("start")
    await conn.send({"type": "tts", "state": "start"})
    await device.wait_for(lambda: device.state.activity == "speaking")
    await conn.send({"type": "tts", "state": "stop"})
    await device.wait_for(lambda: device.state.activity == "listening")
    # Nothing was queued to play: listen start goes out again at once.
    await conn.until(
        lambda: (
            [f.get("state") for f in conn.frames if f.get("type") == "listen"]
            == ["start", "start"]
        )
    )
    await device.send_abort()  # the firmware only aborts speech: no change
    await device.send_listen("stop")
    assert device.state.activity == "idle"
    await conn.until(lambda: len(notes()) == 4)
    assert notes() == [
        {"newState": "listening", "oldState": "idle"},
        {"newState": "speaking", "oldState": "listening"},
        {"newState": "listening", "oldState": "speaking"},
        {"newState": "idle", "oldState": "listening"},
    ]


async def test_tts_state_machine(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    await conn.send({"type": "tts", "state": "stop"})
    await conn.send({"type": "tts", "state": "start"})
    await device.wait_for(lambda: device.state.activity == "speaking")
    await conn.send({"type": "tts", "state": "start"})
    await conn.send({"type": "tts", "state": "sentence_start", "text": "Hello"})
    await conn.send({"type": "tts", "state": "sentence_start"})
    await conn.send({"type": "tts", "state": "other"})
    await device.wait_for(lambda: device.tts_sentences == ["Hello"])
    await device.send_listen("start", "manual")
    await conn.send({"type": "tts", "state": "start"})
    await device.wait_for(lambda: device.state.activity == "speaking")
    await conn.send({"type": "tts", "state": "stop"})
    await device.wait_for(lambda: device.state.activity == "idle")


async def test_tts_without_state_crashes(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, conn = connected
    await conn.send({"type": "tts"})
    await device.wait_disconnected(WAIT)
    assert device.crashed
    assert device.close_reason == "crash"


async def test_other_frames_are_dispatched(
    connected: tuple[SimulatedDevice, Conn], caplog: pytest.LogCaptureFixture
) -> None:
    device, conn = connected
    caplog.set_level(logging.WARNING, "aioxiaozhi.testing")
    await conn.send({"type": "stt", "text": "turn it up"})
    await conn.send({"type": "stt"})
    await conn.send({"type": "llm", "emotion": "happy", "text": "😀"})
    await conn.send({"type": "llm"})
    await conn.send({"type": "alert", "status": "s", "message": "m", "emotion": "e"})
    await conn.send({"type": "alert", "status": "s"})
    await conn.send({"type": "system", "command": "dance"})
    await conn.send({"type": "system"})
    await conn.send({"type": "custom", "payload": {"x": 1}})
    await conn.send({"type": "mystery"})
    await conn.send({"type": "mcp", "payload": "not an object"})
    await conn.send("not json")
    await conn.send("[1, 2]")
    await conn.send({"no": "type"})
    await conn.send({"type": "stt", "text": "last"})
    await device.wait_for(lambda: device.stt_texts == ["turn it up", "last"])
    assert device.state.emotion == "happy"
    assert device.alerts == [{"status": "s", "message": "m", "emotion": "e"}]
    assert device.system_commands == ["dance"]
    assert device.custom_payloads == []
    assert device.invalid_frames == 3
    assert len(device.received) == 13  # the hello and twelve frames
    assert device.received_text[-1] == '{"type": "stt", "text": "last"}'
    assert "unknown message type: custom" in caplog.text
    assert "unknown message type: mystery" in caplog.text
    assert "unknown system command dance" in caplog.text
    assert "alert needs status, message and emotion" in caplog.text
    assert device.connected


async def test_custom_messages_when_enabled(
    server: FakeServer, make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = make_device(custom_messages=True)
    await device.connect()
    conn = await server.conn()
    await conn.send({"type": "custom", "payload": {"x": 1}})
    await conn.send({"type": "custom", "payload": "text"})
    await conn.send({"type": "stt", "text": "done"})
    await device.wait_for(lambda: device.stt_texts == ["done"])
    assert device.custom_payloads == [{"x": 1}]
    assert "custom message without payload" in caplog.text


async def test_wait_for_frame_helpers(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    assert (await device.wait_for_frame())["type"] == "hello"
    mark = len(device.received)
    await conn.send({"type": "stt", "text": "one"})
    frame = await device.wait_for_frame(lambda f: f["type"] == "stt", since=mark)
    assert frame["text"] == "one"
    with pytest.raises(TimeoutError):
        await device.wait_for_frame(lambda f: f["type"] == "nothing", timeout=0.05)


async def test_idle_timeout_closes_link(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(idle_timeout=0.2)
    await device.connect()
    conn = await server.conn()
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "idle_timeout"
    await conn.wait_closed()


async def test_incoming_frames_keep_the_link_alive(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(idle_timeout=0.6)
    await device.connect()
    conn = await server.conn()
    for index in range(6):
        await asyncio.sleep(0.15)
        if index % 2:
            await conn.ws.send_bytes(b"\x00" * 10)
        else:
            await conn.send({"type": "stt", "text": str(index)})
    assert device.connected
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "idle_timeout"


async def test_pings_are_answered_but_do_not_refresh(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(idle_timeout=0.4)
    await device.connect()
    conn = await server.conn()
    await conn.ws.ping(b"x")
    await conn.until(lambda: conn.pongs == 1)
    for _ in range(4):
        await asyncio.sleep(0.15)
        if device.connected:
            await conn.ws.ping(b"x")
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "idle_timeout"


async def test_pings_unanswered_when_configured(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(answer_pings=False)
    await device.connect()
    conn = await server.conn()
    await conn.ws.ping(b"x")
    await conn.request("initialize", {})
    assert conn.pongs == 0


async def test_server_close_without_reconnect(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, conn = connected
    await conn.ws.close()
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "server_closed"
    assert device.close_reasons == ["server_closed"]
    assert device._reconnect_task is None


async def test_server_close_with_reconnect(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(reconnect_delay=0.01)
    await device.connect()
    await (await server.conn()).ws.close()
    conn = await server.conn(1)
    await device.wait_for(lambda: device.connect_count == 2)
    assert device.connected
    assert device.close_reasons == ["server_closed"]
    reply = await conn.request("initialize", {})
    assert "result" in reply


async def test_reconnect_retries_until_the_server_answers(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(reconnect_delay=0.01, hello_timeout=0.1)
    await device.connect()
    server.hello = None
    await (await server.conn()).ws.close()
    second = await server.conn(1)
    await second.frame(lambda f: f.get("type") == "hello")
    server.hello = {"type": "hello", "transport": "websocket", "session_id": "s2"}
    await device.wait_connected(WAIT)
    assert device.session_id == "s2"
    assert "hello_timeout" in device.close_reasons


async def test_reconnect_stops_on_crash(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(reconnect_delay=0.01)
    await device.connect()
    server.hello = {"type": "hello"}
    await (await server.conn()).ws.close()
    await device.wait_for(lambda: device.crashed)
    reconnect = device._reconnect_task
    assert reconnect is not None
    await asyncio.wait({reconnect})
    assert len(server.conns) == 2


async def test_disconnect_does_not_reconnect(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(reconnect_delay=0.01)
    await device.connect()
    conn = await server.conn()
    await device.disconnect()
    assert not device.connected
    assert device.close_reason == "disconnected"
    await conn.wait_closed()
    assert device._reconnect_task is None
    await device.disconnect()
    assert not await device.send_raw("{}")
    assert not await device.send_bytes(b"x")


async def test_system_reboot_command(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device()
    await device.connect()
    await (await server.conn()).send({"type": "system", "command": "reboot"})
    await server.conn(1)
    await device.wait_for(lambda: device.connect_count == 2)
    assert device.reboot_count == 1
    assert device.close_reasons == ["reboot"]


async def test_reboot_while_offline_comes_back(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device()
    await device.reboot()
    await device.wait_connected(WAIT)
    assert device.reboot_count == 1
    assert len(server.conns) == 1


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_binary_audio_framing(
    server: FakeServer, make_device: DeviceFactory, version: int
) -> None:
    device = make_device(protocol_version=version)
    await device.connect()
    conn = await server.conn()
    assert conn.headers["Protocol-Version"] == str(version)
    sent = await device.send_audio(3)
    await conn.until(lambda: len(conn.binary) == 3)
    assert conn.binary == sent
    for index, data in enumerate(conn.binary):
        if version == 1:
            payload = data
        elif version == 2:
            ver, kind, reserved, timestamp, size = struct.unpack(">HHIII", data[:16])
            assert (ver, kind, reserved, timestamp) == (2, 0, 0, index * 60)
            payload = data[16:]
            assert size == len(payload)
        else:
            kind, reserved, size = struct.unpack(">BBH", data[:4])
            assert (kind, reserved) == (0, 0)
            payload = data[4:]
            assert size == len(payload)
        assert 40 <= len(payload) <= 120


@pytest.mark.parametrize(
    ("version", "frame", "payload"),
    [
        (1, b"opus", b"opus"),
        (2, struct.pack(">HHIII", 2, 0, 0, 60, 4) + b"opus", b"opus"),
        (3, struct.pack(">BBH", 0, 0, 4) + b"opus", b"opus"),
        (2, b"short", None),
        (3, b"ab", None),
    ],
)
async def test_incoming_binary_is_counted(
    server: FakeServer,
    make_device: DeviceFactory,
    version: int,
    frame: bytes,
    payload: bytes | None,
) -> None:
    device = make_device(protocol_version=version)
    await device.connect()
    await (await server.conn()).ws.send_bytes(frame)
    await device.wait_for(lambda: device.binary_received == 1)
    assert device.audio_received == ([payload] if payload else [])


async def test_raw_sends(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    assert await device.send_raw("{broken")
    assert await device.send_bytes(b"\x01\x02")
    await conn.until(lambda: conn.binary == [b"\x01\x02"] and "{broken" in conn.texts)
    assert device.sent_binary == [b"\x01\x02"]


async def test_test_client_with_relative_urls(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    client = TestClient(server.server)
    await client.start_server()
    try:
        device = make_device(http=client, url_rewriter=relative_url, camera=True)
        await device.connect()
        conn = await server.conn()
        await conn.request(
            "initialize",
            {"capabilities": {"vision": {"url": server.url("/vision"), "token": ""}}},
        )
        reply = await conn.call("self.camera.take_photo", {"question": "q"})
        assert reply["result"]["content"][0]["text"] == server.upload_body
        await device.stop()
        assert not client.session.closed
    finally:
        await client.close()


async def test_context_manager_and_own_session(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    async with make_device() as device:
        await device.connect()
        session = device._own_session
        assert session is not None
    assert session.closed
    assert not device.connected
    assert device.close_reason == "stopped"
    await (await server.conn()).wait_closed()


async def test_stop_during_connect(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.hello = None
    device = make_device()
    task = device.spawn_task(device.connect(), "connect")
    await server.conn()
    await device.stop()
    assert task.cancelled()
    assert not device.connected


async def test_unexpected_errors_end_the_link(
    connected: tuple[SimulatedDevice, Conn],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    device, conn = connected

    def explode(data: bytes) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(device, "_on_binary", explode)
    await conn.ws.send_bytes(b"x")
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "error"
    assert "unexpected error on the link" in caplog.text


async def test_oversized_frame_is_a_link_error(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(max_msg_size=400)
    await device.connect()
    await (await server.conn()).send({"type": "stt", "text": "x" * 1000})
    await device.wait_disconnected(WAIT)
    assert device.close_reason == "error"


async def test_idle_calls_are_harmless(make_device: DeviceFactory) -> None:
    device = make_device()
    assert await device.send_audio(2) == []
    device.drop_link()
    await device.disconnect()
    await device.mcp.handle(["not", "an", "object"])
    assert device.mcp_requests == []
    await device.stop()
    await device.reboot()
    assert device._reconnect_task is None


async def test_failed_tasks_are_logged(
    make_device: DeviceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    device = make_device()

    async def boom() -> None:
        raise RuntimeError("bang")

    task = device.spawn_task(boom(), "boom")
    await asyncio.wait({task})
    assert task not in device._tasks
    assert "task aa:bb:cc:dd:ee:01 boom failed" in caplog.text
