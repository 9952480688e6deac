"""The device WebSocket as a plain aiohttp handler.

A device dials ``ws://…/xiaozhi/v1/`` with its token, MAC, Client-Id and
protocol version in headers (``http.py`` reads them). Who may connect is the
server's decision; once it has decided, :func:`serve_device` upgrades the
request, wraps the WebSocket as the session's :class:`~.link.Link` and feeds
the session every frame until the device goes::

    async def handler(request: web.Request) -> web.StreamResponse:
        if bearer_token(request) != TOKEN:
            return error_response(HTTPStatus.UNAUTHORIZED, "Invalid token")
        return await serve_device(
            request, lambda link: DeviceSession(link, owner, vision_url="")
        )
"""

from collections.abc import Callable
import logging
from typing import Any, Final

from aiohttp import WSMsgType, web

from .audio import pack_audio, parse_protocol_version, unpack_audio
from .errors import ProtocolError
from .messages import DeviceHello
from .session import DeviceSession

_LOGGER = logging.getLogger(__name__)

# What a device may send in one WebSocket message (a tool list, an image).
MAX_MESSAGE: Final = 1024 * 1024


class WebSocketLink:
    """A device's WebSocket, as the session's link."""

    transport = "websocket"
    always_on = False

    def __init__(
        self, ws: web.WebSocketResponse, remote: str | None, protocol_version: int
    ) -> None:
        """Wrap a prepared WebSocket."""
        self._ws = ws
        self._remote = remote
        self.protocol_version = protocol_version

    @property
    def remote(self) -> str | None:
        """Return the device's address."""
        return self._remote

    def open_audio(self, hello: DeviceHello) -> dict[str, Any]:
        """Return what the server hello says: audio flows on this WebSocket."""
        return {"transport": "websocket"}

    def close_audio(self) -> None:
        """Nothing to close apart from the WebSocket itself."""

    async def send_text(self, text: str) -> None:
        """Send a text frame."""
        await self._ws.send_str(text)

    async def send_audio(self, payload: bytes, timestamp: int) -> None:
        """Send an Opus packet framed for the connection's protocol version."""
        await self._ws.send_bytes(pack_audio(payload, self.protocol_version, timestamp))

    async def close(self, message: str) -> None:
        """Close the WebSocket."""
        await self._ws.close(code=1000, message=message.encode()[:120])


async def serve_device(
    request: web.Request,
    open_session: Callable[[WebSocketLink], DeviceSession],
    *,
    max_message: int = MAX_MESSAGE,
) -> web.WebSocketResponse:
    """Upgrade an accepted device's request and serve its session until it ends.

    ``open_session`` gets the link once the WebSocket is open and returns the
    session to feed; the session is started here and learns when the
    connection is lost.
    """
    version = parse_protocol_version(request.headers.get("Protocol-Version"))
    # No WebSocket heartbeat: some firmware does not answer pings.
    ws = web.WebSocketResponse(
        heartbeat=None,
        autoping=True,
        compress=False,
        max_msg_size=max_message,
        timeout=2.0,
    )
    await ws.prepare(request)
    session = open_session(WebSocketLink(ws, request.remote, version))
    session.start()
    try:
        async for message in ws:
            if message.type is WSMsgType.TEXT:
                session.feed_text(message.data)
            elif message.type is WSMsgType.BINARY:
                try:
                    payload = unpack_audio(message.data, version)
                except ProtocolError as err:
                    session.malformed_audio(err)
                else:
                    session.feed_audio(payload)
            elif message.type is WSMsgType.ERROR:
                _LOGGER.warning("WebSocket error: %s", ws.exception())
    finally:
        await session.connection_lost()
    return ws
