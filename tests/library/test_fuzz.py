"""Property-based fuzzing: every parser, the MCP client and a live session.

Whatever a device sends, nothing raises past the protocol layer, no reply is
taken for the wrong request, and a session that swallowed garbage still
answers the next well-formed tool call. The profiles live in conftest.py:
``--hypothesis-profile=long`` runs 10 000 examples per property.
"""

import asyncio
from collections.abc import Coroutine, Iterator
import json
import logging
import math
from typing import Any

from hypothesis import event, example, given, strategies as st
import orjson
import pytest

from aioxiaozhi import (
    ArgumentError,
    ConnectionClosedError,
    DeviceEventType,
    DeviceHello,
    McpClient,
    McpError,
    ProtocolError,
    Tool,
    ToolResult,
    pack_audio,
    unpack_audio,
    validate_arguments,
)
from aioxiaozhi.messages import (
    MAX_DEPTH,
    MAX_TEXT_FRAME,
    dumps,
    mcp_frame,
    parse_frame,
    recover_error_reply,
)
from aioxiaozhi.tools import ToolImage, ToolProperty
from tests.library.fakes import (
    HELLO,
    SILENT,
    STATUS,
    STATUS_TOOL,
    VOLUME_TOOL,
    Result,
    Rig,
    firmware_error_frame,
    text_result,
    tool_json,
    wait,
)

pytestmark = pytest.mark.slow

VOLUME = "self.audio_speaker.set_volume"
SILENT_TOOL = "self.never.answers"
REASONS = {
    "missing_argument",
    "unknown_argument",
    "invalid_type",
    "out_of_range",
    "invalid_choice",
}


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations() -> None:
    """Override the package-wide fixture: these properties need no Home Assistant."""


class _FormatOnly(logging.Handler):
    """Format every record (a formatting error raises here) and keep none."""

    def emit(self, record: logging.LogRecord) -> None:
        record.getMessage()


