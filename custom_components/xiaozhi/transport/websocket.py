"""The devices' WebSocket: the bearer token selects the device.

A paired device gets a session on its runtime. A client that connects with
the token handed out with its pairing code (before it is paired) gets a
session with the restricted handler of ``pairing/unpaired.py``, one link at
a time. Wrong credentials count towards the address's failed logins.
"""

from http import HTTPStatus
from typing import Any, Final

from aiohttp import WSMsgType, web
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from ..const import LOGGER, MAX_OTA_BODY, MAX_WS_MESSAGE, URL_WEBSOCKET
from ..pairing.identity import Credentials, Refusal, async_bind, authenticate
from ..pairing.manager import PairingManager
from ..pairing.unpaired import UnpairedHandler
from ..protocol import (
    DeviceSession,
    ProtocolError,
    pack_audio,
    parse_protocol_version,
    unpack_audio,
)
from ..protocol.messages import DeviceHello
from .http import bearer_token, client_id, device_mac, error_response
from .logins import FailedLogins
from .uploads import UploadViews
from .urls import device_base_url

_REFUSALS: Final = {
    Refusal.BAD_TOKEN: (HTTPStatus.UNAUTHORIZED, "Invalid token"),
    Refusal.WRONG_DEVICE: (HTTPStatus.UNAUTHORIZED, "Device-Id does not match"),
    Refusal.WRONG_CLIENT: (HTTPStatus.UNAUTHORIZED, "Client-Id does not match"),
    Refusal.DISABLED: (HTTPStatus.FORBIDDEN, "Device is disabled in Home Assistant"),
    Refusal.NOT_LOADED: (
        HTTPStatus.SERVICE_UNAVAILABLE,
        "Device is not loaded in Home Assistant",
    ),
}


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


class DeviceWebSocketView(HomeAssistantView):
    """The devices' WebSocket."""

    url = URL_WEBSOCKET
    name = "api:xiaozhi:websocket"
    requires_auth = False

    def __init__(
        self, pairing: PairingManager, logins: FailedLogins, uploads: UploadViews
    ) -> None:
        """Serve with the instance's pairing, failed logins and one-time URLs."""
        self._pairing = pairing
        self._logins = logins
        self._uploads = uploads

    async def get(self, request: web.Request) -> web.StreamResponse:
        """Authenticate the device, then serve its link."""
        hass = request.app[KEY_HASS]
        logins = self._logins
        if logins.blocked(request.remote):
            return error_response(HTTPStatus.FORBIDDEN, "Too many wrong credentials")
        client = client_id(request)
        token, mac = bearer_token(request), device_mac(request)
        version = parse_protocol_version(request.headers.get("Protocol-Version"))
        entry = authenticate(hass, Credentials(token=token, mac=mac, client_id=client))
        if entry is Refusal.BAD_TOKEN and (
            pending := self._pairing.pending_with_token(token, mac, client)
        ):
            if pending.linked:
                return error_response(
                    HTTPStatus.CONFLICT, "This client is connected already"
                )
            pending.linked = True
            try:
                ws = await self._prepare(request, MAX_OTA_BODY)
                LOGGER.info(
                    "%s connected before it is paired; showing its code",
                    pending.name,
                )
                handler = UnpairedHandler(hass, pending)
                session = DeviceSession(
                    WebSocketLink(ws, request.remote, version),
                    handler,
                    vision_url="",
                    keepalive_interval=None,
                    mcp=False,
                )
                handler.attach(session)
                return await self._serve(ws, session, version)
            finally:
                pending.linked = False
        if isinstance(entry, Refusal):
            if entry.failed_login:
                logins.failed(request.remote, f"WebSocket: {entry}")
            status, message = _REFUSALS[entry]
            return error_response(status, message)
        async_bind(hass, entry, client)
        logins.succeeded(request.remote)
        runtime = entry.runtime_data
        ws = await self._prepare(request, MAX_WS_MESSAGE)
        LOGGER.debug("%s opened a WebSocket from %s", runtime.name, request.remote)
        base = device_base_url(hass, str(request.url.origin()))
        session = runtime.async_open_session(
            WebSocketLink(ws, request.remote, version),
            self._uploads.for_device(base, runtime.entry_data.mac),
            client_id=client,
            protocol_version=version,
        )
        return await self._serve(ws, session, version)

    @staticmethod
    async def _prepare(request: web.Request, max_message: int) -> web.WebSocketResponse:
        # No WebSocket heartbeat: some firmware does not answer pings.
        ws = web.WebSocketResponse(
            heartbeat=None,
            autoping=True,
            compress=False,
            max_msg_size=max_message,
            timeout=2.0,
        )
        await ws.prepare(request)
        return ws

    @staticmethod
    async def _serve(
        ws: web.WebSocketResponse, session: DeviceSession, version: int
    ) -> web.WebSocketResponse:
        """Feed the session what arrives until the WebSocket closes."""
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
                    LOGGER.warning("WebSocket error: %s", ws.exception())
        finally:
            await session.connection_lost()
        return ws
