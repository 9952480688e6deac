"""Frames of the xiaozhi WebSocket protocol: parsing, building and limits."""

from dataclasses import dataclass, field
import re
from typing import Any, Final, Self

import orjson

from .audio import FRAME_DURATION_MS, SPEAKER_SAMPLE_RATE
from .emotions import emoji_for
from .errors import ProtocolError

# A tools/list page is about 8 KB and a tool result rarely more; pictures go
# over HTTP. Anything far beyond this is not a device talking.
MAX_TEXT_FRAME: Final = 1024 * 1024
# A tools/list page nests about ten levels. Home Assistant wraps device data in
# events, states and storage, and its JSON encoder stops at 255 levels: data
# nested deeper than this could be received but never saved or shown.
MAX_DEPTH: Final = 64

DEFAULT_AUDIO_PARAMS: Final[dict[str, Any]] = {
    "format": "opus",
    "sample_rate": SPEAKER_SAMPLE_RATE,
    "channels": 1,
    "frame_duration": FRAME_DURATION_MS,
}

_ERROR_ID = re.compile(rb'"id"\s*:\s*(\d{1,18})\s*,\s*"error"\s*:\s*\{')
_MESSAGE_START = re.compile(rb'"message"\s*:\s*"')
_TYPE_MCP = re.compile(rb'"type"\s*:\s*"mcp"')


