"""The OTA check-in: what a device says at boot, and the blocks of its answer.

At boot (and on every "check for updates") a device posts its system
information to its OTA address with ``Device-Id`` and ``Client-Id`` headers.
The answer (firmware ``ota.cc`` ``Ota::CheckVersion``) may hold:

- ``server_time``: the device sets its clock;
- ``firmware``: a version and URL; a newer version is flashed at once;
- ``activation``: a code to show and a challenge; the device then polls
  ``<ota>/activate`` (202: still waiting, 200: activated);
- ``mqtt`` and/or ``websocket``: where and how to connect (the firmware takes
  MQTT when both are there).

Who is paired, and with which token, is the server's business; these builders
put its decisions in the shape the firmware reads.
"""

from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, Final

from aiohttp import web

from .http import client_id, device_mac, error_response, read_json

MAX_BOARD_NAME: Final = 64
MAX_FIRMWARE: Final = 32
# The device pings about every 60 s; this is what the server allows.
MQTT_KEEPALIVE: Final = 120


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckIn:
    """A device's OTA check: its identity and what it says about itself."""

    mac: str
    client_id: str
    address: str
    info: dict[str, Any]
    user_agent: str

    def describe(self) -> tuple[str, str]:
        """Return the board name and firmware version the device reports."""
        board = self.info.get("board")
        application = self.info.get("application")
        name: Any = None
        if isinstance(board, dict):
            name = board.get("name") or board.get("type")
        version = application.get("version") if isinstance(application, dict) else None
        agent_board, _, agent_version = self.user_agent.partition("/")
        board_name = name if isinstance(name, str) and name else agent_board or "device"
        firmware = version if isinstance(version, str) and version else agent_version
        return board_name[:MAX_BOARD_NAME], firmware[:MAX_FIRMWARE]


async def read_check_in(request: web.Request) -> CheckIn | web.Response:
    """Return the check-in of an OTA or activation request, or the error.

    Both headers are required: a device is its MAC and its Client-Id.
    """
    mac = device_mac(request)
    if mac is None:
        return error_response(
            HTTPStatus.BAD_REQUEST, "Missing or invalid Device-Id header"
        )
    client = client_id(request)
    if client is None:
        return error_response(
            HTTPStatus.BAD_REQUEST, "Missing or invalid Client-Id header"
        )
    info = await read_json(request)
    if isinstance(info, web.Response):
        return info
    return CheckIn(
        mac=mac,
        client_id=client,
        address=request.remote or "unknown",
        info=info,
        user_agent=request.headers.get("User-Agent", ""),
    )


def server_time(now: datetime | None = None) -> dict[str, int]:
    """Return the ``server_time`` block: epoch milliseconds and UTC offset."""
    now = now or datetime.now().astimezone()
    offset = now.utcoffset()
    return {
        "timestamp": int(now.timestamp() * 1000),
        "timezone_offset": int(offset.total_seconds() // 60) if offset else 0,
    }


def websocket_block(url: str, token: str, version: int = 1) -> dict[str, Any]:
    """Return the ``websocket`` block: where to connect, with which token."""
    return {"url": url, "token": token, "version": version}


def topics(mac: str) -> tuple[str, str]:
    """Return a device's publish topic and the one the server uses."""
    name = mac.replace(":", "")
    return f"xiaozhi/{name}/up", f"xiaozhi/{name}/down"


def mqtt_block(
    host: str, port: int, *, mac: str, client_id: str, token: str
) -> dict[str, Any] | None:
    """Return the ``mqtt`` block for a device that logs in with its token.

    The user name is the MAC and the password the token. The firmware splits
    the endpoint at its first colon, so an IPv6 literal cannot be used: None.
    """
    if not host or ":" in host:
        return None
    up, down = topics(mac)
    return {
        "endpoint": f"{host}:{port}",
        "client_id": client_id,
        "username": mac,
        "password": token,
        "keepalive": MQTT_KEEPALIVE,
        "publish_topic": up,
        # Not read by current firmware, which never subscribes; firmware
        # 0.8 - 1.0 subscribed to it and failed without it.
        "subscribe_topic": down,
    }


def activation_block(
    code: str, challenge: str, timeout: float, message: str = ""
) -> dict[str, Any]:
    """Return the ``activation`` block: the code to show, ``timeout`` seconds."""
    return {
        "code": code,
        "message": message or code,
        "challenge": challenge,
        "timeout_ms": int(timeout * 1000),
    }


def firmware_block(version: str, url: str) -> dict[str, str]:
    """Return the ``firmware`` block: the device flashes a newer ``version``."""
    return {"version": version, "url": url}
