"""A ready session: frames from the device, tool calls, keep-alive, the end."""

import asyncio
import json
import logging
from typing import Any

import pytest

from aioxiaozhi import (
    CloseReason,
    ConnectionClosedError,
    McpError,
    RequestTimeoutError,
    ToolResult,
)
from aioxiaozhi.events import event_from_frame
from aioxiaozhi.tools import ToolImage

from .fakes import (
    HELLO_NO_MCP,
    REBOOT_TOOL,
    SILENT,
    STATUS,
    STATUS_TOOL,
    STATUS_TOOL_NAME,
    VOLUME_TOOL,
    Error,
    Raw,
    Result,
    Rig,
    firmware_error_frame,
    text_result,
    wait,
)

VOLUME = "self.audio_speaker.set_volume"
PHOTO = "self.camera.take_photo"


@pytest.fixture
def device_tools(rig: Rig) -> None:
    rig.device.tools = [STATUS_TOOL, VOLUME_TOOL, REBOOT_TOOL]
    rig.device.status = STATUS


# --- frames from the device ------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        {"session_id": "", "type": "listen", "state": "detect", "text": "hi"},
        {"session_id": "x", "type": "abort", "reason": "wake_word_detected"},
        {"type": "goodbye"},
    ],
)
async def test_frames_go_to_the_owner(rig: Rig, frame: dict[str, Any]) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    session.feed_text(json.dumps(frame))
    assert rig.handler.messages == [event_from_frame(frame)]