def loads(data: str | bytes) -> Any:
    """Decode JSON, raising :class:`ProtocolError` on any malformed input."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        raise ProtocolError(f"invalid JSON: {err}") from None


def dumps(obj: Any) -> str:
    """Encode a frame as compact JSON text.

    Raises :class:`ProtocolError` for what JSON cannot hold (bytes, integers
    beyond 64 bits, keys that are not strings, unpaired surrogates...).
    """
    try:
        return orjson.dumps(obj).decode()
    except orjson.JSONEncodeError as err:
        raise ProtocolError(f"cannot encode frame: {err}") from None


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Return True when lists and objects in ``value`` nest over ``limit`` levels."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        below: list[Any] = []
        for node in level:
            children = node.values() if isinstance(node, dict) else node
            below.extend(child for child in children if isinstance(child, (dict, list)))
        if not below:
            return False
        level = below
    return True


def json_too_deep(text: str, value: Any, limit: int = MAX_DEPTH) -> bool:
    """Return ``too_deep(value, limit)`` for ``value`` decoded from ``text``.

    Every level of nesting opens with ``{`` or ``[``, so JSON text holding no
    more of them than ``limit`` cannot nest deeper: counting them is much
    cheaper than walking the value, and settles almost every frame.
    """
    if text.count("{") + text.count("[") <= limit:
        return False
    return too_deep(value, limit)


def parse_frame(text: str) -> dict[str, Any]:
    """Parse one text frame into a dict that has a string ``type``."""
    if len(text) > MAX_TEXT_FRAME:
        raise ProtocolError(f"frame of {len(text)} characters is too large")
    frame = loads(text)
    if not isinstance(frame, dict):
        raise ProtocolError("frame is not a JSON object")
    if json_too_deep(text, frame):
        raise ProtocolError(f"frame nests deeper than {MAX_DEPTH} levels")
    if not isinstance(frame.get("type"), str):
        raise ProtocolError("frame has no type")
    return frame


def recover_error_reply(text: str) -> tuple[int, str] | None:
    """Find the id and message in an MCP error frame that is not valid JSON.

    The firmware builds error replies by concatenating strings without
    escaping the message, so a quote in the message breaks the JSON. The id
    comes before the message and is still readable.
    """
    if len(text) > MAX_TEXT_FRAME:
        return None
    raw = text.encode("utf-8", "replace")
    if not _TYPE_MCP.search(raw):
        return None
    id_match = _ERROR_ID.search(raw)
    if id_match is None:
        return None
    message = text
    start = raw.find(b'"message"', id_match.end())
    head = _MESSAGE_START.match(raw, start) if start >= 0 else None
    if head is not None:
        # The message runs to the quote before the closing braces of the
        # error, the payload and the frame.
        tail = raw
        for _ in range(3):
            tail = tail.rstrip()
            if tail.endswith(b"}"):
                tail = tail[:-1]
        tail = tail.rstrip()
        if tail.endswith(b'"') and len(tail) > head.end():
            message = tail[head.end() : -1].decode("utf-8", "replace")
    return int(id_match.group(1)), message


@dataclass(slots=True, frozen=True, kw_only=True)
class DeviceHello:
    """What the device says about itself in its first frame."""

    version: int
    transport: str
    features: dict[str, Any] = field(default_factory=dict)
    audio_params: dict[str, Any] = field(default_factory=dict)

    @property
    def supports_mcp(self) -> bool:
        """Return True when the device announced an MCP server."""
        return self.features.get("mcp") is True

    @classmethod
    def from_frame(cls, frame: dict[str, Any]) -> Self:
        """Read a hello frame, tolerating missing optional parts."""
        if frame.get("type") != "hello":
            raise ProtocolError(f"expected hello, got {frame.get('type')!r}")
        version = frame.get("version", 1)
        features = frame.get("features")
        audio_params = frame.get("audio_params")
        transport = frame.get("transport", "websocket")
        return cls(
            version=version
            if isinstance(version, int) and not isinstance(version, bool)
            else 1,
            transport=transport if isinstance(transport, str) else "websocket",
            features=features if isinstance(features, dict) else {},
            audio_params=audio_params if isinstance(audio_params, dict) else {},
        )


def server_hello(
    session_id: str, audio_params: dict[str, Any], transport: dict[str, Any]
) -> dict[str, Any]:
    """Build the server's hello.

    ``transport`` holds what the transport adds, ``transport`` itself at
    least: the firmware reads that key without a check and crashes without it.
    """
    if not isinstance(transport.get("transport"), str):
        raise TypeError("the server hello needs a transport")
    return {
        "type": "hello",
        **transport,
        "session_id": session_id,
        "audio_params": audio_params,
    }


def notify_frame(audio_url: str, text: str) -> dict[str, Any]:
    """Have an idle device fetch and play a sound, showing ``text`` meanwhile.

    ``subtitles`` is always an array, empty without text: the firmware takes
    it as optional, but forks that parse it drop the whole message when it is
    anything else.
    """
    subtitles = [{"start_ms": 0, "text": text}] if text else []
    return {"type": "notify", "audio_url": audio_url, "subtitles": subtitles}


def goodbye_frame(session_id: str) -> dict[str, Any]:
    """Close the device's audio channel (MQTT + UDP); the exact id is required."""
    return {"type": "goodbye", "session_id": session_id}


def mcp_frame(session_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Wrap a JSON-RPC payload for the device."""
    return {"session_id": session_id, "type": "mcp", "payload": payload}


def alert_frame(
    session_id: str, status: str, message: str, emotion: str = "neutral"
) -> dict[str, Any]:
    """Build an alert: the device shows ``status`` and ``message`` on screen."""
    return {
        "session_id": session_id,
        "type": "alert",
        "status": status,
        "message": message,
        "emotion": emotion,
    }


def tts_frame(session_id: str, state: str, text: str | None = None) -> dict[str, Any]:
    """Build a ``tts`` frame: ``start``, ``stop`` or ``sentence_start`` (+ text)."""
    frame: dict[str, Any] = {"session_id": session_id, "type": "tts", "state": state}
    if text is not None:
        frame["text"] = text
    return frame


def stt_frame(session_id: str, text: str) -> dict[str, Any]:
    """Build an ``stt`` frame: the device shows what it heard."""
    return {"session_id": session_id, "type": "stt", "text": text}


def llm_frame(session_id: str, emotion: str) -> dict[str, Any]:
    """Build an ``llm`` frame: the device shows an emotion.

    The firmware reads ``emotion``; clients such as xiaozhi-sdk also want
    ``text``, the emoji of that emotion.
    """
    return {
        "session_id": session_id,
        "type": "llm",
        "text": emoji_for(emotion),
        "emotion": emotion,
    }