@pytest.fixture(autouse=True, scope="module")
def format_every_log_record() -> Iterator[None]:
    """Run every log call of the integration, at every level, without storing it.

    Megabyte frames end up in log arguments; captured records would keep
    hundreds of them alive.
    """
    logger = logging.getLogger("aioxiaozhi")
    level, propagate = logger.level, logger.propagate
    handler = _FormatOnly()
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    yield
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def run[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run one example in its own event loop."""
    return asyncio.run(coro)


def assert_home_assistant_can_encode(value: Any) -> None:
    """Device data still encodes once nested in events, states or storage.

    Home Assistant's JSON encoder (orjson) stops at 255 levels; its own
    structures around device data take a few, 128 is a wide margin.
    """
    wrapped = value
    for _ in range(128):
        wrapped = [wrapped]
    orjson.dumps(wrapped)


# --- strategies --------------------------------------------------------------

KNOWN_KEYS = (
    "type",
    "session_id",
    "payload",
    "jsonrpc",
    "id",
    "method",
    "params",
    "result",
    "error",
    "message",
    "code",
    "content",
    "text",
    "isError",
    "image",
    "data",
    "mimeType",
    "tools",
    "nextCursor",
    "name",
    "description",
    "inputSchema",
    "properties",
    "required",
    "annotations",
    "audience",
    "version",
    "features",
    "mcp",
    "transport",
    "audio_params",
    "state",
    "mode",
    "reason",
    "serverInfo",
)

keys = st.sampled_from(KNOWN_KEYS) | st.text(max_size=8)
# What orjson can decode: integers beyond 64 bits become floats, no NaN.
json_ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
json_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | json_ints | json_floats | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=25,
)
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
# Text frames that are not UTF-8 reach Python as lone surrogates.
hostile_text = st.text(max_size=60) | st.lists(
    st.text(max_size=10) | surrogates, max_size=6
).map("".join)


def deep_list(depth: int) -> Any:
    """Return ``depth`` nested lists around a 1."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def deep_text(depth: int, kind: str) -> str:
    """Return JSON text nested ``depth`` levels deep."""
    if kind == "list":
        return "[" * depth + "1" + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


# Python values nested as deep as orjson decodes (1024) and a little beyond.
deep_values = st.integers(min_value=10, max_value=1100).map(deep_list)
huge_strings = st.sampled_from([10_000, MAX_TEXT_FRAME // 2, MAX_TEXT_FRAME]).map(
    lambda size: "x" * size
)

SESSION_ID = "0123456789abcdef"
FOREIGN_IDS = (900_001, 900_002, 900_003, 900_004)
# The session's first call after its handshake (initialize, tools/list and the
# status read take ids 1 to 3).
FIRST_CALL_ID = 4


def _mcp(payload: dict[str, Any]) -> str:
    return dumps(mcp_frame(SESSION_ID, payload))


VALID_FRAMES: tuple[str, ...] = (
    dumps(HELLO),
    dumps(
        {"session_id": SESSION_ID, "type": "listen", "state": "detect", "text": "hi"}
    ),
    dumps({"session_id": "", "type": "listen", "state": "start", "mode": "manual"}),
    dumps({"session_id": SESSION_ID, "type": "abort", "reason": "wake_word_detected"}),
    dumps({"type": "custom", "payload": {"x": [1, 2, {"y": None}]}}),
    _mcp({"jsonrpc": "2.0", "id": FOREIGN_IDS[0], "result": text_result("true")}),
    _mcp(
        {
            "jsonrpc": "2.0",
            "id": FOREIGN_IDS[1],
            "error": {"code": -32601, "message": "Method not implemented"},
        }
    ),
    firmware_error_frame(SESSION_ID, FOREIGN_IDS[2], 'bad "volume" value'),
    firmware_error_frame(SESSION_ID, FIRST_CALL_ID, "Unknown tool"),
    _mcp({"jsonrpc": "2.0", "id": FIRST_CALL_ID, "result": text_result("late")}),
    _mcp(
        {
            "jsonrpc": "2.0",
            "id": FOREIGN_IDS[3],
            "result": {
                "tools": [STATUS_TOOL, VOLUME_TOOL],
                "nextCursor": "self.reboot",
            },
        }
    ),
    _mcp(
        {
            "jsonrpc": "2.0",
            "method": "notifications/state_changed",
            "params": {"newState": "speaking", "oldState": "listening"},
        }
    ),
    _mcp({"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage"}),
    _mcp(
        {
            "jsonrpc": "2.0",
            "id": FOREIGN_IDS[0],
            "result": {
                "content": [
                    {
                        "type": "image",
                        "image": '{"mimeType":"image/jpeg","data":"/9j/4AAQ"}',
                    }
                ],
                "isError": False,
            },
        }
    ),
)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


JSON_FRAMES = tuple(text for text in VALID_FRAMES if _is_json(text))

MUTATIONS = (
    "flip",
    "truncate",
    "duplicate_key",
    "retype",
    "surrogate",
    "huge",
    "deep",
    "splice",
)


@st.composite
def mutated_frames(draw: st.DrawFn) -> str:
    """Return a valid frame damaged the way a broken device or link could."""
    how = draw(st.sampled_from(MUTATIONS))
    structured = how in ("retype", "huge", "deep")
    text = draw(st.sampled_from(JSON_FRAMES if structured else VALID_FRAMES))
    event(f"mutation: {how}")
    match how:
        case "flip":
            raw = bytearray(text.encode())
            for _ in range(draw(st.integers(1, 4))):
                index = draw(st.integers(0, len(raw) - 1))
                raw[index] ^= draw(st.integers(1, 255))
            # Invalid UTF-8 comes out as lone surrogates.
            return raw.decode("utf-8", "surrogateescape")
        case "truncate":
            return text[: draw(st.integers(0, len(text) - 1))]
        case "duplicate_key":
            key = draw(st.sampled_from(KNOWN_KEYS))
            member = f"{json.dumps(key)}:{dumps(draw(json_values))}"
            if draw(st.booleans()):
                return "{" + member + "," + text[1:]
            return text[:-1] + "," + member + "}"
        case "retype":
            frame = json.loads(text)
            target = frame
            if isinstance(frame.get("payload"), dict) and draw(st.booleans()):
                target = frame["payload"]
            key = draw(st.sampled_from(sorted(target)))
            target[key] = draw(json_values)
            return dumps(frame)
        case "surrogate":
            index = draw(st.integers(0, len(text)))
            return text[:index] + draw(surrogates) + text[index:]
        case "huge":
            frame = json.loads(text)
            size = draw(
                st.sampled_from(
                    [
                        100_000,
                        MAX_TEXT_FRAME - len(text) - 20,
                        MAX_TEXT_FRAME + 1,
                    ]
                )
            )
            frame[draw(st.sampled_from(["text", "type", "pad"]))] = "x" * size
            return dumps(frame)
        case "deep":
            frame = json.loads(text)
            target = frame
            if isinstance(frame.get("payload"), dict) and draw(st.booleans()):
                target = frame["payload"]
            key = draw(st.sampled_from(sorted(target)))
            target[key] = "@@deep@@"
            depth = draw(st.integers(10, 2000))
            kind = draw(st.sampled_from(["list", "object"]))
            return dumps(frame).replace('"@@deep@@"', deep_text(depth, kind), 1)
        case _:
            other = draw(st.sampled_from(VALID_FRAMES))
            cut = draw(st.integers(0, len(text)))
            return text[:cut] + other + text[cut:]


def _json_frame(value: Any) -> str:
    return dumps(value)


text_frames = st.one_of(
    mutated_frames(),
    st.sampled_from(VALID_FRAMES),
    json_values.map(_json_frame),
    st.dictionaries(keys, json_values, max_size=6).map(
        lambda value: dumps({**value, "type": "mcp"})
    ),
    json_values.map(lambda payload: dumps({"type": "mcp", "payload": payload})),
    hostile_text,
    st.builds(deep_text, st.integers(10, 2000), st.sampled_from(["list", "object"])),
)
binary_frames = st.binary(max_size=2048)


# --- frames --------------------------------------------------------------------


@given(text=text_frames)
@example(text="")
@example(text='{"type":"mcp"}\ud800')
@example(text="[" * 2000 + "]" * 2000)
@example(text='{"type":"hello"}' + " " * MAX_TEXT_FRAME)
@example(text='{"type":"x","a":' + deep_text(MAX_DEPTH - 1, "list") + "}")
@example(text='{"type":"x","a":' + deep_text(MAX_DEPTH, "object") + "}")
@example(text='{"type":"x","a":' + deep_text(300, "list") + "}")
def test_parse_frame_returns_a_typed_object_or_refuses(text: str) -> None:
    """A frame parses to an object with a string type, or ProtocolError."""
    try:
        frame = parse_frame(text)
    except ProtocolError:
        return
    assert isinstance(frame, dict)
    assert isinstance(frame["type"], str)
    assert len(text) <= MAX_TEXT_FRAME
    assert_home_assistant_can_encode(frame)


@pytest.mark.parametrize(
    ("depth", "accepted"), [(MAX_DEPTH - 1, True), (MAX_DEPTH, False), (1000, False)]
)
def test_parse_frame_depth_limit(depth: int, accepted: bool) -> None:
    """The frame object itself is one level: MAX_DEPTH levels in all pass."""
    text = '{"type":"x","a":' + deep_text(depth, "list") + "}"
    if accepted:
        assert parse_frame(text)["type"] == "x"
    else:
        with pytest.raises(ProtocolError, match="deeper"):
            parse_frame(text)


@given(frame=st.dictionaries(keys, json_values, max_size=6), kind=st.text(max_size=8))
def test_parse_frame_round_trip(frame: dict[str, Any], kind: str) -> None:
    """Any JSON object with a string type comes back as it was sent."""
    frame["type"] = kind
    assert parse_frame(dumps(frame)) == frame


@given(text=text_frames)
@example(text='{"type":"mcp","payload":{"id":1,"error":{' + '"message":"' * 5000)
@example(text='{"type":"mcp","payload":{"id":' + "9" * 40 + ',"error":{}}}')
def test_recover_error_reply_is_total(text: str) -> None:
    """Recovery returns an id and a message, or None; it never raises."""
    recovered = recover_error_reply(text)
    if recovered is None:
        return
    request_id, message = recovered
    assert type(request_id) is int
    assert 0 <= request_id < 10**18
    assert isinstance(message, str)
    assert '"type"' in text


@given(
    request_id=st.integers(min_value=0, max_value=10**18 - 1),
    message=st.text(max_size=200),
    session_id=st.text(alphabet="0123456789abcdef", max_size=16),
)
@example(request_id=5, message='bad "x" value', session_id="")
@example(request_id=1, message='"}}}', session_id="s")
@example(request_id=2, message="ends with a brace}", session_id="s")
def test_recover_error_reply_reads_firmware_frames(
    request_id: int, message: str, session_id: str
) -> None:
    """The firmware's unescaped error frames give back their id and message."""
    text = firmware_error_frame(session_id, request_id, message)
    assert recover_error_reply(text) == (request_id, message)


@given(
    frame=st.one_of(
        st.dictionaries(keys, json_values, max_size=6),
        st.fixed_dictionaries(
            {"type": st.just("hello")},
            optional={
                "version": json_values,
                "transport": json_values,
                "features": json_values
                | st.dictionaries(keys, json_values, max_size=4),
                "audio_params": json_values,
            },
        ),
    )
)
def test_device_hello_from_any_object(frame: dict[str, Any]) -> None:
    """A hello is read with sane types whatever its fields hold."""
    try:
        hello = DeviceHello.from_frame(frame)
    except ProtocolError:
        assert frame.get("type") != "hello"
        return
    assert frame["type"] == "hello"
    assert type(hello.version) is int
    assert isinstance(hello.transport, str)
    assert isinstance(hello.features, dict)
    assert isinstance(hello.audio_params, dict)
    features = frame.get("features")
    assert hello.supports_mcp is (
        isinstance(features, dict) and features.get("mcp") is True
    )


# --- tools -------------------------------------------------------------------

PROPERTY_TYPES = ("boolean", "integer", "number", "string", "array", "object", "null")
numbers = json_ints | json_floats | st.integers(-300, 300)
property_names = st.sampled_from(["volume", "r", "g", "b", "theme", "url", "x"]) | (
    st.text(max_size=6)
)
property_specs = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(PROPERTY_TYPES) | json_values,
        "minimum": numbers | json_values,
        "maximum": numbers | json_values,
        "default": json_values,
        "enum": st.lists(scalars, max_size=4) | json_values,
        "description": st.text(max_size=10) | json_values,
    },
)


