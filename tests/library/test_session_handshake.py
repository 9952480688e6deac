"""A device session from the first frame to ``session_ready``."""

import asyncio
from collections.abc import Callable
import json
import logging
from typing import Any

import pytest

from aioxiaozhi import CloseReason, mcp as mcp_module
from aioxiaozhi.events import event_from_frame
from aioxiaozhi.messages import DEFAULT_AUDIO_PARAMS

from .fakes import (
    HELLO,
    HELLO_NO_MCP,
    REBOOT_TOOL,
    SERVER_INFO,
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
    tool_json,
    wait,
)

PROTOCOL_LOGGER = "aioxiaozhi"


def session_logs(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [
        (record.levelno, record.getMessage())
        for record in caplog.records
        if record.name.startswith(PROTOCOL_LOGGER)
    ]


async def test_hello_timeout_closes_the_socket(rig: Rig) -> None:
    session = rig.open(hello_timeout=0.01)
    session.start()
    await wait(rig.transport.closed.wait())
    assert rig.transport.close_calls == ["no hello"]
    assert session.close_reason is CloseReason.HELLO_TIMEOUT
    assert rig.transport.sent == []
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.HELLO_TIMEOUT]
    assert rig.handler.ready_calls == 0


async def test_connection_lost_before_hello(rig: Rig) -> None:
    session = rig.open()
    session.start()
    await session.connection_lost()
    assert session._life._hello_timer is None  # type: ignore[attr-defined]
    assert session.closed is True
    assert rig.handler.closed_reasons == [CloseReason.DEVICE_CLOSED]
    assert rig.transport.close_calls == []


async def test_frames_before_hello_are_ignored(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=PROTOCOL_LOGGER)
    session = rig.open()
    session.start()
    session.feed_text('{"session_id":"","type":"listen","state":"start"}')
    session.feed_text("{not json")
    session.feed_text('{"type":"abort"}')
    assert rig.handler.messages == []
    assert rig.transport.sent == []
    assert session.hello is None
    levels = [level for level, message in session_logs(caplog)]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "'listen' before hello" in session_logs(caplog)[0][1]

    await rig.handshake(session, HELLO_NO_MCP, start=False)
    session.feed_text('{"session_id":"","type":"listen","state":"start"}')
    assert rig.handler.messages == [
        event_from_frame({"session_id": "", "type": "listen", "state": "start"})
    ]


@pytest.mark.parametrize(
    ("options", "audio_params"),
    [
        ({}, DEFAULT_AUDIO_PARAMS),
        (
            {"audio_params": {"format": "opus", "sample_rate": 16000}},
            {"format": "opus", "sample_rate": 16000},
        ),
    ],
)
async def test_server_hello(
    rig: Rig, options: dict[str, Any], audio_params: dict[str, Any]
) -> None:
    session = await rig.connect(HELLO_NO_MCP, **options)
    assert rig.transport.sent == [
        {
            "type": "hello",
            "transport": "websocket",
            "session_id": session.session_id,
            "audio_params": audio_params,
        }
    ]


async def test_hello_without_start(rig: Rig) -> None:
    session = rig.open()
    session.feed_text(json.dumps(HELLO_NO_MCP))
    await wait(rig.handler.ready.wait())
    assert session.ready is True
    assert session.hello is not None
    assert session.hello.supports_mcp is False


async def test_session_ids_differ(rig: Rig) -> None:
    first = rig.open()
    second = rig.open()
    assert len(first.session_id) == 16
    assert first.session_id != second.session_id


async def test_full_handshake(rig: Rig) -> None:
    rig.device.tools = [STATUS_TOOL, VOLUME_TOOL, REBOOT_TOOL]
    rig.device.status = STATUS
    session = await rig.connect()

    assert rig.device.methods() == ["initialize", "tools/list", "tools/call"]
    initialize, tools_list, status_call = rig.device.requests
    assert initialize == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2024-11-05",
            "capabilities": {
                "vision": {
                    "url": "http://ha.local:8123/api/xiaozhi/vision",
                    "token": session.vision_token,
                }
            },
            "clientInfo": {"name": "home-assistant-xiaozhi", "version": "1"},
        },
    }
    assert tools_list["params"] == {"cursor": "", "withUserTools": True}
    assert tools_list["params"]["withUserTools"] is True
    assert status_call["params"] == {"name": STATUS_TOOL_NAME, "arguments": {}}
    assert [payload["id"] for payload in rig.device.requests] == [1, 2, 3]

    assert rig.transport.types_sent() == ["hello", "mcp", "mcp", "mcp"]
    assert {frame.get("session_id") for frame in rig.transport.sent} == {
        session.session_id
    }
    assert rig.handler.ready_calls == 1
    assert rig.handler.ready_snapshot == {
        "ready": True,
        "tools": [
            "self.audio_speaker.set_volume",
            "self.get_device_status",
            "self.reboot",
        ],
        "status": STATUS,
        "server_info": SERVER_INFO,
    }
    assert session.tools["self.reboot"].user_only is True
    assert session.tools["self.audio_speaker.set_volume"].user_only is False
    # The first status belongs to session_ready, not to session_status.
    assert rig.handler.status_log == []
    assert session.mcp.pending_count == 0


