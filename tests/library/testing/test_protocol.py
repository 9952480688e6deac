"""Frame builders, binary framing and transport helpers."""

import pytest

from aioxiaozhi.testing import decode_audio, encode_audio, mask_token, relative_url
from aioxiaozhi.testing.protocol import hello_frame, listen_frame
from aioxiaozhi.testing.transport import multipart_parts, redact_url


def test_frames() -> None:
    assert hello_frame(2, features=None) == (
        '{"type":"hello","version":2,"transport":"websocket","audio_params":'
        '{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}'
    )
    assert listen_frame("s", "detect") == (
        '{"session_id":"s","type":"listen","state":"detect","text":""}'
    )
    assert listen_frame("s", "start", "realtime") == (
        '{"session_id":"s","type":"listen","state":"start","mode":"realtime"}'
    )


@pytest.mark.parametrize("version", [1, 2, 3])
def test_audio_round_trip(version: int) -> None:
    frame = encode_audio(b"\x01" * 50, version, timestamp=120)
    packet = decode_audio(frame, version)
    assert packet.payload == b"\x01" * 50
    assert packet.timestamp == (120 if version == 2 else 0)
    assert len(frame) == 50 + {1: 0, 2: 16, 3: 4}[version]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("ws://127.0.0.1:8123/api/xiaozhi/v1/", "/api/xiaozhi/v1/"),
        ("http://h/vision?token=a&b=1", "/vision?token=a&b=1"),
        ("https://example.com", "/"),
        ("/already/relative", "/already/relative"),
    ],
)
def test_relative_url(url: str, expected: str) -> None:
    assert relative_url(url) == expected


def test_mask_token() -> None:
    assert mask_token(None) == "<none>"
    assert mask_token("short") == "***"
    assert mask_token("abcdefghijkl") == "abcd***"


def test_redact_url() -> None:
    assert redact_url(None) == "<none>"
    assert redact_url("ws://h/ws") == "ws://h/ws"
    assert redact_url("ws://h/ws?token=secret") == "ws://h/ws?***"


def test_multipart_layout() -> None:
    body = b"".join(
        multipart_parts(
            "B",
            fields=[("question", "why?")],
            file_field="file",
            filename="camera.jpg",
            content_type="image/jpeg",
            data=b"JPEG",
        )
    )
    assert body == (
        b'--B\r\nContent-Disposition: form-data; name="question"\r\n\r\nwhy?\r\n'
        b'--B\r\nContent-Disposition: form-data; name="file"; '
        b'filename="camera.jpg"\r\nContent-Type: image/jpeg\r\n\r\n'
        b"JPEG\r\n--B--\r\n"
    )
