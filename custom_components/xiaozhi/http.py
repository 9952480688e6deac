"""HTTP endpoints the devices talk to: OTA check, activation, WebSocket, vision.

The views are registered once (aiohttp routes cannot be removed) and find the
device's config entry for every request. They own what touches HTTP: the
WebSocket and its read loop, and the upload URLs handed to devices.
"""

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
import secrets
from typing import Any, Final

from aiohttp import BodyPartReader, WSMsgType, web
from aiohttp.http import HttpProcessingError
from homeassistant.components.http.ban import process_wrong_login
from homeassistant.config_entries import SOURCE_IGNORE, ConfigEntryState
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.util import dt as dt_util
import orjson
from yarl import URL

from .const import (
    CONF_TOKEN,
    DOMAIN,
    LOGGER,
    MAX_OTA_BODY,
    MAX_PHOTO_BYTES,
    MAX_WS_MESSAGE,
    URL_ACTIVATE,
    URL_CLIP,
    URL_OTA,
    URL_SNAPSHOT,
    URL_VISION,
    URL_WEBSOCKET,
)
from .data import DATA_KEY
from .helpers import async_device_text, device_base_url
from .identity import (
    Credentials,
    Refusal,
    async_bind,
    authenticate,
    client_matches,
)
from .manager import XiaozhiConfigEntry, XiaozhiManager
from .pairing import PendingDevice, normalize_client_id, normalize_mac, same_secret
from .protocol import ProtocolError, pack_audio, parse_protocol_version, unpack_audio
from .protocol.messages import (
    DEFAULT_AUDIO_PARAMS,
    DeviceHello,
    alert_frame,
    dumps,
    parse_frame,
    server_hello,
    tts_frame,
)
from .protocol.voice import TTS_START_SETTLE
from .voice import async_speech, play_audio, stream_pcm

JPEG_MAGIC: Final = b"\xff\xd8\xff"
VISION_ANSWER: Final = "Photo received by Home Assistant."


@dataclass(frozen=True, slots=True)
class UrlViews:
    """The views that serve one-time URLs handed to devices."""

    snapshots: SnapshotView
    clips: ClipView


@callback
def async_setup_http(hass: HomeAssistant) -> UrlViews:
    """Register the device endpoints (once per instance: routes stay).

    Returns the views minting one-time URLs, which every transport uses.
    """
    views = UrlViews(SnapshotView(), ClipView())
    hass.http.register_view(OtaView())
    hass.http.register_view(ActivateView())
    hass.http.register_view(DeviceWebSocketView(views))
    hass.http.register_view(VisionView())
    hass.http.register_view(views.snapshots)
    hass.http.register_view(views.clips)
    return views


def base_url(hass: HomeAssistant, request: web.Request) -> str:
    """Return the address devices use to reach Home Assistant (see helpers)."""
    return device_base_url(hass, str(request.url.origin()))


def websocket_block(
    hass: HomeAssistant, request: web.Request, token: str
) -> dict[str, Any]:
    """Return the OTA answer's ``websocket`` block for a device with ``token``."""
    return {"url": websocket_url(hass, request), "token": token, "version": 1}


def websocket_url(hass: HomeAssistant, request: web.Request) -> str:
    """Return the WebSocket URL a device should dial."""
    url = base_url(hass, request)
    if url.startswith("https://"):
        url = "wss://" + url.removeprefix("https://")
    elif url.startswith("http://"):
        url = "ws://" + url.removeprefix("http://")
    return url.rstrip("/") + URL_WEBSOCKET


