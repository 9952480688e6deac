"""The device's MCP server, rule by rule."""

import itertools
import json
from typing import Any

import pytest

from aioxiaozhi.testing import (
    ImageResult,
    PropertySpec,
    SimulatedDevice,
    ToolError,
    ToolSpec,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
    tool_from_dict,
)

from .conftest import WAIT, Conn, DeviceFactory, FakeServer

AI_TOOLS = [
    "self.get_device_status",
    "self.audio_speaker.set_volume",
    "self.screen.set_brightness",
    "self.screen.set_theme",
]
USER_TOOLS = [
    "self.get_system_info",
    "self.reboot",
    "self.upgrade_firmware",
    "self.screen.get_info",
    "self.screen.snapshot",
    "self.screen.preview_image",
    "self.assets.set_download_url",
]


def compact(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def names(reply: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in reply["result"]["tools"]]


def text_of(reply: dict[str, Any]) -> str:
    assert reply["result"]["isError"] is False
    return reply["result"]["content"][0]["text"]


def error_of(reply: dict[str, Any]) -> str:
    assert "code" not in reply["error"]
    return reply["error"]["message"]


async def connect(
    server: FakeServer, make_device: DeviceFactory, **kwargs: Any
) -> tuple[SimulatedDevice, Conn]:
    index = len(server.conns)
    device = make_device(**kwargs)
    await device.connect()
    return device, await server.conn(index)


async def test_initialize_reply_is_byte_exact(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    _device, conn = connected
    await conn.send_mcp(
        {"jsonrpc": "2.0", "method": "initialize", "id": 1, "params": {}}
    )
    await conn.reply(1)
    assert conn.texts[-1] == (
        '{"session_id":"sess-1","type":"mcp","payload":{"jsonrpc":"2.0","id":1,'
        '"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},'
        '"serverInfo":{"name":"xiaozhi-sim","version":"2.0.4"}}}}'
    )


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"capabilities": []},
        {"capabilities": {"vision": "x"}},
        {"capabilities": {"vision": {"url": 5}}},
    ],
)
async def test_initialize_without_usable_vision(
    server: FakeServer, make_device: DeviceFactory, params: dict[str, Any] | None
) -> None:
    device, conn = await connect(server, make_device, camera=True)
    reply = await conn.request("initialize", params)
    assert reply["result"]["serverInfo"]["name"] == "xiaozhi-sim"
    assert device.vision_url is None


async def test_initialize_stores_vision_only_with_camera(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    vision = {"capabilities": {"vision": {"url": "http://h/v", "token": "t"}}}
    device, conn = await connect(server, make_device, camera=True)
    await conn.request("initialize", vision)
    assert (device.vision_url, device.vision_token) == ("http://h/v", "t")
    await conn.request("initialize", {"capabilities": {"vision": {"url": "u"}}})
    assert (device.vision_url, device.vision_token) == ("u", "")

    plain, conn2 = await connect(server, make_device, mac="aa:bb:cc:dd:ee:02")
    await conn2.request("initialize", vision)
    assert plain.vision_url is None


@pytest.mark.parametrize(
    "payload",
    [
        {"jsonrpc": "2.0", "method": "initialize", "id": "1"},
        {"jsonrpc": "2.0", "method": "initialize"},
        {"jsonrpc": "2.0", "method": "initialize", "id": True},
        {"jsonrpc": "2.0", "method": "initialize", "id": None},
        {"jsonrpc": "1.0", "method": "initialize", "id": 1},
        {"jsonrpc": 2.0, "method": "initialize", "id": 1},
        {"method": "initialize", "id": 1},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "method": 5, "id": 1},
        {"jsonrpc": "2.0", "method": "initialize", "id": 1, "params": []},
        {"jsonrpc": "2.0", "method": "initialize", "id": 1, "params": "x"},
        {"jsonrpc": "2.0", "method": "tools/list", "id": 1, "params": None},
        {"jsonrpc": "2.0", "method": "notifications/initialized", "id": 1},
        {"jsonrpc": "2.0", "method": "notificationsX", "id": 1},
        {"jsonrpc": "2.0", "method": "notifications/cancelled"},
        {"jsonrpc": "2.0", "method": "ping", "id": "abc"},
    ],
)
async def test_invalid_requests_get_no_reply(
    connected: tuple[SimulatedDevice, Conn], payload: dict[str, Any]
) -> None:
    device, conn = connected
    await conn.send_mcp(payload)
    # The device handles frames in order: the reply to the next request
    # proves the first one was dropped rather than slow.
    await conn.request("initialize", {}, request_id=2)
    mcp = [f for f in conn.frames if f.get("type") == "mcp"]
    assert len(mcp) == 1
    assert device.mcp_requests[-1]["id"] == 2


