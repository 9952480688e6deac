"""The library's servers with its device emulator: OTA, WebSocket, MQTT + UDP.

A small server built only from ``aioxiaozhi`` pairs a ``SimulatedDevice`` and
serves it over either transport, on loopback, as a library user would.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from http import HTTPStatus
import secrets
from typing import Any

import aiohttp
from aiohttp import web
import pytest

from aioxiaozhi import (
    CloseReason,
    DeviceEvent,
    DeviceEventType,
    DeviceSession,
    serve_device,
)
from aioxiaozhi.audio.preroll import Heard
from aioxiaozhi.http import bearer_token, error_response, normalize_mac
from aioxiaozhi.mqtt.link import MqttLink
from aioxiaozhi.mqtt.packets import Connect, ConnectReturn
from aioxiaozhi.mqtt.server import MqttConnection, MqttServer
from aioxiaozhi.mqtt.udp import UdpEndpoint
from aioxiaozhi.ota import (
    activation_block,
    firmware_block,
    mqtt_block,
    read_check_in,
    server_time,
    topics,
    websocket_block,
)
from aioxiaozhi.testing import DeviceConfig, DeviceConnectionError, SimulatedDevice
from aioxiaozhi.testing.voice import MicEncoder, tone

WAIT = 5.0


class Server:
    """Pairs by code; serves WebSocket, and MQTT + UDP when ``mqtt`` is set."""

    def __init__(self) -> None:
        self.codes: dict[str, str] = {}
        self.entered: set[str] = set()
        self.tokens: dict[str, str] = {}
        self.sessions: list[DeviceSession] = []
        self.ready: list[DeviceSession] = []
        self.events: list[DeviceEvent] = []
        self.audio: list[tuple[bytes, Heard | None]] = []
        self.closed: list[CloseReason] = []
        self.gone = asyncio.Event()
        self._changed = asyncio.Event()
        self.mqtt: MqttServer | None = None
        self.udp: UdpEndpoint | None = None
        self.refusals: list[ConnectReturn] = []

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds after something the server learnt."""
        async with asyncio.timeout(WAIT):
            while not predicate():
                await self._changed.wait()
                self._changed.clear()

    # --- HTTP -------------------------------------------------------------

    async def ota(self, request: web.Request) -> web.StreamResponse:
        check_in = await read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        answer: dict[str, Any] = {"server_time": server_time()}
        if check_in.mac not in self.entered:
            code = self.codes.setdefault(check_in.mac, "123456")
            answer["activation"] = activation_block(code, "challenge", 60)
            return web.json_response(answer)
        token = secrets.token_urlsafe(16)
        self.tokens[token] = check_in.mac
        origin = request.url.origin()
        answer["websocket"] = websocket_block(
            f"{origin.with_scheme('ws')}/xiaozhi/v1/", token
        )
        if self.mqtt is not None and self.mqtt.port is not None:
            block = mqtt_block(
                origin.host or "",
                self.mqtt.port,
                mac=check_in.mac,
                client_id=check_in.client_id,
                token=token,
            )
            assert block is not None
            answer["mqtt"] = block
        return web.json_response(answer)

    async def activate(self, request: web.Request) -> web.StreamResponse:
        check_in = await read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        if check_in.mac in self.entered:
            return web.json_response({"status": "activated"})
        return web.json_response({"status": "pending"}, status=HTTPStatus.ACCEPTED)

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        if self.tokens.get(bearer_token(request) or "") is None:
            return error_response(HTTPStatus.UNAUTHORIZED, "Invalid token")
        return await serve_device(request, self._open)

    def _open(self, link: Any) -> DeviceSession:
        session = DeviceSession(link, self, vision_url="")
        self.sessions.append(session)
        return session

    # --- MqttAuthenticator ------------------------------------------------

    def allowed(self, peer: str) -> bool:
        return True

    def authenticate(
        self, connection: MqttConnection, connect: Connect
    ) -> MqttLink | ConnectReturn:
        token = (connect.password or b"").decode(errors="replace")
        mac = normalize_mac(connect.username)
        if mac is None or self.tokens.get(token) != mac:
            return ConnectReturn.BAD_CREDENTIALS
        link = MqttLink(connection, mac, lambda: self.udp, identity=mac)
        link.session = self._open(link)
        link.session.start()
        return link

    def refused(self, peer: str, connect: Connect, code: ConnectReturn) -> None:
        self.refusals.append(code)

    # --- SessionHandler ---------------------------------------------------

    def session_ready(self, session: DeviceSession) -> None:
        self.ready.append(session)
        self._changed.set()

    def session_tools(self, session: DeviceSession) -> None:
        """Not needed here."""

    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Not needed here."""

    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        self.events.append(event)
        self._changed.set()

    def session_audio(
        self, session: DeviceSession, payload: bytes, heard: Heard | None
    ) -> None:
        self.audio.append((payload, heard))
        self._changed.set()

    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        self.closed.append(reason)
        self.gone.set()


@pytest.fixture
async def server(socket_enabled: None) -> AsyncIterator[tuple[Server, str]]:
    """Serve HTTP, MQTT and UDP on loopback; return the server and its OTA URL."""
    server = Server()
    app = web.Application()
    app.router.add_routes(
        [
            web.post("/xiaozhi/ota/", server.ota),
            web.post("/xiaozhi/ota/activate", server.activate),
            web.get("/xiaozhi/v1/", server.websocket),
        ]
    )
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    yield server, f"http://{host}:{port}/xiaozhi/ota/"
    if server.mqtt is not None:
        await server.mqtt.stop()
    if server.udp is not None:
        server.udp.stop()
    await runner.cleanup()


async def _pair(server: Server, device: SimulatedDevice) -> None:
    """Check in, show the code, have it entered, check in again."""
    await device.check_ota()
    assert device.activation_code == "123456"
    assert await device.activate() == "pending"
    server.entered.add(device.config.mac)
    assert await device.activate() == "activated"
    result = await device.check_ota()
    assert not result.needs_activation


async def _microphone_up(srv: Server, device: SimulatedDevice) -> list[bytes]:
    """Listen and send 0.3 s of microphone audio; return it once the server has it."""
    await device.send_listen("start", "manual")
    frames = MicEncoder().frames(tone(440, 0.3))
    for frame in frames:
        assert await device.send_audio_packet(frame)
    await srv.until(lambda: len(srv.audio) >= len(frames))
    assert [payload for payload, _ in srv.audio] == frames
    return frames


async def _speaker_down(
    session: DeviceSession, device: SimulatedDevice, frames: list[bytes]
) -> None:
    """Speak ``frames`` to the device: they arrive whole."""
    await session.send_tts("start")
    for frame in frames:
        await session.send_audio(frame)
    await device.wait_for(lambda: len(device.audio_received) >= len(frames))
    assert device.audio_received == frames


async def test_a_device_pairs_and_talks_over_websocket(
    server: tuple[Server, str],
) -> None:
    srv, ota_url = server
    device = SimulatedDevice(DeviceConfig(ota_url=ota_url, websocket_only=True))
    try:
        await _pair(srv, device)
        assert not device.uses_mqtt
        await device.connect()
        await srv.until(lambda: bool(srv.ready))
        session = srv.ready[0]
        assert session.link.transport == "websocket"
        assert "self.audio_speaker.set_volume" in session.tools
        result = await session.call_tool(
            "self.audio_speaker.set_volume", {"volume": 25}
        )
        assert (result.is_error, result.json) == (False, True)
        assert device.state.volume == 25

        # Up: the microphone's Opus packets, framed for the protocol version.
        frames = await _microphone_up(srv, device)
        assert all(heard is None for _, heard in srv.audio)  # no UDP facts
        assert any(
            event.type is DeviceEventType.LISTENING_STARTED for event in srv.events
        )
        await _speaker_down(session, device, frames)
    finally:
        await device.stop()
    async with asyncio.timeout(WAIT):
        await srv.gone.wait()
    assert srv.closed == [CloseReason.DEVICE_CLOSED]


async def test_a_wrong_token_is_refused(server: tuple[Server, str]) -> None:
    srv, ota_url = server
    url = ota_url.replace("http", "ws", 1).replace("/ota/", "/v1/")
    device = SimulatedDevice(DeviceConfig(ws_url=url, token="not-a-token"))
    try:
        with pytest.raises(DeviceConnectionError):
            await device.connect()
    finally:
        await device.stop()
    assert srv.sessions == []


async def test_a_device_talks_over_mqtt_and_udp(server: tuple[Server, str]) -> None:
    srv, ota_url = server
    srv.mqtt = MqttServer(srv)
    await srv.mqtt.start("127.0.0.1", 0)
    srv.udp = UdpEndpoint()
    await srv.udp.start("127.0.0.1", 0)
    device = SimulatedDevice(DeviceConfig(ota_url=ota_url))
    try:
        await _pair(srv, device)
        assert device.uses_mqtt
        await device.connect()
        await srv.until(lambda: bool(srv.ready))
        session = srv.ready[0]
        assert session.link.transport == "mqtt"
        assert session.link.always_on
        assert isinstance(session.link, MqttLink)
        assert session.link.publish_topic == topics(device.config.mac)[0]
        result = await session.call_tool(
            "self.audio_speaker.set_volume", {"volume": 60}
        )
        assert not result.is_error
        assert device.state.volume == 60

        # A conversation opens an encrypted UDP channel; packets carry the
        # wire's facts (sequence, kernel receive time).
        frames = await _microphone_up(srv, device)
        assert session.link.channel is not None
        sequences = [heard.sequence for _, heard in srv.audio if heard is not None]
        assert sequences == sorted(sequences)
        assert len(sequences) == len(frames)
        await _speaker_down(session, device, frames)
    finally:
        await device.stop()
    async with asyncio.timeout(WAIT):
        await srv.gone.wait()
    assert srv.closed == [CloseReason.DEVICE_CLOSED]
    assert srv.refusals == []


async def test_what_the_ota_answer_says() -> None:
    moment = datetime(2026, 11, 28, 12, 0, tzinfo=timezone(timedelta(hours=8)))
    assert server_time(moment) == {
        "timestamp": int(moment.timestamp() * 1000),
        "timezone_offset": 480,
    }
    assert server_time(datetime(2026, 1, 1, tzinfo=UTC))["timezone_offset"] == 0
    assert firmware_block("2.4.2", "http://x/fw.bin") == {
        "version": "2.4.2",
        "url": "http://x/fw.bin",
    }
    assert activation_block("123456", "c", 1.5) == {
        "code": "123456",
        "message": "123456",
        "challenge": "c",
        "timeout_ms": 1500,
    }
    # The firmware splits the endpoint at its first colon: no IPv6 literal.
    assert (
        mqtt_block("fe80::1", 1883, mac="aa:bb:cc:dd:ee:01", client_id="c", token="t")
        is None
    )
    block = mqtt_block(
        "10.0.0.2", 1883, mac="aa:bb:cc:dd:ee:01", client_id="c", token="t"
    )
    assert block is not None
    assert (block["endpoint"], block["username"], block["password"]) == (
        "10.0.0.2:1883",
        "aa:bb:cc:dd:ee:01",
        "t",
    )
    assert block["publish_topic"] == "xiaozhi/aabbccddee01/up"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, HTTPStatus.BAD_REQUEST),
        ({"Device-Id": "aa:bb:cc:dd:ee:01"}, HTTPStatus.BAD_REQUEST),
        ({"Device-Id": "AA-BB-CC-DD-EE-01", "Client-Id": "c"}, HTTPStatus.OK),
    ],
)
async def test_a_check_in_names_its_device(
    server: tuple[Server, str], headers: dict[str, str], status: HTTPStatus
) -> None:
    _, ota_url = server
    async with (
        aiohttp.ClientSession() as http,
        http.post(ota_url, headers=headers, data=b"{}") as response,
    ):
        assert response.status == status
        body = await response.json()
    if status is HTTPStatus.OK:
        assert body["activation"]["code"] == "123456"
    else:
        assert "error" in body