async def test_malformed_frame_after_hello(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    session.feed_text('{"type":"listen"')
    session.feed_text("[]")
    assert rig.handler.messages == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Ignoring malformed frame (invalid JSON" in warnings[0].getMessage()


async def test_notification_goes_to_the_owner(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    rig.transport.drain()
    rig.device.feed(
        {
            "session_id": session.session_id,
            "type": "mcp",
            "payload": {
                "jsonrpc": "2.0",
                "method": "notifications/state_changed",
                "params": {"newState": "speaking", "oldState": "listening"},
            },
        }
    )
    rig.device.feed({"type": "mcp", "payload": {"method": "notifications/x"}})
    assert rig.handler.notifications == [
        (
            "notifications/state_changed",
            {"newState": "speaking", "oldState": "listening"},
        ),
        ("notifications/x", {}),
    ]
    assert rig.handler.messages == []
    assert rig.transport.sent == []


async def test_request_from_device_gets_an_error(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    rig.transport.drain()
    rig.device.feed(
        {
            "type": "mcp",
            "payload": {"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage"},
        }
    )
    assert await rig.transport.next_frame() == {
        "session_id": session.session_id,
        "type": "mcp",
        "payload": {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32601, "message": "Method not found"},
        },
    }
    assert rig.handler.notifications == []


async def test_answer_to_device_on_a_broken_socket(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    await wait(asyncio.gather(*session._tasks))
    rig.transport.drain()
    rig.transport.send_error = ConnectionResetError("reset by peer")
    rig.device.feed(
        {"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 7, "method": "x"}}
    )
    (answer,) = [task for task in session._tasks if not task.done()]
    await wait(answer)
    # Nobody awaits this answer: it must not end with an unretrieved error.
    assert answer.exception() is None
    assert rig.transport.sent == []


async def test_audio_is_counted_and_passed_on_after_the_hello(rig: Rig) -> None:
    session = rig.open()
    session.feed_audio(b"\x01\x02")
    session = await rig.connect(HELLO_NO_MCP)
    session.feed_audio(b"\x00" * 40)
    session.feed_audio(b"")
    session.feed_audio(b"abc")
    assert (session.audio_frames, session.audio_bytes) == (3, 43)
    assert rig.handler.audio == [b"\x00" * 40, b"", b"abc"]
    assert rig.handler.messages == []
    assert rig.transport.types_sent() == ["hello"]


# --- tool calls --------------------------------------------------------------


@pytest.mark.usefixtures("device_tools")
async def test_call_tool_success(rig: Rig) -> None:
    rig.device.tool_handlers[VOLUME] = lambda args, request_id: Result(
        text_result("true")
    )
    session = await rig.connect()
    result = await session.call_tool(VOLUME, {"volume": 50})
    assert result == ToolResult(is_error=False, text="true")
    assert result.json is True
    request = rig.device.requests[-1]
    assert request["method"] == "tools/call"
    assert request["params"] == {"name": VOLUME, "arguments": {"volume": 50}}


async def test_call_tool_image(rig: Rig) -> None:
    image = json.dumps({"type": "image", "mimeType": "image/jpeg", "data": "/9j/"})
    rig.device.tool_handlers[PHOTO] = lambda args, request_id: Result(
        {"content": [{"type": "image", "image": image}], "isError": False}
    )
    session = await rig.connect()
    result = await session.call_tool(PHOTO, {"question": "what?"})
    assert result.images == (ToolImage(mime_type="image/jpeg", data="/9j/"),)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            Error("Internal error", -32603),
            ToolResult(is_error=True, text="Internal error", code=-32603),
        ),
        (
            Error("Unknown tool: self.x"),
            ToolResult(is_error=True, text="Unknown tool: self.x"),
        ),
        (
            Result(text_result("Volume must be 0-100", is_error=True)),
            ToolResult(is_error=True, text="Volume must be 0-100"),
        ),
    ],
)
async def test_call_tool_error(rig: Rig, reply: Any, expected: ToolResult) -> None:
    rig.device.tool_handlers[VOLUME] = lambda args, request_id: reply
    session = await rig.connect()
    assert await session.call_tool(VOLUME, {"volume": 500}) == expected


async def test_firmware_error_frame_fails_the_call(rig: Rig) -> None:
    session = await rig.connect()
    rig.device.tool_handlers[PHOTO] = lambda args, request_id: Raw(
        firmware_error_frame(session.session_id, request_id, 'bad "x" value')
    )
    result = await session.call_tool(PHOTO, {"question": "x"})
    assert result == ToolResult(is_error=True, text='bad "x" value', code=None)
    assert session.mcp.pending_count == 0
    # A broken error frame for nobody is dropped quietly.
    rig.device.feed(firmware_error_frame(session.session_id, 99, 'a "b"'))
    assert rig.handler.messages == []


async def test_call_tool_timeout(rig: Rig) -> None:
    rig.device.tool_handlers[VOLUME] = lambda args, request_id: SILENT
    session = await rig.connect(call_timeout=0.01)
    with pytest.raises(RequestTimeoutError) as err:
        await session.call_tool(VOLUME, {"volume": 1})
    assert (err.value.method, err.value.timeout) == ("tools/call", 0.01)
    with pytest.raises(RequestTimeoutError) as err:
        await session.call_tool(VOLUME, {"volume": 1}, timeout=0.02)
    assert err.value.timeout == 0.02
    assert session.mcp.pending_count == 0


async def test_calls_answered_out_of_order(rig: Rig) -> None:
    rig.device.tool_handlers[VOLUME] = lambda args, request_id: Result(
        text_result(str(args["volume"]))
    )
    session = await rig.connect()
    rig.device.hold()
    calls = [
        asyncio.create_task(session.call_tool(VOLUME, {"volume": n})) for n in (1, 2)
    ]
    await rig.device.next_request("tools/call")
    await rig.device.next_request("tools/call")
    rig.device.release([1, 0])
    results = await wait(asyncio.gather(*calls))
    assert [result.text for result in results] == ["1", "2"]


async def test_connection_lost_fails_pending_calls_at_once(rig: Rig) -> None:
    rig.device.tool_handlers[VOLUME] = lambda args, request_id: SILENT
    session = await rig.connect(call_timeout=30)
    calls = [
        asyncio.create_task(session.call_tool(VOLUME, {"volume": n})) for n in (1, 2)
    ]
    await rig.device.next_request("tools/call")
    await rig.device.next_request("tools/call")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await session.connection_lost()
    results = await wait(asyncio.gather(*calls, return_exceptions=True))
    assert loop.time() - started < 0.1
    assert [type(result) for result in results] == [ConnectionClosedError] * 2
    assert "connection lost (device_closed)" in str(results[0])
    assert session.closed is True
    assert session.ready is False
    assert session.close_reason is CloseReason.DEVICE_CLOSED
    assert rig.handler.closed_reasons == [CloseReason.DEVICE_CLOSED]
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.DEVICE_CLOSED]


async def test_close_then_connection_lost(rig: Rig) -> None:
    session = await rig.connect()
    await session.close(CloseReason.REPLACED)
    assert rig.transport.close_calls == ["replaced"]
    assert rig.handler.closed_reasons == []
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.REPLACED]
    assert session.close_reason is CloseReason.REPLACED


async def test_close_keeps_the_first_reason(rig: Rig) -> None:
    session = await rig.connect()
    await session.close(CloseReason.SERVER_CLOSED, "entry unloaded " + "x" * 200)
    await session.close(CloseReason.REPLACED)
    assert rig.transport.close_calls[0] == "entry unloaded " + "x" * 200
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.SERVER_CLOSED]