async def test_non_object_payloads_are_ignored(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    _device, conn = connected
    await conn.send('{"session_id":"s","type":"mcp","payload":[1]}')
    await conn.send('{"session_id":"s","type":"mcp"}')
    await conn.request("initialize", {}, request_id=2)
    assert len([f for f in conn.frames if f.get("type") == "mcp"]) == 1


async def test_float_id_is_truncated(connected: tuple[SimulatedDevice, Conn]) -> None:
    _device, conn = connected
    await conn.send_mcp({"jsonrpc": "2.0", "method": "initialize", "id": 7.9})
    reply = await conn.reply(7)
    assert "result" in reply
    await conn.send_mcp({"jsonrpc": "2.0", "method": "initialize", "id": 1e12})
    assert "result" in await conn.reply(2**31 - 1)


@pytest.mark.parametrize("method", ["ping", "resources/list", "tools/get"])
async def test_unknown_methods(
    connected: tuple[SimulatedDevice, Conn], method: str
) -> None:
    _device, conn = connected
    reply = await conn.request(method)
    assert error_of(reply) == f"Method not implemented: {method}"


async def test_tool_listing_order_and_shape(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    board = [rgb_light_tool(), no_arg_tool(), ToolSpec(name="take_photo")]
    _device, conn = await connect(
        server, make_device, camera=True, extra_tools=board, battery=True
    )
    reply = await conn.request("tools/list", {"cursor": "", "withUserTools": True})
    assert names(reply) == [
        *AI_TOOLS,
        "self.camera.take_photo",
        "self.light.set_rgb",
        "self.dog.forward",
        "take_photo",
        *USER_TOOLS,
    ]
    assert "nextCursor" not in reply["result"]
    tools = {tool["name"]: tool for tool in reply["result"]["tools"]}
    assert tools["self.light.set_rgb"]["inputSchema"] == {
        "type": "object",
        "properties": {
            channel: {"type": "integer", "minimum": 0, "maximum": 255}
            for channel in "rgb"
        },
        "required": ["r", "g", "b"],
    }
    assert tools["self.dog.forward"]["inputSchema"] == {
        "type": "object",
        "properties": {},
    }
    assert tools["self.screen.snapshot"] == {
        "name": "self.screen.snapshot",
        "description": tools["self.screen.snapshot"]["description"],
        "inputSchema": {
            "type": "object",
            "properties": {
                "url": {"type": "string"},
                "quality": {
                    "type": "integer",
                    "default": 80,
                    "minimum": 1,
                    "maximum": 100,
                },
            },
            "required": ["url"],
        },
        "annotations": {"audience": ["user"]},
    }
    upgrade = tools["self.upgrade_firmware"]["inputSchema"]
    assert "required" not in upgrade
    assert upgrade["properties"]["url"]["default"]
    for name in AI_TOOLS:
        assert "annotations" not in tools[name]


@pytest.mark.parametrize(
    ("params", "with_user"),
    [
        ({"withUserTools": True}, True),
        ({"withUserTools": False}, False),
        ({"withUserTools": "true"}, False),
        ({"withUserTools": 1}, False),
        ({}, False),
        (None, False),
        ({"cursor": 5, "withUserTools": True}, True),
    ],
)
async def test_with_user_tools_must_be_a_boolean(
    connected: tuple[SimulatedDevice, Conn],
    params: dict[str, Any] | None,
    with_user: bool,
) -> None:
    _device, conn = connected
    reply = await conn.request("tools/list", params)
    assert names(reply) == AI_TOOLS + (USER_TOOLS if with_user else [])


async def test_feature_flags_shape_the_tool_list(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(
        server, make_device, screen=False, user_tools=False, assets=False
    )
    reply = await conn.request("tools/list", {"withUserTools": True})
    assert names(reply) == AI_TOOLS[:2]
    _device, conn = await connect(
        server,
        make_device,
        screen=False,
        assets=False,
        mac="aa:bb:cc:dd:ee:02",
        extra_tools=[ToolSpec(name="self.get_device_status", description="dup")],
    )
    reply = await conn.request("tools/list", {"withUserTools": True})
    assert names(reply) == AI_TOOLS[:2] + USER_TOOLS[:3]
    assert reply["result"]["tools"][0]["description"] != "dup"


async def test_pagination_over_many_tools(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    bulk = many_tools(40)
    _device, conn = await connect(server, make_device, extra_tools=bulk)
    pages: list[dict[str, Any]] = []
    cursor = ""
    while True:
        reply = await conn.request(
            "tools/list", {"cursor": cursor, "withUserTools": True}
        )
        result = reply["result"]
        pages.append(result)
        # the firmware keeps '{"tools":[' + tools + ',' + 30 bytes under 8000
        assert compact({"tools": result["tools"]}) - 1 + 30 <= 8000
        if "nextCursor" not in result:
            break
        cursor = result["nextCursor"]
        assert isinstance(cursor, str)
        assert cursor
    assert len(pages) >= 3
    listed = [tool["name"] for page in pages for tool in page["tools"]]
    assert listed == [*AI_TOOLS, *(tool.name for tool in bulk), *USER_TOOLS]
    for page, following in itertools.pairwise(pages):
        assert page["nextCursor"] == following["tools"][0]["name"]
        # the page is full: the next tool would not have fitted
        grown = [*page["tools"], following["tools"][0]]
        assert compact({"tools": grown}) - 1 + 30 > 8000


async def test_pagination_skips_hidden_user_tools(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(server, make_device, page_size_bytes=1200)
    cursor = ""
    listed: list[str] = []
    while True:
        reply = await conn.request("tools/list", {"cursor": cursor})
        listed += names(reply)
        if "nextCursor" not in reply["result"]:
            break
        cursor = reply["result"]["nextCursor"]
    assert listed == AI_TOOLS


async def test_unknown_cursor_gives_an_empty_page(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    _device, conn = connected
    reply = await conn.request("tools/list", {"cursor": "self.nope"})
    assert reply["result"] == {"tools": []}


async def test_unknown_cursor_error_variant(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(server, make_device, unknown_cursor="error")
    reply = await conn.request("tools/list", {"cursor": "self.nope"})
    assert error_of(reply) == "Failed to add tool  because of payload size limit"


async def test_cursor_on_a_hidden_tool_yields_the_firmware_error(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    _device, conn = await connect(server, make_device)
    reply = await conn.request("tools/list", {"cursor": "self.get_system_info"})
    assert error_of(reply) == "Failed to add tool  because of payload size limit"
    reply = await conn.request(
        "tools/list", {"cursor": "self.get_system_info", "withUserTools": True}
    )
    assert names(reply) == USER_TOOLS


async def test_tool_too_large_for_a_page(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    huge = ToolSpec(name="self.huge", description="x" * 9000)
    _device, conn = await connect(server, make_device, extra_tools=[huge])
    first = await conn.request("tools/list", {})
    assert names(first) == AI_TOOLS
    assert first["result"]["nextCursor"] == "self.huge"
    reply = await conn.request("tools/list", {"cursor": "self.huge"})
    assert error_of(reply) == (
        "Failed to add tool self.huge because of payload size limit"
    )


async def test_empty_tool_list(server: FakeServer, make_device: DeviceFactory) -> None:
    device, conn = await connect(server, make_device)
    device.tools = []
    reply = await conn.request("tools/list", {"cursor": "anything"})
    assert reply["result"] == {"tools": []}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (None, "Missing params"),
        ({}, "Missing name"),
        ({"name": 5}, "Missing name"),
        ({"name": "self.dog.forward", "arguments": []}, "Invalid arguments"),
        ({"name": "self.dog.forward", "arguments": None}, "Invalid arguments"),
        ({"name": "self.dog.forward", "arguments": "x"}, "Invalid arguments"),
        ({"name": "self.nope"}, "Unknown tool: self.nope"),
        ({"name": "self.light.set_rgb"}, "Missing valid argument: r"),
        (
            {"name": "self.light.set_rgb", "arguments": {"r": 1, "g": 2}},
            "Missing valid argument: b",
        ),
        (
            {"name": "self.light.set_rgb", "arguments": {"r": "1", "g": 2, "b": 3}},
            "Missing valid argument: r",
        ),
        (
            {"name": "self.light.set_rgb", "arguments": {"r": True, "g": 2, "b": 3}},
            "Missing valid argument: r",
        ),
        (
            {"name": "self.light.set_rgb", "arguments": {"r": 256, "g": 2, "b": 3}},
            "Property 'r': value 256 exceeds maximum 255",
        ),
        (
            {"name": "self.light.set_rgb", "arguments": {"r": 1, "g": -1, "b": 300}},
            "Property 'g': value -1 is below minimum 0",
        ),
        (
            {"name": "self.led.set_enabled", "arguments": {"enabled": "true"}},
            "Missing valid argument: enabled",
        ),
        (
            {"name": "self.led.set_enabled", "arguments": {"enabled": 1}},
            "Missing valid argument: enabled",
        ),
        (
            {"name": "self.screen.set_theme", "arguments": {"theme": None}},
            "Missing valid argument: theme",
        ),
    ],
)
async def test_call_errors(
    server: FakeServer,
    make_device: DeviceFactory,
    params: dict[str, Any] | None,
    message: str,
) -> None:
    device, conn = await connect(
        server, make_device, extra_tools=[rgb_light_tool(), no_arg_tool(), bool_tool()]
    )
    reply = await conn.request("tools/call", params)
    assert error_of(reply) == message
    assert device.calls == []


async def test_arguments_are_resolved_like_the_firmware(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(
        server, make_device, extra_tools=[rgb_light_tool(), bool_tool()]
    )
    reply = await conn.call("self.light.set_rgb", {"r": 10.9, "g": 0, "b": 255})
    assert text_of(reply) == "true"
    assert device.calls[-1].arguments == {"r": 10, "g": 0, "b": 255}
    await conn.call("self.led.set_enabled", {"enabled": False, "extra": 1})
    assert device.calls[-1].arguments == {"enabled": False}
    await conn.call("self.upgrade_firmware", {"url": 5})
    assert device.upgrade_urls[-1].startswith("URL of the firmware")
    call = await device.wait_for_call("self.upgrade_firmware", since=2)
    assert call.arguments["url"].startswith("URL of the firmware")
    # The firmware closes its link to download; what is not a URL fails.
    await device.wait_for(lambda: len(device.upgrades) == 1)
    assert device.upgrades[0][0] is None
    assert device.config.firmware == "2.0.4"


async def test_user_only_tools_are_callable_without_listing(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    _device, conn = connected
    info = json.loads(text_of(await conn.call("self.get_system_info")))
    assert info["mac_address"] == "aa:bb:cc:dd:ee:01"


async def test_results_are_strings(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    tools = [
        tool_from_dict({"name": "t.int", "result": 42}),
        tool_from_dict({"name": "t.false", "result": False}),
        tool_from_dict({"name": "t.obj", "result": {"a": [1, "é"]}}),
        tool_from_dict({"name": "t.str", "result": "plain"}),
        ToolSpec(
            name="t.image",
            handler=lambda device, args: ImageResult(data=b"\xff\xd8\xff\xd9"),
        ),
        ToolSpec(name="t.sync", handler=lambda device, args: 7),
    ]
    _device, conn = await connect(server, make_device, extra_tools=tools)
    assert text_of(await conn.call("t.int")) == "42"
    assert text_of(await conn.call("t.false")) == "false"
    assert text_of(await conn.call("t.obj")) == '{"a":[1,"é"]}'
    assert text_of(await conn.call("t.str")) == "plain"
    assert text_of(await conn.call("t.sync")) == "7"
    image = await conn.call("t.image")
    content = image["result"]["content"][0]
    assert content["type"] == "image"
    assert json.loads(content["image"]) == {
        "type": "image",
        "mimeType": "image/jpeg",
        "data": "/9j/2Q==",
    }
    status = json.loads(text_of(await conn.call("self.get_device_status")))
    assert status["audio_speaker"] == {"volume": 70}


async def test_error_messages_are_not_escaped(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    failing = tool_from_dict({"name": "t.fail", "error": 'bad "thing"'})
    _device, conn = await connect(server, make_device, extra_tools=[failing])
    await conn.send_mcp(
        {"jsonrpc": "2.0", "method": "tools/call", "id": 5, "params": {"name": 'a"b'}}
    )
    expected = (
        '{"session_id":"sess-1","type":"mcp","payload":{"jsonrpc":"2.0","id":5,'
        '"error":{"message":"Unknown tool: a"b"}}}'
    )
    assert await conn.text(lambda t: t == expected)
    await conn.send_mcp(
        {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 6,
            "params": {"name": "t.fail"},
        }
    )
    text = await conn.text(lambda t: '"id":6' in t)
    assert text.endswith('"error":{"message":"bad "thing""}}}')
    with pytest.raises(ValueError, match="Expecting"):
        json.loads(text)


async def test_handler_exceptions_become_errors(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    def broken(device: SimulatedDevice, args: dict[str, Any]) -> str:
        raise KeyError("oops")

    async def failing(device: SimulatedDevice, args: dict[str, Any]) -> str:
        raise ToolError("Failed to capture photo")

    tools = [
        ToolSpec(name="t.broken", handler=broken),
        ToolSpec(name="t.fail", handler=failing),
    ]
    _device, conn = await connect(server, make_device, extra_tools=tools)
    assert error_of(await conn.call("t.broken")) == "KeyError('oops')"
    assert error_of(await conn.call("t.fail")) == "Failed to capture photo"


async def test_other_implementation_errors(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    failing = tool_from_dict({"name": "t.fail", "error": "it broke"})
    _device, conn = await connect(
        server,
        make_device,
        other_implementation=True,
        extra_tools=[failing, rgb_light_tool()],
    )
    unknown = await conn.call("self.nope")
    assert unknown["error"] == {"code": -32601, "message": "Unknown tool: self.nope"}
    method = await conn.request("ping")
    assert method["error"] == {
        "code": -32601,
        "message": "Method not implemented: ping",
    }
    missing = await conn.call("self.light.set_rgb", {})
    assert missing["error"] == {"code": -32603, "message": "Missing valid argument: r"}
    failed = await conn.call("t.fail")
    assert failed["result"] == {
        "content": [{"type": "text", "text": "it broke"}],
        "isError": True,
    }
    quoted = await conn.call('a"b')
    assert quoted["error"]["message"] == 'Unknown tool: a"b'


async def test_replies_can_come_out_of_order(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(
        server,
        make_device,
        extra_tools=[no_arg_tool()],
        tool_delays={"self.dog.forward": 0.2},
    )
    await conn.send_mcp(
        {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 1,
            "params": {"name": "self.dog.forward"},
        }
    )
    await conn.send_mcp(
        {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 2,
            "params": {"name": "self.get_device_status"},
        }
    )
    await conn.reply(1)
    ids = [f["payload"]["id"] for f in conn.frames if f.get("type") == "mcp"]
    assert ids == [2, 1]
    assert [call.name for call in device.calls] == [
        "self.get_device_status",
        "self.dog.forward",
    ]


async def test_pending_calls_are_cancelled_when_the_link_ends(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(
        server,
        make_device,
        extra_tools=[no_arg_tool()],
        tool_delays={"self.dog.forward": 30},
    )
    await conn.send_mcp(
        {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 1,
            "params": {"name": "self.dog.forward"},
        }
    )
    await device.wait_for(lambda: bool(device._call_tasks))
    await device.disconnect()
    await device.wait_for(lambda: not device._call_tasks)
    assert device.calls == []


async def test_fault_silent(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    device.faults.silent = True
    await conn.send_mcp({"jsonrpc": "2.0", "method": "initialize", "id": 1})
    await device.wait_for_frame(
        lambda f: f.get("type") == "mcp" and f["payload"].get("id") == 1
    )
    device.faults.silent = False
    await conn.request("initialize", {}, request_id=2)
    assert conn.replies(1) == []
    # ignored requests are still recorded
    assert [r["id"] for r in device.mcp_requests] == [1, 2]


async def test_fault_silent_methods(connected: tuple[SimulatedDevice, Conn]) -> None:
    device, conn = connected
    device.faults.silent_methods = {"tools/list"}
    await conn.send_mcp({"jsonrpc": "2.0", "method": "tools/list", "id": 1})
    await conn.request("initialize", {}, request_id=2)
    assert conn.replies(1) == []


async def test_fault_drop_on_call(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device, conn = await connect(server, make_device, reconnect_delay=0.01)
    device.faults.drop_on_call = {"self.get_device_status"}
    await conn.send_mcp(
        {
            "jsonrpc": "2.0",
            "method": "tools/call",
            "id": 1,
            "params": {"name": "self.get_device_status"},
        }
    )
    await device.wait_for(lambda: device.close_reasons == ["dropped"])
    await conn.wait_closed()
    assert conn.ws.close_code is None  # no close frame was exchanged
    assert conn.replies(1) == []
    assert device.calls == []
    # a dropped link counts as lost: the device comes back
    await device.wait_for(lambda: device.connect_count == 2)


async def test_fault_duplicates_and_id_offset(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, conn = connected
    device.faults.duplicate_replies = True
    await conn.request("initialize", {}, request_id=1)
    await conn.until(lambda: len(conn.replies(1)) == 2)
    device.faults.duplicate_replies = False
    device.faults.reply_id_offset = 1000
    await conn.send_mcp({"jsonrpc": "2.0", "method": "initialize", "id": 2})
    assert "result" in await conn.reply(1002)


async def test_fault_invalid_error_json(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    for index, other in enumerate((False, True)):
        device, conn = await connect(
            server,
            make_device,
            other_implementation=other,
            mac=f"aa:bb:cc:dd:ee:0{index + 1}",
        )
        device.faults.invalid_error_json = True
        await conn.send_mcp({"jsonrpc": "2.0", "method": "ping", "id": 1})
        text = await conn.text(lambda t: '"id":1' in t)
        with pytest.raises(ValueError, match=r"Expecting|Extra data"):
            json.loads(text)


async def test_tools_replaced_at_runtime(
    connected: tuple[SimulatedDevice, Conn],
) -> None:
    device, conn = connected
    device.tools = [
        *device.tools,
        ToolSpec(
            name="self.new",
            properties=[PropertySpec(name="n", type="integer", default=3)],
        ),
    ]
    assert text_of(await conn.call("self.new")) == "true"
    assert device.calls[-1].arguments == {"n": 3}
    await device.wait_for_call("self.new", timeout=WAIT)