def bearer_token(request: web.Request) -> str | None:
    """Return the bearer token of a request, if any."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _error(status: HTTPStatus, message: str) -> web.Response:
    return web.json_response(
        {"error": message}, status=status, dumps=lambda obj: orjson.dumps(obj).decode()
    )


def _server_time() -> dict[str, int]:
    now = dt_util.now()
    offset = now.utcoffset()
    return {
        "timestamp": int(now.timestamp() * 1000),
        "timezone_offset": int(offset.total_seconds() // 60) if offset else 0,
    }


async def _read_json(request: web.Request) -> dict[str, Any] | web.Response:
    """Read a small JSON object body, or return the error response."""
    if request.content_length is not None and request.content_length > MAX_OTA_BODY:
        return _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Body too large")
    body = bytearray()
    async for chunk in request.content.iter_any():
        body += chunk
        if len(body) > MAX_OTA_BODY:
            return _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Body too large")
    if not body.strip():
        return {}
    try:
        info = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _error(HTTPStatus.BAD_REQUEST, "Body is not valid JSON")
    if not isinstance(info, dict):
        return _error(HTTPStatus.BAD_REQUEST, "Body is not a JSON object")
    return info


def _device_mac(request: web.Request) -> str | None:
    return normalize_mac(request.headers.get("Device-Id"))


def _client_id(request: web.Request) -> str | None:
    return normalize_client_id(request.headers.get("Client-Id"))


async def _read_check_in(
    request: web.Request,
) -> tuple[str, str, dict[str, Any]] | web.Response:
    """Return the identity and body of an OTA or activation request, or the error.

    Both headers are required: a device is its MAC and its Client-Id.
    """
    mac = _device_mac(request)
    if mac is None:
        return _error(HTTPStatus.BAD_REQUEST, "Missing or invalid Device-Id header")
    client_id = _client_id(request)
    if client_id is None:
        return _error(HTTPStatus.BAD_REQUEST, "Missing or invalid Client-Id header")
    info = await _read_json(request)
    if isinstance(info, web.Response):
        return info
    return mac, client_id, info


def _describe(info: dict[str, Any], request: web.Request) -> tuple[str, str]:
    """Return the board name and firmware version a device reports."""
    board = info.get("board")
    application = info.get("application")
    name: Any = None
    if isinstance(board, dict):
        name = board.get("name") or board.get("type")
    version = application.get("version") if isinstance(application, dict) else None
    agent = request.headers.get("User-Agent", "")
    agent_board, _, agent_version = agent.partition("/")
    board_name = name if isinstance(name, str) and name else agent_board or "device"
    firmware = version if isinstance(version, str) and version else agent_version
    return board_name[:64], firmware[:32]


class OtaView(HomeAssistantView):
    """The device's OTA check: hands out pairing codes and, once paired, its link."""

    url = URL_OTA
    extra_urls = [URL_OTA.rstrip("/")]  # noqa: RUF012 - as declared by the base
    name = "api:xiaozhi:ota"
    requires_auth = False

    async def post(self, request: web.Request) -> web.Response:
        """Answer a device's check-in.

        The paired identity gets its link; any other identity, even with a
        paired MAC (a device reset to factory settings, or someone copying
        its MAC), gets a pairing code and never the token.
        """
        hass = request.app[KEY_HASS]
        check_in = await _read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        mac, client_id, info = check_in
        answer: dict[str, Any] = {"server_time": _server_time()}
        entry = hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, mac)
        if entry is not None:
            if entry.source == SOURCE_IGNORE:
                return _error(HTTPStatus.FORBIDDEN, "Device is ignored")
            if entry.disabled_by is not None:
                return _error(HTTPStatus.FORBIDDEN, "Device is disabled")
            if client_matches(entry, client_id):
                # The firmware prefers mqtt when both are there; clients that
                # speak only WebSocket take that block.
                mqtt = hass.data[DATA_KEY].endpoints.ota_block(
                    URL(base_url(hass, request)).host, entry, client_id
                )
                if mqtt is not None:
                    answer["mqtt"] = mqtt
                answer["websocket"] = websocket_block(
                    hass, request, entry.data[CONF_TOKEN]
                )
                return self.json(answer)
        board, firmware = _describe(info, request)
        pending = hass.data[DATA_KEY].pairing.check_in(
            mac=mac,
            client_id=client_id,
            address=request.remote or "unknown",
            board=board,
            firmware=firmware,
            paired=entry is not None,
        )
        if pending is None:
            return _error(
                HTTPStatus.TOO_MANY_REQUESTS, "Too many devices are waiting to pair"
            )
        answer["activation"] = {
            "code": pending.code,
            "message": f"Home Assistant\n{pending.code}",
            "challenge": pending.challenge,
            "timeout_ms": int(pending.remaining() * 1000),
        }
        # Clients that connect before they are paired (xiaozhi-sdk) need a
        # link now; it is restricted to showing the code until the user
        # enters it, and then its token is the device's.
        answer["websocket"] = websocket_block(hass, request, pending.token)
        return self.json(answer)