@pytest.mark.parametrize(
    "result",
    [
        {"protocolVersion": "2024-11-05"},
        {"serverInfo": "board"},
        "not an object",
        None,
    ],
)
async def test_initialize_without_server_info(rig: Rig, result: Any) -> None:
    rig.device.handlers["initialize"] = lambda params, request_id: Result(result)
    session = await rig.connect()
    assert session.server_info == {}
    assert session.ready is True


async def test_tools_are_listed_page_by_page(rig: Rig) -> None:
    rig.device.tools = [tool_json(f"t{n}") for n in range(5)]
    rig.device.page_size = 2
    session = await rig.connect()
    cursors = [
        payload["params"]["cursor"]
        for payload in rig.device.requests
        if payload["method"] == "tools/list"
    ]
    assert cursors == ["", "t2", "t4"]
    assert all(
        payload["params"]["withUserTools"] is True
        for payload in rig.device.requests
        if payload["method"] == "tools/list"
    )
    assert sorted(session.tools) == ["t0", "t1", "t2", "t3", "t4"]
    assert rig.device.methods() == ["initialize"] + ["tools/list"] * 3
    assert session.status is None


@pytest.mark.parametrize("extra", [{}, {"nextCursor": ""}, {"nextCursor": 5}])
async def test_last_page(rig: Rig, extra: dict[str, Any]) -> None:
    rig.device.handlers["tools/list"] = lambda params, request_id: Result(
        {"tools": [VOLUME_TOOL], **extra}
    )
    session = await rig.connect()
    assert rig.device.methods() == ["initialize", "tools/list"]
    assert list(session.tools) == ["self.audio_speaker.set_volume"]


async def test_repeated_cursor_stops_listing(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    def page(params: dict[str, Any], request_id: int) -> Result:
        return Result(
            {"tools": [tool_json(f"tool{request_id}")], "nextCursor": "again"}
        )

    rig.device.handlers["tools/list"] = page
    session = await rig.connect()
    cursors = [p["params"]["cursor"] for p in rig.device.requests[1:]]
    assert cursors == ["", "again"]
    assert sorted(session.tools) == ["tool2", "tool3"]
    assert (
        logging.WARNING,
        "Device repeated tools/list cursor 'again'",
    ) in session_logs(caplog)


async def test_tool_pages_are_limited(
    rig: Rig, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_module, "MAX_TOOL_PAGES", 3)

    def page(params: dict[str, Any], request_id: int) -> Result:
        return Result(
            {"tools": [tool_json(f"tool{request_id}")], "nextCursor": f"c{request_id}"}
        )

    rig.device.handlers["tools/list"] = page
    session = await rig.connect()
    assert rig.device.methods() == ["initialize"] + ["tools/list"] * 3
    assert sorted(session.tools) == ["tool2", "tool3", "tool4"]
    assert (
        logging.WARNING,
        "Device tools/list exceeded 3 pages",
    ) in session_logs(caplog)


@pytest.mark.parametrize(
    ("page", "names"),
    [
        (
            {"tools": [VOLUME_TOOL, {"name": ""}, "self.reboot", {"description": 1}]},
            ["self.audio_speaker.set_volume"],
        ),
        ({"tools": {"self.reboot": REBOOT_TOOL}}, []),
        ({}, []),
    ],
)
async def test_malformed_tools_are_skipped(
    rig: Rig, page: dict[str, Any], names: list[str]
) -> None:
    rig.device.handlers["tools/list"] = lambda params, request_id: Result(page)
    session = await rig.connect()
    assert list(session.tools) == names
    assert session.ready is True


async def test_device_without_mcp(rig: Rig) -> None:
    rig.device.tools = [STATUS_TOOL]
    rig.device.status = STATUS
    session = await rig.connect({**HELLO, "features": {"mcp": False, "aec": True}})
    assert session.tools == {}
    assert session.status is None
    assert session.server_info == {}
    assert rig.transport.types_sent() == ["hello"]
    assert rig.device.requests == []
    assert rig.handler.ready_snapshot["ready"] is True


@pytest.mark.parametrize(
    "reply",
    [
        lambda request_id: Result(text_result("not json")),
        lambda request_id: Result(text_result("[1, 2]")),
        lambda request_id: Result(text_result(json.dumps(STATUS), is_error=True)),
        lambda request_id: Error("Unknown tool: self.get_device_status", -32601),
        lambda request_id: Raw(firmware_error_frame("s", request_id, 'bad "x"')),
        lambda request_id: SILENT,
    ],
    ids=["text", "list", "is_error", "error", "firmware_error", "timeout"],
)
async def test_unusable_status_does_not_fail_the_handshake(
    rig: Rig, reply: Callable[[int], Any]
) -> None:
    rig.device.tools = [STATUS_TOOL]
    rig.device.tool_handlers[STATUS_TOOL_NAME] = lambda args, request_id: reply(
        request_id
    )
    session = await rig.connect(request_timeout=0.05)
    assert rig.device.methods() == ["initialize", "tools/list", "tools/call"]
    assert session.status is None
    assert rig.handler.ready_snapshot["status"] is None
    assert rig.transport.close_calls == []
    assert session.mcp.pending_count == 0


@pytest.mark.parametrize(
    ("method", "reply", "options"),
    [
        ("initialize", Error("Method not implemented: initialize"), {}),
        ("initialize", Error("Internal error", -32603), {}),
        ("initialize", SILENT, {"request_timeout": 0.01}),
        ("tools/list", Result(["not", "an", "object"]), {}),
        ("tools/list", Error("Tool too large"), {}),
    ],
)
async def test_handshake_failure_closes_the_socket(
    rig: Rig,
    caplog: pytest.LogCaptureFixture,
    method: str,
    reply: Any,
    options: dict[str, Any],
) -> None:
    rig.device.handlers[method] = lambda params, request_id: reply
    session = rig.open(**options)
    session.start()
    session.feed_text(json.dumps(HELLO))
    await wait(rig.transport.closed.wait())
    assert rig.transport.close_calls == ["handshake failed"]
    assert session.close_reason is CloseReason.HANDSHAKE_FAILED
    assert session.ready is False
    assert rig.handler.ready_calls == 0
    assert any(
        level == logging.WARNING and message.startswith("Device handshake failed")
        for level, message in session_logs(caplog)
    )
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.HANDSHAKE_FAILED]