async def test_calls_after_close_fail(rig: Rig) -> None:
    session = await rig.connect()
    await session.close(CloseReason.SERVER_CLOSED)
    with pytest.raises(ConnectionClosedError, match="session closed: server_closed"):
        await session.call_tool(VOLUME, {})
    await session.connection_lost()
    with pytest.raises(ConnectionClosedError, match="session closed"):
        await session.send_alert("Info", "hi")
    with pytest.raises(ConnectionClosedError):
        await session.call_tool(VOLUME, {})


@pytest.mark.parametrize(
    "error", [ConnectionResetError("reset by peer"), RuntimeError("closing")]
)
async def test_socket_errors_become_connection_closed(
    rig: Rig, error: Exception
) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    rig.transport.send_error = error
    with pytest.raises(ConnectionClosedError, match=str(error)) as err:
        await session.send_alert("Info", "hi")
    assert err.value.__cause__ is error
    with pytest.raises(ConnectionClosedError):
        await session.call_tool(VOLUME, {})
    assert session.mcp.pending_count == 0


async def test_failures_say_what_failed_and_why(rig: Rig) -> None:
    """A failure names what was sent, and has a reason when none came with it."""
    rig.device.tools = [STATUS_TOOL, VOLUME_TOOL]
    session = await rig.connect()
    rig.transport.send_error = ConnectionResetError()  # no message at all
    sends = [
        (session.send_tts("start"), "tts"),
        (session.send_audio(b"\x01"), "audio"),
        (session.mcp.request("ping", None, 1), "ping"),
        (session.call_tool(VOLUME, {"volume": 1}), VOLUME),
    ]
    for send, subject in sends:
        with pytest.raises(ConnectionClosedError) as err:
            await send
        assert err.value.subject == subject
        assert str(err.value) == "the connection closed"
    await session.connection_lost()
    for send, subject in [
        (session.send_stt("hi"), "stt"),
        (session.refresh(), "tools/list"),
    ]:
        with pytest.raises(ConnectionClosedError) as err:
            await send
        assert err.value.subject == subject
    assert str(McpError("")) == "no reason given"


