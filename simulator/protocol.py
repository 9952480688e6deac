"""Frames a xiaozhi device sends, built the way the firmware builds them.

The firmware assembles most of its text frames by string concatenation with
``session_id`` first and does not escape what it inserts; these builders do
the same, so a server sees byte-identical frames.
"""

from collections.abc import Mapping
from dataclasses import dataclass
import struct
from typing import Any, Literal

from .tools import dumps

ListenState = Literal["start", "stop", "detect"]
ListenMode = Literal["auto", "manual", "realtime"]

AUDIO_SAMPLE_RATE = 16000
AUDIO_FRAME_DURATION_MS = 60

_V2_HEADER = struct.Struct(">HHIII")
_V3_HEADER = struct.Struct(">BBH")


def hello_frame(
    protocol_version: int,
    *,
    features: Mapping[str, bool] | None,
    extra: Mapping[str, Any] | None = None,
    transport: str = "websocket",
) -> str:
    """Return the device's hello; ``features=None`` omits the key entirely.

    Over MQTT the firmware says version 3 and transport ``udp``.
    """
    hello: dict[str, Any] = {"type": "hello", "version": protocol_version}
    if features is not None:
        hello["features"] = dict(features)
    hello["transport"] = transport
    hello["audio_params"] = {
        "format": "opus",
        "sample_rate": AUDIO_SAMPLE_RATE,
        "channels": 1,
        "frame_duration": AUDIO_FRAME_DURATION_MS,
    }
    if extra:
        hello.update(extra)
    return dumps(hello)


def listen_frame(
    session_id: str,
    state: ListenState,
    mode: ListenMode = "auto",
    text: str | None = None,
) -> str:
    """Return a ``listen`` frame.

    ``start`` carries ``mode``; ``stop`` carries nothing else; ``detect``
    carries the wake word in ``text``.
    """
    frame = '{"session_id":"' + session_id + '","type":"listen","state":"' + state + '"'
    if state == "start":
        frame += ',"mode":"' + mode + '"'
    elif state == "detect":
        frame += ',"text":"' + (text or "") + '"'
    return frame + "}"


def abort_frame(session_id: str, reason: str | None = None) -> str:
    """Return an ``abort`` frame, with ``reason`` when given."""
    frame = '{"session_id":"' + session_id + '","type":"abort"'
    if reason is not None:
        frame += ',"reason":"' + reason + '"'
    return frame + "}"


def mcp_frame(session_id: str, payload: str) -> str:
    """Wrap an already serialised JSON-RPC payload in an ``mcp`` frame."""
    return '{"session_id":"' + session_id + '","type":"mcp","payload":' + payload + "}"


@dataclass(frozen=True, kw_only=True)
class AudioPacket:
    """One binary audio frame, decoded."""

    payload: bytes
    timestamp: int = 0
    type: int = 0


def encode_audio(payload: bytes, protocol_version: int, timestamp: int = 0) -> bytes:
    """Frame an Opus packet for the given binary protocol version.

    Version 1 is the raw payload; version 2 prefixes a 16-byte big-endian
    header (version u16, type u16, reserved u32, timestamp u32, size u32);
    version 3 prefixes a 4-byte header (type u8, reserved u8, size u16).
    """
    if protocol_version == 2:
        header = _V2_HEADER.pack(2, 0, 0, timestamp & 0xFFFFFFFF, len(payload))
        return header + payload
    if protocol_version == 3:
        return _V3_HEADER.pack(0, 0, len(payload)) + payload
    return payload


def decode_audio(data: bytes, protocol_version: int) -> AudioPacket:
    """Decode a binary frame; raises ValueError when the header is short."""
    if protocol_version == 2:
        if len(data) < _V2_HEADER.size:
            raise ValueError("Binary frame shorter than the version 2 header")
        _version, kind, _reserved, timestamp, size = _V2_HEADER.unpack_from(data)
        start = _V2_HEADER.size
        return AudioPacket(
            payload=data[start : start + size], timestamp=timestamp, type=kind
        )
    if protocol_version == 3:
        if len(data) < _V3_HEADER.size:
            raise ValueError("Binary frame shorter than the version 3 header")
        kind, _reserved, size = _V3_HEADER.unpack_from(data)
        start = _V3_HEADER.size
        return AudioPacket(payload=data[start : start + size], type=kind)
    return AudioPacket(payload=bytes(data))