async def test_close_during_handshake(rig: Rig) -> None:
    rig.device.handlers["initialize"] = lambda params, request_id: SILENT
    session = rig.open()
    session.start()
    session.feed_text(json.dumps(HELLO))
    await rig.device.next_request("initialize")
    (handshake,) = session._tasks
    await session.close(CloseReason.REPLACED)
    # The handshake sees the closed link and ends on its own.
    await wait(handshake)
    assert not handshake.cancelled()
    assert rig.handler.ready_calls == 0
    assert rig.transport.close_calls == ["replaced"]
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.REPLACED]


async def test_socket_failure_during_handshake(rig: Rig) -> None:
    rig.transport.send_error = ConnectionResetError("reset by peer")
    session = rig.open()
    session.start()
    session.feed_text(json.dumps(HELLO))
    (handshake,) = session._tasks
    await wait(handshake)
    assert handshake.exception() is None
    assert session.ready is False
    assert rig.handler.ready_calls == 0
    assert rig.transport.close_calls == []
    await session.connection_lost()
    assert rig.handler.closed_reasons == [CloseReason.DEVICE_CLOSED]


async def test_connection_lost_during_handshake(rig: Rig) -> None:
    rig.device.handlers["initialize"] = lambda params, request_id: SILENT
    session = rig.open()
    session.start()
    session.feed_text(json.dumps(HELLO))
    await rig.device.next_request("initialize")
    (handshake,) = session._tasks
    await session.connection_lost()
    assert handshake.done()
    assert rig.handler.ready_calls == 0
    assert rig.handler.closed_reasons == [CloseReason.DEVICE_CLOSED]


async def test_second_hello_is_ignored(rig: Rig) -> None:
    session = await rig.connect(HELLO_NO_MCP)
    rig.transport.drain()
    tasks = set(session._tasks)
    session.feed_text(json.dumps(HELLO))
    assert session._tasks == tasks
    await asyncio.sleep(0)
    assert rig.transport.sent == []
    assert rig.handler.messages == []
    assert rig.handler.ready_calls == 1
    assert session.hello is not None
    assert session.hello.supports_mcp is False


async def test_start_twice_keeps_one_timer(rig: Rig) -> None:
    session = rig.open(hello_timeout=0.01)
    session.start()
    session.start()
    await wait(rig.transport.closed.wait())
    await session.connection_lost()
    assert rig.transport.close_calls == ["no hello"]
    assert session.close_reason is CloseReason.HELLO_TIMEOUT


async def test_close_before_hello_and_late_hello(rig: Rig) -> None:
    """Closing cancels the hello timer; a hello after the close is ignored."""
    session = rig.open(hello_timeout=0.01)
    session.start()
    await session.close(CloseReason.SERVER_CLOSED)
    assert session._life._hello_timer is None  # type: ignore[attr-defined]
    session.feed_text(json.dumps(HELLO))
    assert session.hello is None
    assert session.close_reason is CloseReason.SERVER_CLOSED
    assert len(rig.transport.close_calls) == 1
    await session.connection_lost()
    session.start()
    assert rig.transport.sent == []
