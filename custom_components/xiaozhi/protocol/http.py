"""What every device-facing HTTP endpoint reads and answers the same way.

A device names itself in headers: ``Device-Id`` (its MAC), ``Client-Id``
(a UUID it keeps) and, on its WebSocket, ``Authorization: Bearer <token>``
and ``Protocol-Version``. Its OTA check-in and activation carry a small JSON
body. Everything here takes what a device sent as hostile: bounded, and
normalized or refused.
"""

from http import HTTPStatus
import re
from typing import Any, Final

from aiohttp import web
import orjson

# The OTA check-in and activation bodies: a few kilobytes of system info.
MAX_BODY: Final = 64 * 1024
MAX_CLIENT_ID: Final = 64
_MAC: Final = re.compile(r"^[0-9a-f]{2}([:-]?)[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")
_CLIENT_ID: Final = re.compile(r"^[\x21-\x7e]+$")


def normalize_mac(value: str | None) -> str | None:
    """Return ``aa:bb:cc:dd:ee:ff`` for any common MAC spelling, else None."""
    if value is None:
        return None
    value = value.strip().lower()
    if not _MAC.match(value):
        return None
    digits = value.replace(":", "").replace("-", "")
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def normalize_client_id(value: str | None) -> str | None:
    """Return a usable ``Client-Id`` (printable, no spaces, bounded), else None."""
    if value is None:
        return None
    value = value.strip()
    if not 0 < len(value) <= MAX_CLIENT_ID or not _CLIENT_ID.match(value):
        return None
    return value


def error_response(status: HTTPStatus, message: str) -> web.Response:
    """Return a JSON error a device (or a person debugging it) can read."""
    return web.json_response(
        {"error": message}, status=status, dumps=lambda obj: orjson.dumps(obj).decode()
    )


def bearer_token(request: web.Request) -> str | None:
    """Return the bearer token of a request, if any."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def device_mac(request: web.Request) -> str | None:
    """Return the ``Device-Id`` header as a MAC address, if it is one."""
    return normalize_mac(request.headers.get("Device-Id"))


def client_id(request: web.Request) -> str | None:
    """Return a usable ``Client-Id`` header, if any."""
    return normalize_client_id(request.headers.get("Client-Id"))


async def read_json(
    request: web.Request, limit: int = MAX_BODY
) -> dict[str, Any] | web.Response:
    """Read a small JSON object body, or return the error response."""
    if request.content_length is not None and request.content_length > limit:
        return error_response(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Body too large")
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > limit:
            return error_response(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Body too large")
    if not body.strip():
        return {}
    try:
        info = orjson.loads(body)
    except orjson.JSONDecodeError:
        return error_response(HTTPStatus.BAD_REQUEST, "Body is not valid JSON")
    if not isinstance(info, dict):
        return error_response(HTTPStatus.BAD_REQUEST, "Body is not a JSON object")
    return info