@st.composite
def schemas(draw: st.DrawFn) -> Any:
    """Return an input schema: mostly the firmware's shape, sometimes nonsense."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    properties = draw(
        st.dictionaries(
            property_names, property_specs | json_values.filter(bool), max_size=4
        )
    )
    names = sorted(properties)
    required = draw(
        (st.lists(st.sampled_from(names), max_size=4) if names else st.just([]))
        | st.lists(json_values, max_size=3)
        | json_values
    )
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        schema["required"] = required
    if draw(st.integers(0, 9)) == 0:
        schema["properties"] = draw(json_values)
    return schema


tool_objects = st.fixed_dictionaries(
    {"name": st.text(max_size=12) | json_values},
    optional={
        "description": st.text(max_size=12) | json_values,
        "inputSchema": schemas(),
        "annotations": st.fixed_dictionaries(
            {},
            optional={
                "audience": st.lists(
                    st.sampled_from(["user", "assistant"]) | json_values, max_size=3
                )
                | json_values
            },
        )
        | json_values,
    },
)


@given(obj=tool_objects | json_values)
def test_tool_from_json_is_total(obj: Any) -> None:
    """A tool entry gives a usable tool or None, and survives a storage trip."""
    tool = Tool.from_json(obj)
    if tool is None:
        return
    assert isinstance(tool.name, str)
    assert tool.name
    assert isinstance(tool.description, str)
    assert isinstance(tool.user_only, bool)
    for prop in tool.properties:
        assert isinstance(prop, ToolProperty)
        assert isinstance(prop.name, str)
        assert prop.type is None or isinstance(prop.type, str)
        for bound in (prop.minimum, prop.maximum):
            assert bound is None or (
                isinstance(bound, (int, float)) and not isinstance(bound, bool)
            )
    stored = orjson.loads(orjson.dumps(tool.as_dict()))
    again = Tool.from_json(stored)
    assert again == tool
    assert again is not None
    assert again.properties == tool.properties


# Arguments come from actions (YAML, the UI, templates): any Python value.
argument_values = st.one_of(
    json_values,
    st.floats(),
    st.integers(),
    st.integers(min_value=2**64, max_value=2**80) | st.integers(max_value=-(2**63) - 1),
    st.sampled_from([0, 1, -1, 100, 255, 1.5, 1e300, -1e300, True, False, "1"]),
)


@st.composite
def tools_and_arguments(draw: st.DrawFn) -> tuple[Tool, dict[str, Any]]:
    """Return a tool and arguments that mostly name its properties."""
    tool = Tool.from_json({"name": "self.fuzz", "inputSchema": draw(schemas())})
    assert tool is not None
    names = [prop.name for prop in tool.properties]
    arg_names = st.sampled_from(names) | property_names if names else property_names
    arguments = draw(st.dictionaries(arg_names, argument_values, max_size=5))
    return tool, arguments


@given(case=tools_and_arguments())
@example(
    case=(
        Tool.from_json(
            {
                "name": "t",
                "inputSchema": {"properties": {"n": {"type": "integer"}}},
            }
        ),
        {"n": 2**64},
    )
)
@example(
    case=(
        Tool.from_json(
            {"name": "t", "inputSchema": {"properties": {"n": {"type": "integer"}}}}
        ),
        {"n": 1e300},
    )
)
@example(
    case=(
        Tool.from_json({"name": "t", "inputSchema": {"properties": {"o": {}}}}),
        {"o": {1: "not a string key"}},
    )
)
@example(
    case=(
        Tool.from_json(
            {"name": "t", "inputSchema": {"properties": {"s": {"type": "string"}}}}
        ),
        {"s": "unpaired \ud800"},
    )
)
def test_validate_arguments_cleans_or_refuses(
    case: tuple[Tool | None, dict[str, Any]],
) -> None:
    """Arguments come back cleaned and sendable, or ArgumentError says why."""
    tool, arguments = case
    assert tool is not None
    props = {prop.name: prop for prop in tool.properties}
    refusal: ArgumentError | None = None
    try:
        cleaned = validate_arguments(tool, arguments)
    except ArgumentError as err:
        refusal = err
    if refusal is not None:
        assert refusal.reason in REASONS
        assert isinstance(refusal.argument, str)
        assert all(isinstance(value, str) for value in refusal.placeholders.values())
        assert str(refusal)
        return
    assert isinstance(cleaned, dict)
    assert set(cleaned) == set(arguments)
    assert all(name in cleaned for name, prop in props.items() if prop.required)
    for name, value in cleaned.items():
        prop = props[name]
        match prop.type:
            case "boolean":
                assert isinstance(value, bool)
            case "integer":
                assert type(value) is int
            case "number":
                assert type(value) in (int, float)
                assert math.isfinite(value)
            case "string":
                assert isinstance(value, str)
        if prop.type in ("integer", "number"):
            assert prop.minimum is None or value >= prop.minimum
            assert prop.maximum is None or value <= prop.maximum
        if prop.enum is not None:
            assert value in prop.enum
    # Whatever is accepted is put on the wire, or refused there with a
    # ProtocolError (values no JSON holds: unpaired surrogates, bytes...).
    try:
        dumps(
            mcp_frame(
                SESSION_ID,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": tool.name, "arguments": cleaned},
                },
            )
        )
    except ProtocolError:
        event("accepted arguments refused by the encoder")


content_items = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.just("text")}, optional={"text": st.text(max_size=20) | json_values}
    ),
    st.fixed_dictionaries(
        {"type": st.just("image")},
        optional={
            "image": st.one_of(
                json_values,
                st.dictionaries(keys, json_values, max_size=3),
                st.fixed_dictionaries(
                    {},
                    optional={"mimeType": json_values, "data": json_values},
                ).map(dumps),
                hostile_text,
            ),
            "data": json_values,
            "mimeType": json_values,
        },
    ),
)
tool_results = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "content": st.lists(content_items, max_size=5) | json_values,
            "isError": json_values,
        },
    ),
)


@given(result=tool_results)
def test_tool_result_from_any_result(result: Any) -> None:
    """Every result shape reads to text and images; ``json`` never raises."""
    parsed = ToolResult.from_result(result)
    assert isinstance(parsed.is_error, bool)
    assert isinstance(parsed.text, str)
    assert parsed.code is None
    for image in parsed.images:
        assert isinstance(image, ToolImage)
        assert isinstance(image.mime_type, str)
        assert isinstance(image.data, str)
    _ = parsed.json


@given(value=json_values, before=st.sampled_from(["", " ", "\n\t"]))
def test_tool_result_json_round_trip(value: Any, before: str) -> None:
    """Booleans, numbers, strings and objects sent as JSON text come back."""
    text = before + dumps(value) + before
    assert ToolResult(is_error=False, text=text).json == value


@given(
    text=hostile_text
    | text_frames
    | st.builds(deep_text, st.integers(10, 2000), st.sampled_from(["list", "object"]))
)
def test_tool_result_json_never_raises(text: str) -> None:
    """Text that is not JSON, or too deep, or not UTF-8, decodes to None."""
    assert_home_assistant_can_encode(ToolResult(is_error=False, text=text).json)


# --- the MCP client ------------------------------------------------------------

PENDING = 4
reply_ids = st.one_of(
    st.integers(1, PENDING + 1),
    st.sampled_from([0, -1, 1.0, 2.0, True, False, "1", "2", None, [1], {"id": 1}]),
    json_ints,
    json_values,
)
error_objects = st.one_of(
    json_values,
    huge_strings,
    st.fixed_dictionaries(
        {},
        optional={
            "message": st.text(max_size=20) | json_values | huge_strings,
            "code": st.integers(-40000, 0) | json_values,
            "data": json_values,
        },
    ),
)
replies = st.fixed_dictionaries(
    {"id": reply_ids},
    optional={
        "jsonrpc": st.just("2.0") | json_values,
        "result": json_values | huge_strings | deep_values,
        "error": error_objects | deep_values,
        "method": st.sampled_from(["notifications/state_changed", "ping"])
        | json_values,
        "params": json_values | deep_values,
    },
)
payloads = st.one_of(replies, json_values, deep_values, huge_strings)


def expected_answer(payload: Any, request_id: int) -> tuple[str, Any] | None:
    """Return how ``payload`` answers ``request_id``, if it does."""
    if not isinstance(payload, dict) or isinstance(payload.get("method"), str):
        return None
    if type(payload.get("id")) is not int or payload["id"] != request_id:
        return None
    if "result" in payload:
        return ("result", payload["result"])
    if "error" in payload:
        return ("error", payload["error"])
    return None


async def _client_takes(sequence: list[Any]) -> None:
    sent: list[dict[str, Any]] = []
    all_sent = asyncio.Event()
    notifications: list[tuple[str, dict[str, Any]]] = []

    async def send(payload: dict[str, Any]) -> None:
        sent.append(payload)
        if len(sent) == PENDING:
            all_sent.set()

    client = McpClient(
        send, lambda method, params: notifications.append((method, params))
    )
    tasks = [
        asyncio.ensure_future(client.request("tools/call", {"n": n}, 60))
        for n in range(PENDING)
    ]
    await wait(all_sent.wait())
    ids = [payload["id"] for payload in sent]
    assert ids == list(range(1, PENDING + 1))
    futures = dict(client._pending)

    expected_notifications = 0
    for position, payload in enumerate(sequence):
        answer = client.handle_payload(payload)
        is_request = isinstance(payload, dict) and isinstance(
            payload.get("method"), str
        )
        if is_request and payload.get("id") is not None:
            assert answer is not None
            assert answer["id"] is payload["id"]
            assert answer["error"]["code"] == -32601
        else:
            assert answer is None
        if is_request and payload.get("id") is None:
            expected_notifications += 1
        # A request is answered by its exact id and by nothing else.
        for request_id, future in futures.items():
            first = next(
                (
                    found
                    for earlier in sequence[: position + 1]
                    if (found := expected_answer(earlier, request_id)) is not None
                ),
                None,
            )
            assert future.done() is (first is not None)

    assert len(notifications) == expected_notifications
    assert all(isinstance(params, dict) for _method, params in notifications)
    client.close("example over")
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for request_id, outcome in zip(ids, outcomes, strict=True):
        first = next(
            (
                found
                for payload in sequence
                if (found := expected_answer(payload, request_id)) is not None
            ),
            None,
        )
        event(f"request answered by: {first[0] if first else 'nothing'}")
        if first is None:
            assert isinstance(outcome, ConnectionClosedError)
        elif first[0] == "result":
            assert outcome is first[1]  # this very reply, not an equal one
        else:
            assert isinstance(outcome, McpError)
            error = first[1]
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                assert outcome.message == error["message"]
            code = error.get("code") if isinstance(error, dict) else None
            assert outcome.code == (code if type(code) is int else None)
    assert client.pending_count == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}


@given(sequence=st.lists(payloads, max_size=12), repeat=st.booleans())
@example(
    sequence=[
        {"jsonrpc": "2.0", "id": True, "result": "not for id 1"},
        {"jsonrpc": "2.0", "id": 1.0, "result": "not for id 1 either"},
        {"jsonrpc": "2.0", "id": "2", "error": {"message": "nor for id 2"}},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "id": 4, "result": "for id 4"},
        {"jsonrpc": "2.0", "id": 4, "error": {"message": "duplicate"}},
    ],
    repeat=True,
)
def test_mcp_client_matches_replies_by_exact_id(
    sequence: list[Any], repeat: bool
) -> None:
    """Wrong ids, duplicates, odd types and huge values never misroute a reply."""
    run(_client_takes(sequence + sequence if repeat else sequence))


# --- the session ---------------------------------------------------------------


def answers(text: str, request_id: int) -> bool:
    """Return True when the frame is a reply to ``request_id``."""
    try:
        frame = parse_frame(text)
    except ProtocolError:
        recovered = recover_error_reply(text)
        return recovered is not None and recovered[0] == request_id
    if frame["type"] != "mcp":
        return False
    return expected_answer(frame.get("payload"), request_id) is not None


async def _session_takes(frames: list[str | bytes], *, before_hello: bool) -> None:
    rig = Rig()
    rig.device.tools = [STATUS_TOOL, VOLUME_TOOL, tool_json(SILENT_TOOL)]
    rig.device.status = STATUS
    rig.device.tool_handlers[VOLUME] = lambda arguments, _id: Result(
        text_result("true" if arguments == {"volume": 5} else "false")
    )
    rig.device.tool_handlers[SILENT_TOOL] = lambda _arguments, _id: SILENT
    session = rig.open(hello_timeout=60)
    session.start()

    def feed(frame: str | bytes) -> None:
        if isinstance(frame, bytes):
            # What the WebSocket view does with a binary frame (version 3).
            try:
                session.feed_audio(unpack_audio(frame, 3))
            except ProtocolError as err:
                session.malformed_audio(err)
        else:
            session.feed_text(frame)

    if before_hello:
        for frame in frames:
            feed(frame)
    await rig.handshake(session, start=False)
    assert session.ready

    pending = asyncio.ensure_future(session.call_tool(SILENT_TOOL, {}, 60))
    while (request := await rig.device.next_request("tools/call"))["params"][
        "name"
    ] != SILENT_TOOL:
        pass
    pending_id = request["id"]
    future = session.mcp._pending[pending_id]
    answered = False
    if not before_hello:
        for frame in frames:
            if isinstance(frame, str):
                answered = answered or answers(frame, pending_id)
            feed(frame)
            assert future.done() is answered

    assert rig.handler.closed_reasons == []
    assert all(isinstance(event.type, DeviceEventType) for event in rig.handler.events)
    # The session still works: a well-formed round trip after the garbage.
    result = await session.call_tool(VOLUME, {"volume": 5}, 5)
    assert result == ToolResult(is_error=False, text="true")

    await rig.close_all()
    outcome = (await asyncio.gather(pending, return_exceptions=True))[0]
    event(f"pending call answered by a fuzzed frame: {answered}")
    if not answered:
        assert isinstance(outcome, ConnectionClosedError)
    else:
        assert isinstance(outcome, ToolResult)
    assert session.mcp.pending_count == 0
    assert rig.handler.closed_reasons
    # Nothing is left running once the socket is gone.
    assert asyncio.all_tasks() == {asyncio.current_task()}


session_frames = st.lists(text_frames | binary_frames, min_size=1, max_size=6)


@given(frames=session_frames)
@example(frames=[firmware_error_frame(SESSION_ID, FIRST_CALL_ID, 'he said "no"')])
@example(frames=["[" * 1500 + "]" * 1500, b"\xff" * 2048, '{"type":"hello"}'])
def test_session_survives_any_frames(frames: list[str | bytes]) -> None:
    """Garbage never escapes feed_text/feed_audio nor breaks the session."""
    run(_session_takes(frames, before_hello=False))


@given(frames=session_frames)
def test_session_survives_frames_before_hello(frames: list[str | bytes]) -> None:
    """Garbage before the hello does not stop the handshake that follows."""
    run(_session_takes(frames, before_hello=True))


@given(data=st.binary(max_size=512), version=st.sampled_from([1, 2, 3]))
def test_unpack_audio_is_total(data: bytes, version: int) -> None:
    """Any binary frame unpacks to a payload or is refused as a protocol error."""
    try:
        payload = unpack_audio(data, version)
    except ProtocolError:
        assert version in (2, 3)
        return
    assert len(payload) <= len(data)
    assert data.endswith(payload)
    if version == 1:
        assert payload == data


@given(
    payload=st.binary(max_size=4000),
    version=st.sampled_from([1, 2, 3]),
    timestamp=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_audio_framing_round_trip(payload: bytes, version: int, timestamp: int) -> None:
    """What is packed for a protocol version unpacks to the same payload."""
    assert unpack_audio(pack_audio(payload, version, timestamp), version) == payload