async def test_send_alert(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    rig.transport.drain()
    await session.send_alert("Warning", "Door open", "sad")
    await session.send_alert("Info", "Hi")
    assert rig.transport.sent == [
        {
            "session_id": session.session_id,
            "type": "alert",
            "status": "Warning",
            "message": "Door open",
            "emotion": "sad",
        },
        {
            "session_id": session.session_id,
            "type": "alert",
            "status": "Info",
            "message": "Hi",
            "emotion": "neutral",
        },
    ]


# --- status and refresh ------------------------------------------------------


@pytest.mark.usefixtures("device_tools")
async def test_refresh_status(rig: Rig) -> None:
    session = await rig.connect()
    new_status = {"audio_speaker": {"volume": 10}}
    rig.device.status = new_status
    assert await session.refresh_status() == new_status
    assert session.status == new_status
    assert rig.handler.status_log == [new_status]


@pytest.mark.parametrize(
    "reply",
    [
        Result(text_result("volume is 70")),
        Result(text_result("42")),
        Result(text_result('{"audio_speaker":{}}', is_error=True)),
        Error("Unknown tool: self.get_device_status"),
        Result(None),
    ],
)
@pytest.mark.usefixtures("device_tools")
async def test_refresh_status_unusable(rig: Rig, reply: Any) -> None:
    session = await rig.connect()
    rig.device.tool_handlers[STATUS_TOOL_NAME] = lambda args, request_id: reply
    assert await session.refresh_status() is None
    assert session.status == STATUS
    assert rig.handler.status_log == []


@pytest.mark.usefixtures("device_tools")
async def test_refresh(rig: Rig) -> None:
    session = await rig.connect()
    rig.device.tools = [STATUS_TOOL, REBOOT_TOOL]
    rig.device.status = {"battery": {"level": 20}}
    await session.refresh()
    assert rig.handler.tools_calls == [["self.get_device_status", "self.reboot"]]
    assert sorted(session.tools) == ["self.get_device_status", "self.reboot"]
    assert rig.handler.status_log == [{"battery": {"level": 20}}]
    assert rig.device.methods()[-2:] == ["tools/list", "tools/call"]


async def test_refresh_without_status_tool(rig: Rig) -> None:
    rig.device.tools = [VOLUME_TOOL]
    session = await rig.connect()
    rig.device.tools = []
    await session.refresh()
    assert rig.handler.tools_calls == [[]]
    assert session.tools == {}
    assert rig.device.methods() == ["initialize", "tools/list", "tools/list"]
    assert rig.handler.status_log == []


# --- keep-alive --------------------------------------------------------------


@pytest.mark.usefixtures("device_tools")
async def test_keepalive_reports_status(rig: Rig) -> None:
    session = await rig.connect(keepalive_interval=0.01)
    assert await wait(rig.handler.statuses.get()) == STATUS
    rig.device.status = {"audio_speaker": {"volume": 30}}
    while (status := await wait(rig.handler.statuses.get())) == STATUS:
        pass
    assert status == {"audio_speaker": {"volume": 30}}
    assert session.status == status
    assert set(rig.device.methods()[2:]) == {"tools/call"}
    assert {p["params"]["name"] for p in rig.device.requests[2:]} == {STATUS_TOOL_NAME}


async def test_keepalive_pings_without_status_tool(rig: Rig) -> None:
    rig.device.tools = [VOLUME_TOOL]
    session = await rig.connect(keepalive_interval=0.01)
    first = await rig.device.next_request("ping")
    # The device answers "Method not implemented"; the keep-alive goes on.
    second = await rig.device.next_request("ping")
    assert first == {"jsonrpc": "2.0", "id": first["id"], "method": "ping"}
    assert second["id"] > first["id"]
    assert rig.handler.status_log == []
    assert session.ready is True


async def test_keepalive_tolerates_timeouts(rig: Rig) -> None:
    rig.device.handlers["ping"] = lambda params, request_id: SILENT
    session = await rig.connect(HELLO_NO_MCP)
    session.request_timeout = 0.01
    session.set_keepalive(0.01)
    await rig.device.next_request("ping")
    await rig.device.next_request("ping")
    assert session.mcp.pending_count <= 1
    assert rig.transport.close_calls == []


@pytest.mark.usefixtures("device_tools")
async def test_keepalive_status_timeout_is_tolerated(rig: Rig) -> None:
    session = await rig.connect()
    rig.device.tool_handlers[STATUS_TOOL_NAME] = lambda args, request_id: SILENT
    session.request_timeout = 0.01
    session.set_keepalive(0.01)
    await rig.device.next_request("tools/call")
    await rig.device.next_request("tools/call")
    assert rig.handler.status_log == []
    assert session.status == STATUS


async def test_keepalive_ends_when_the_session_closes(rig: Rig) -> None:
    rig.device.handlers["ping"] = lambda params, request_id: SILENT
    session = await rig.connect(HELLO_NO_MCP, keepalive_interval=0.01)
    await rig.device.next_request("ping")
    keepalive = session._keepalive_task
    assert keepalive is not None
    await session.close(CloseReason.SERVER_CLOSED)
    await wait(keepalive)
    assert not keepalive.cancelled()


async def test_set_keepalive(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP, keepalive_interval=0.01)
    await rig.device.next_request("ping")
    keepalive = session._keepalive_task
    assert keepalive is not None
    session.set_keepalive(None)
    assert session._keepalive_task is None
    await asyncio.wait([keepalive])
    assert keepalive.cancelled()
    count = len(rig.device.requests)
    # Five intervals of silence: a stopped keep-alive sends nothing.
    await asyncio.sleep(0.05)
    assert len(rig.device.requests) == count

    session.set_keepalive(0.01)
    assert session._keepalive_task is not None
    await rig.device.next_request("ping")
    # A new interval replaces the running keep-alive.
    running = session._keepalive_task
    session.set_keepalive(30)
    assert session._keepalive_task is not running
    await asyncio.wait([running])
    assert running.cancelled()


async def test_keepalive_waits_for_ready(rig: Rig) -> None:
    session = rig.open()
    session.set_keepalive(0.01)
    assert session._keepalive_task is None
    await rig.handshake(session, HELLO_NO_MCP)
    assert session._keepalive_task is not None
    await rig.device.next_request("ping")


async def test_no_keepalive_after_connection_lost(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    await session.connection_lost()
    session.set_keepalive(0.01)
    assert session._keepalive_task is None
    assert all(task.done() for task in session._tasks)


async def test_frames_after_close_go_nowhere(rig: Rig) -> None:
    """Audio and frames that reach a session after its link ended are dropped."""
    session = await rig.connect(HELLO_NO_MCP)
    await session.connection_lost()
    session.feed_audio(b"\x01\x02")
    session.feed_text('{"type":"listen","state":"start","mode":"auto"}')
    assert rig.handler.audio == []
    assert rig.handler.messages == []
    with pytest.raises(ConnectionClosedError):
        await session.send_audio(b"\x01")
    with pytest.raises(ConnectionClosedError):
        await session.send_tts("start")
