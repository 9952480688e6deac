"""Frame parsing, the firmware's broken error frames, hello in both directions."""

import json
from typing import Any

import pytest

from aioxiaozhi import (
    DeviceHello,
    ProtocolError,
    pack_audio,
    parse_protocol_version,
    unpack_audio,
)
from aioxiaozhi.messages import (
    DEFAULT_AUDIO_PARAMS,
    MAX_TEXT_FRAME,
    alert_frame,
    dumps,
    loads,
    mcp_frame,
    notify_frame,
    parse_frame,
    recover_error_reply,
    server_hello,
)

from .fakes import HELLO, firmware_error_frame

FIRMWARE_ERROR = (
    '{"session_id":"x","type":"mcp","payload":{"jsonrpc":"2.0","id":5,'
    '"error":{"message":"bad "x" value"}}}'
)


def test_parse_frame_valid() -> None:
    frame = parse_frame('{"type":"listen","state":"start","mode":"auto"}')
    assert frame == {"type": "listen", "state": "start", "mode": "auto"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "invalid JSON"),
        ("", "invalid JSON"),
        ('["type", "hello"]', "not a JSON object"),
        ('"hello"', "not a JSON object"),
        ('{"state":"start"}', "no type"),
        ('{"type":7}', "no type"),
        ('{"type":null}', "no type"),
    ],
)
def test_parse_frame_rejects(text: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_frame(text)


def test_parse_frame_too_large() -> None:
    text = '{"type":"listen","pad":"' + "x" * MAX_TEXT_FRAME + '"}'
    with pytest.raises(ProtocolError, match="too large"):
        parse_frame(text)


def test_parse_frame_at_limit() -> None:
    prefix = '{"type":"listen","pad":"'
    text = prefix + "x" * (MAX_TEXT_FRAME - len(prefix) - 2) + '"}'
    assert len(text) == MAX_TEXT_FRAME
    assert parse_frame(text)["type"] == "listen"


def test_loads_and_dumps() -> None:
    assert loads(b'{"a":[1,true,null]}') == {"a": [1, True, None]}
    assert dumps({"a": [1, True, None], "b": "é"}) == '{"a":[1,true,null],"b":"é"}'
    with pytest.raises(ProtocolError, match="invalid JSON"):
        loads("{")


def test_firmware_error_frame_is_invalid_json() -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(FIRMWARE_ERROR)
    assert firmware_error_frame("x", 5, 'bad "x" value') == FIRMWARE_ERROR


def test_recover_error_reply_firmware_frame() -> None:
    assert recover_error_reply(FIRMWARE_ERROR) == (5, 'bad "x" value')


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Spaces and a multi-line message.
        (
            (
                '{ "type" : "mcp", "payload": {"jsonrpc":"2.0", "id" : 12 , '
                '"error" : { "message" : "line "1"\nline 2" } } }\n'
            ),
            (12, 'line "1"\nline 2'),
        ),
        # Payload without the frame's closing brace.
        (
            '{"type":"mcp","payload":{"id":3,"error":{"message":"a"b"}}',
            (3, 'a"b'),
        ),
        # No readable message: the whole frame is the message.
        (
            '{"type":"mcp","payload":{"id":8,"error":{"message":"cut',
            (8, '{"type":"mcp","payload":{"id":8,"error":{"message":"cut'),
        ),
    ],
)
def test_recover_error_reply_variants(text: str, expected: tuple[int, str]) -> None:
    assert recover_error_reply(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "not json at all",
        '{"type":"listen","id":5,"error":{"message":"x"}}',
        '{"type":"mcp","payload":{"jsonrpc":"2.0","id":5,"result":{"a":"b"c"}}}',
        '{"type":"mcp","payload":{"id":"5","error":{"message":"x"}}}',
        '{"type":"mcp","payload":{"id":-5,"error":{"message":"x"}}}',
        "",
    ],
)
def test_recover_error_reply_none(text: str) -> None:
    assert recover_error_reply(text) is None


def test_device_hello_full() -> None:
    hello = DeviceHello.from_frame(
        {**HELLO, "features": {"mcp": True, "aec": True}, "version": 3}
    )
    assert hello.version == 3
    assert hello.transport == "websocket"
    assert hello.features == {"mcp": True, "aec": True}
    assert hello.audio_params["sample_rate"] == 16000
    assert hello.supports_mcp is True


