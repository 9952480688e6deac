"""What every device-facing HTTP view reads and answers the same way."""

from http import HTTPStatus
from typing import Any

from aiohttp import web
import orjson

from ..const import MAX_OTA_BODY
from ..pairing.manager import normalize_client_id, normalize_mac


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


async def read_json(request: web.Request) -> dict[str, Any] | web.Response:
    """Read a small JSON object body, or return the error response."""
    if request.content_length is not None and request.content_length > MAX_OTA_BODY:
        return error_response(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Body too large")
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > MAX_OTA_BODY:
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
