"""Binary audio frames of the WebSocket transport, protocol versions 1 to 3.

Each binary frame carries one Opus packet of ``frame_duration`` ms. The
connection's protocol version (the ``Protocol-Version`` header, taken from the
OTA answer's ``websocket.version``) chooses the framing, both ways:

- 1: the raw Opus packet;
- 2: a 16-byte big-endian header: version u16, type u16 (0 = Opus),
  reserved u32, timestamp u32 (ms), payload size u32;
- 3: a 4-byte header: type u8 (0 = Opus), reserved u8, payload size u16 (BE).
"""

import struct
from typing import Final

from ..errors import ProtocolError

PROTOCOL_VERSIONS: Final = (1, 2, 3)
# The audio itself: the microphone at 16 kHz, the speaker at the rate the
# server hello announces (24 kHz), mono Opus in frames of 60 ms.
MIC_SAMPLE_RATE: Final = 16000
SPEAKER_SAMPLE_RATE: Final = 24000
FRAME_DURATION_MS: Final = 60
AUDIO_TYPE_OPUS: Final = 0

_V2: Final = struct.Struct(">HHIII")
_V3: Final = struct.Struct(">BBH")


def parse_protocol_version(value: str | None) -> int:
    """Return the binary protocol version a device announced (1 when unknown)."""
    try:
        version = int(value) if value is not None else 1
    except ValueError:
        return 1
    return version if version in PROTOCOL_VERSIONS else 1


def unpack_audio(data: bytes, version: int) -> bytes:
    """Return the Opus packet of one binary frame.

    Raises ProtocolError when the header is short, says another type, or
    gives a size other than what follows it.
    """
    if version == 2:
        if len(data) < _V2.size:
            raise ProtocolError(f"binary frame of {len(data)} bytes has no v2 header")
        _version, kind, _reserved, _timestamp, size = _V2.unpack_from(data)
        payload = data[_V2.size :]
    elif version == 3:
        if len(data) < _V3.size:
            raise ProtocolError(f"binary frame of {len(data)} bytes has no v3 header")
        kind, _reserved, size = _V3.unpack_from(data)
        payload = data[_V3.size :]
    else:
        return bytes(data)
    if kind != AUDIO_TYPE_OPUS:
        raise ProtocolError(f"binary frame of type {kind} is not audio")
    if size != len(payload):
        raise ProtocolError(
            f"binary frame says {size} payload bytes but holds {len(payload)}"
        )
    return bytes(payload)


def pack_audio(payload: bytes, version: int, timestamp: int = 0) -> bytes:
    """Frame one Opus packet for the connection's protocol version."""
    if version == 2:
        return (
            _V2.pack(2, AUDIO_TYPE_OPUS, 0, timestamp & 0xFFFFFFFF, len(payload))
            + payload
        )
    if version == 3:
        return _V3.pack(AUDIO_TYPE_OPUS, 0, len(payload)) + payload
    return payload