@pytest.mark.parametrize(
    ("frame", "version", "transport", "features", "audio_params"),
    [
        ({"type": "hello"}, 1, "websocket", {}, {}),
        (
            {"type": "hello", "version": True, "transport": 5, "features": [1]},
            1,
            "websocket",
            {},
            {},
        ),
        (
            {"type": "hello", "version": "2", "features": None, "audio_params": "x"},
            1,
            "websocket",
            {},
            {},
        ),
        (
            {"type": "hello", "version": 2, "transport": "udp", "audio_params": {}},
            2,
            "udp",
            {},
            {},
        ),
    ],
)
def test_device_hello_tolerates_odd_fields(
    frame: dict[str, Any],
    version: int,
    transport: str,
    features: dict[str, Any],
    audio_params: dict[str, Any],
) -> None:
    hello = DeviceHello.from_frame(frame)
    assert hello.version == version
    assert hello.transport == transport
    assert hello.features == features
    assert hello.audio_params == audio_params
    assert hello.supports_mcp is False


@pytest.mark.parametrize("mcp", ["true", 1, None, False])
def test_device_hello_mcp_must_be_true(mcp: Any) -> None:
    hello = DeviceHello.from_frame({"type": "hello", "features": {"mcp": mcp}})
    assert hello.supports_mcp is False


def test_device_hello_wrong_type() -> None:
    with pytest.raises(ProtocolError, match="expected hello, got 'listen'"):
        DeviceHello.from_frame({"type": "listen"})


def test_server_hello() -> None:
    frame = server_hello("abc123", DEFAULT_AUDIO_PARAMS, {"transport": "websocket"})
    assert frame == {
        "type": "hello",
        "transport": "websocket",
        "session_id": "abc123",
        "audio_params": {
            "format": "opus",
            "sample_rate": 24000,
            "channels": 1,
            "frame_duration": 60,
        },
    }


def test_mcp_and_alert_frames() -> None:
    payload = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert mcp_frame("s", payload) == {
        "session_id": "s",
        "type": "mcp",
        "payload": payload,
    }
    assert alert_frame("s", "Warning", "Door open") == {
        "session_id": "s",
        "type": "alert",
        "status": "Warning",
        "message": "Door open",
        "emotion": "neutral",
    }
    assert alert_frame("s", "Info", "Hi", "happy")["emotion"] == "happy"


def test_notify_frame_always_carries_a_subtitle_array() -> None:
    """Forks that parse ``subtitles`` drop the whole message unless it is an array."""
    url = "http://ha.local/api/xiaozhi/v1/sound/abc.ogg"
    assert notify_frame(url, "Dinner is ready") == {
        "type": "notify",
        "audio_url": url,
        "subtitles": [{"start_ms": 0, "text": "Dinner is ready"}],
    }
    assert notify_frame(url, "") == {
        "type": "notify",
        "audio_url": url,
        "subtitles": [],
    }


def test_recover_error_reply_limits() -> None:
    """Oversized frames are not scanned; an unterminated message keeps the text."""
    huge = FIRMWARE_ERROR + " " * MAX_TEXT_FRAME
    assert recover_error_reply(huge) is None
    cut = '{"type":"mcp","payload":{"jsonrpc":"2.0","id":7,"error":{"message":"oops'
    assert recover_error_reply(cut) == (7, cut)
    hostile = (
        '{"type":"mcp","payload":{"id":1,"error":{' + '"message":"' * 20000 + '"}}}'
    )
    request_id, message = recover_error_reply(hostile)
    assert request_id == 1
    assert message.startswith('"message":"')


def test_server_hello_needs_a_transport() -> None:
    """The firmware reads ``transport`` unchecked: a hello without it is a bug."""
    with pytest.raises(TypeError):
        server_hello("abc123", DEFAULT_AUDIO_PARAMS, {"udp": {}})


@pytest.mark.parametrize(
    ("header", "version"),
    [(None, 1), ("1", 1), ("2", 2), ("3", 3), ("4", 1), ("x", 1), ("", 1)],
)
def test_protocol_version_header(header: str | None, version: int) -> None:
    """Unknown or malformed versions fall back to raw Opus frames."""
    assert parse_protocol_version(header) == version


@pytest.mark.parametrize(
    ("data", "version", "error"),
    [
        (b"\x00\x02\x00\x00", 2, "no v2 header"),
        (b"\x00\x00", 3, "no v3 header"),
        (b"\x01\x00\x00\x02ab", 3, "type 1 is not audio"),
        (b"\x00\x00\x00\x05ab", 3, "says 5 payload bytes but holds 2"),
        (
            b"\x00\x02\x00\x00" + b"\x00" * 8 + b"\x00\x00\x00\x01ab",
            2,
            "says 1 payload bytes but holds 2",
        ),
    ],
)
def test_bad_audio_frames(data: bytes, version: int, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        unpack_audio(data, version)


def test_audio_frames_per_version() -> None:
    payload = b"opus"
    assert pack_audio(payload, 1) == payload
    assert pack_audio(payload, 2, 60) == (
        b"\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x3c\x00\x00\x00\x04opus"
    )
    assert pack_audio(payload, 3) == b"\x00\x00\x00\x04opus"