class ActivateView(HomeAssistantView):
    """Polled by a device while its code is shown: 202 pending, 200 paired."""

    url = URL_ACTIVATE
    name = "api:xiaozhi:activate"
    requires_auth = False

    async def post(self, request: web.Request) -> web.Response:
        """Tell the device whether the user entered its code."""
        hass = request.app[KEY_HASS]
        check_in = await _read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        mac, client_id, _info = check_in
        if hass.data[DATA_KEY].pairing.get(mac, client_id) is not None:
            return self.json({"status": "pending"}, HTTPStatus.ACCEPTED)
        entry = hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, mac)
        if (
            entry is not None
            and entry.source != SOURCE_IGNORE
            and client_matches(entry, client_id)
        ):
            if entry.state is not ConfigEntryState.LOADED:
                # A client that connects at once must find the device ready.
                return self.json({"status": "pending"}, HTTPStatus.ACCEPTED)
            return self.json({"status": "activated"})
        return _error(HTTPStatus.NOT_FOUND, "No pairing in progress for this device")


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


async def _refuse(request: web.Request, refusal: Refusal) -> web.Response:
    """Answer a refused device; wrong credentials count towards the IP ban."""
    if refusal.failed_login:
        await process_wrong_login(request)
    status, message = _REFUSALS[refusal]
    return _error(status, message)


def loaded_manager(hass: HomeAssistant, mac: str | None) -> XiaozhiManager | None:
    """Return the runtime of the loaded device with this MAC, if any."""
    if mac is None:
        return None
    entry: XiaozhiConfigEntry | None = (
        hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, mac)
    )
    if entry is None or entry.state is not ConfigEntryState.LOADED:
        return None
    return entry.runtime_data


class WebSocketLink:
    """A device's WebSocket, as the session's link."""

    transport = "websocket"

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

    always_on = False

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


class DeviceUploads:
    """Upload URLs for one device, on the address it reached us with."""

    def __init__(self, base: str, views: UrlViews, mac: str) -> None:
        """Remember where uploads go."""
        self.vision_url = base + URL_VISION
        self._base = base
        self._views = views
        self._mac = mac

    def mint_snapshot_url(self) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time screen picture URL and the callback revoking it."""
        return self._views.snapshots.mint(self._base, self._mac)

    def mint_clip_url(self, audio: bytes) -> tuple[str, asyncio.Event, CALLBACK_TYPE]:
        """Return a one-time URL serving ``audio`` (Ogg Opus) to the device.

        The event is set once the device has fetched it.
        """
        return self._views.clips.mint(self._base, audio)


class DeviceWebSocketView(HomeAssistantView):
    """The devices' WebSocket: the bearer token selects the config entry."""

    url = URL_WEBSOCKET
    name = "api:xiaozhi:websocket"
    requires_auth = False

    def __init__(self, views: UrlViews) -> None:
        """Mint one-time URLs with ``views``."""
        self._views = views

    async def get(self, request: web.Request) -> web.StreamResponse:
        """Authenticate the device, then serve its conversation."""
        hass = request.app[KEY_HASS]
        client_id = _client_id(request)
        token, mac = bearer_token(request), _device_mac(request)
        entry = authenticate(
            hass, Credentials(token=token, mac=mac, client_id=client_id)
        )
        if entry is Refusal.BAD_TOKEN and (
            pending := hass.data[DATA_KEY].pairing.pending_with_token(
                token, mac, client_id
            )
        ):
            return await _serve_unpaired(request, pending)
        if isinstance(entry, Refusal):
            return await _refuse(request, entry)
        async_bind(hass, entry, client_id)
        manager = entry.runtime_data
        ws = web.WebSocketResponse(
            heartbeat=None,
            autoping=True,
            compress=False,
            max_msg_size=MAX_WS_MESSAGE,
            timeout=2.0,
        )
        await ws.prepare(request)
        LOGGER.debug("%s opened a WebSocket from %s", manager.name, request.remote)
        version = parse_protocol_version(request.headers.get("Protocol-Version"))
        link = WebSocketLink(ws, request.remote, version)
        uploads = DeviceUploads(base_url(hass, request), self._views, manager.mac)
        session = manager.async_open_session(
            link,
            uploads,
            client_id=client_id,
            protocol_version=version,
        )
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
                    LOGGER.warning(
                        "%s: WebSocket error: %s", manager.name, ws.exception()
                    )
        finally:
            await session.connection_lost()
        return ws


