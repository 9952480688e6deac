"""The devices' WebSocket: the bearer token selects the device.

A paired device gets a session on its runtime. A client that connects with
the token handed out with its pairing code (before it is paired) gets a
session with the restricted handler of ``pairing/unpaired.py``, one link at
a time. Wrong credentials count towards the address's failed logins.
"""

from http import HTTPStatus
from typing import Final

from aiohttp import web
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView

from ..const import LOGGER, MAX_OTA_BODY, URL_WEBSOCKET
from ..pairing.identity import Credentials, Refusal, async_bind, authenticate
from ..pairing.manager import PairingManager
from ..pairing.unpaired import UnpairedHandler
from ..protocol import DeviceSession
from ..protocol.http import bearer_token, client_id, device_mac, error_response
from ..protocol.websocket import WebSocketLink, serve_device
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
        entry = authenticate(hass, Credentials(token=token, mac=mac, client_id=client))
        if entry is Refusal.BAD_TOKEN and (
            pending := self._pairing.pending_with_token(token, mac, client)
        ):
            if pending.linked:
                return error_response(
                    HTTPStatus.CONFLICT, "This client is connected already"
                )
            pending.linked = True

            def unpaired(link: WebSocketLink) -> DeviceSession:
                LOGGER.info(
                    "%s connected before it is paired; showing its code",
                    pending.name,
                )
                handler = UnpairedHandler(hass, pending)
                session = DeviceSession(
                    link, handler, vision_url="", keepalive_interval=None, mcp=False
                )
                handler.attach(session)
                return session

            try:
                return await serve_device(request, unpaired, max_message=MAX_OTA_BODY)
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
        base = device_base_url(hass, str(request.url.origin()))

        def paired(link: WebSocketLink) -> DeviceSession:
            LOGGER.debug("%s opened a WebSocket from %s", runtime.name, request.remote)
            return runtime.async_open_session(
                link,
                self._uploads.for_device(base, runtime.entry_data.mac),
                client_id=client,
                protocol_version=link.protocol_version,
            )

        return await serve_device(request, paired)