async def _serve_unpaired(
    request: web.Request, pending: PendingDevice
) -> web.WebSocketResponse:
    """Serve a client that connected before it is paired: its code, nothing else.

    The code is shown (``alert``, the sentence) and, when the preferred voice
    assistant has text-to-speech, spoken. The link ends when the code is
    entered (the client connects again with the same token, now the
    device's) or when the code expires.
    """
    hass = request.app[KEY_HASS]
    ws = web.WebSocketResponse(
        heartbeat=None, compress=False, max_msg_size=MAX_OTA_BODY, timeout=2.0
    )
    await ws.prepare(request)
    LOGGER.info("%s connected before it is paired; showing its code", pending.name)
    link = WebSocketLink(
        ws,
        request.remote,
        parse_protocol_version(request.headers.get("Protocol-Version")),
    )
    session_id = secrets.token_hex(8)
    text = await async_device_text(hass, "pairing_code", {"code": pending.code})
    # Digit by digit: "1 2 3", not "one hundred and twenty-three".
    spoken = await async_device_text(
        hass, "pairing_code", {"code": " ".join(pending.code)}
    )
    speaker: asyncio.Task[None] | None = None

    async def say_code() -> None:
        await link.send_text(dumps(tts_frame(session_id, "start")))
        await link.send_text(dumps(tts_frame(session_id, "sentence_start", text)))
        try:
            if (speech := async_speech(hass, spoken)) is not None:
                rate = DEFAULT_AUDIO_PARAMS["sample_rate"]
                frame_ms = DEFAULT_AUDIO_PARAMS["frame_duration"]
                await play_audio(
                    link.send_audio,
                    stream_pcm(hass, speech, rate),
                    name=pending.name,
                    rate=rate,
                    frame_ms=frame_ms,
                    not_before=hass.loop.time() + TTS_START_SETTLE,
                )
        except HomeAssistantError as err:
            LOGGER.debug("%s: pairing code not spoken: %s", pending.name, err)
        finally:
            if not ws.closed:
                await link.send_text(dumps(tts_frame(session_id, "stop")))

    async def show_code() -> None:
        nonlocal speaker
        if speaker is not None:
            speaker.cancel()
        await link.send_text(
            dumps(alert_frame(session_id, "Home Assistant", text, "neutral"))
        )
        speaker = asyncio.create_task(say_code())

    async def read() -> None:
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                continue  # its microphone: nobody listens before pairing
            try:
                frame = parse_frame(message.data)
            except ProtocolError:
                continue
            if frame["type"] == "hello":
                hello = server_hello(
                    session_id, DEFAULT_AUDIO_PARAMS, {"transport": "websocket"}
                )
                await link.send_text(dumps(hello))
                await show_code()
            elif frame["type"] == "listen" and frame.get("state") == "detect":
                await show_code()

    reader = asyncio.create_task(read())
    ended = asyncio.create_task(pending.ended.wait())
    try:
        await asyncio.wait({reader, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        tasks = [reader, ended] if speaker is None else [reader, ended, speaker]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close(code=1000, message=b"pairing ended")
    return ws


class VisionView(HomeAssistantView):
    """Photos from the device camera, authorised by the session's vision token."""

    url = URL_VISION
    name = "api:xiaozhi:vision"
    requires_auth = False

    async def post(self, request: web.Request) -> web.Response:
        """Store the uploaded photo for the device's image entity."""
        hass = request.app[KEY_HASS]
        manager = loaded_manager(hass, _device_mac(request))
        session = manager.session if manager is not None else None
        if (
            manager is None
            or session is None
            or not same_secret(session.vision_token, bearer_token(request))
            or not client_matches(manager.entry, _client_id(request))
        ):
            await process_wrong_login(request)
            return _error(HTTPStatus.UNAUTHORIZED, "Invalid vision token")
        if (
            request.content_length is not None
            and request.content_length > MAX_PHOTO_BYTES + MAX_OTA_BODY
        ):
            return _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Photo too large")
        upload = await _receive_picture(request, manager, "photo")
        if isinstance(upload, web.Response):
            return upload
        question, photo = upload
        manager.async_store_picture("photo", photo, "image/jpeg", question)
        return web.Response(text=VISION_ANSWER)


class OneTimeTokens[T]:
    """Secrets that each unlock one value once (the views' one-time URLs)."""

    def __init__(self) -> None:
        """Start with none handed out."""
        self._values: dict[str, T] = {}

    def add(self, value: T) -> tuple[str, CALLBACK_TYPE]:
        """Return a new token for ``value`` and the callback revoking it."""
        token = secrets.token_urlsafe(24)
        self._values[token] = value

        @callback
        def revoke() -> None:
            self._values.pop(token, None)

        return token, revoke

    def take(self, token: str) -> T | None:
        """Return the token's value and forget it; None if unknown or used."""
        return self._values.pop(token, None)


class SnapshotView(HomeAssistantView):
    """Screen pictures, uploaded to one-time URLs this view mints."""

    url = URL_SNAPSHOT + "/{token}"
    name = "api:xiaozhi:snapshot"
    requires_auth = False

    def __init__(self) -> None:
        """Start with no URL handed out."""
        self._tokens = OneTimeTokens[str]()

    def mint(self, base: str, mac: str) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time upload URL for ``mac`` and the callback revoking it."""
        token, revoke = self._tokens.add(mac)
        return f"{base}{URL_SNAPSHOT}/{token}", revoke

    async def post(self, request: web.Request, token: str) -> web.Response:
        """Store the uploaded screen picture."""
        hass = request.app[KEY_HASS]
        manager = loaded_manager(hass, self._tokens.take(token))
        if manager is None:
            await process_wrong_login(request)
            return _error(HTTPStatus.UNAUTHORIZED, "Invalid or used snapshot URL")
        upload = await _receive_picture(request, manager, "screen picture")
        if isinstance(upload, web.Response):
            return upload
        _question, picture = upload
        manager.async_store_picture("screen", picture, "image/jpeg")
        return web.Response(text="ok")


class ClipView(HomeAssistantView):
    """Sounds for the device to fetch (``notify``), at one-time URLs."""

    url = URL_CLIP + "/{token}"
    name = "api:xiaozhi:clip"
    requires_auth = False

    def __init__(self) -> None:
        """Start with nothing to serve."""
        self._clips = OneTimeTokens[tuple[bytes, asyncio.Event]]()

    def mint(self, base: str, audio: bytes) -> tuple[str, asyncio.Event, CALLBACK_TYPE]:
        """Return a one-time URL of ``audio``, its fetched event and its revoker."""
        fetched = asyncio.Event()
        token, revoke = self._clips.add((audio, fetched))
        return f"{base}{URL_CLIP}/{token}.ogg", fetched, revoke

    async def get(self, request: web.Request, token: str) -> web.Response:
        """Hand the sound to the device, once."""
        clip = self._clips.take(token.removesuffix(".ogg"))
        if clip is None:
            await process_wrong_login(request)
            return _error(HTTPStatus.NOT_FOUND, "Unknown or used sound URL")
        audio, fetched = clip
        fetched.set()
        return web.Response(body=audio, content_type="audio/ogg")


async def _receive_picture(
    request: web.Request, manager: XiaozhiManager, what: str
) -> tuple[str, bytes] | web.Response:
    """Return the question and JPEG of an upload, or the error response."""
    try:
        return await _read_photo(request)
    except (ValueError, TypeError) as err:
        LOGGER.warning("%s sent an unusable %s: %s", manager.name, what, err)
        return _error(HTTPStatus.BAD_REQUEST, str(err))
    except _TooLargeError:
        return _error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"The {what} is too large")


class _TooLargeError(Exception):
    """A part of the upload is over its limit."""


async def _read_photo(request: web.Request) -> tuple[str, bytes]:
    """Read the ``question`` and ``file`` parts of a vision upload."""
    if not request.content_type.startswith("multipart/"):
        raise ValueError("expected multipart/form-data")
    reader = await request.multipart()
    question = ""
    photo: bytes | None = None
    try:
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise TypeError("nested multipart is not supported")
            if part.name == "question":
                raw = await _read_part(part, MAX_OTA_BODY)
                question = raw.decode("utf-8", "replace")
            elif part.name == "file":
                photo = await _read_part(part, MAX_PHOTO_BYTES)
            else:
                await part.release()
    except HttpProcessingError as err:
        # The multipart parser's own errors: a part header over its limit,
        # a body cut short...
        raise ValueError(f"malformed multipart body: {err.message}") from None
    if photo is None:
        raise ValueError("no file part")
    if not photo.startswith(JPEG_MAGIC):
        raise ValueError("file is not a JPEG")
    return question, photo


async def _read_part(part: BodyPartReader, limit: int) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk():
        data += chunk
        if len(data) > limit:
            raise _TooLargeError
    return bytes(data)
