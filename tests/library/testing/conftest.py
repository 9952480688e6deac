"""A small fake xiaozhi server for the simulator's own tests."""

import asyncio
from collections.abc import AsyncIterator, Callable
import json
from typing import Any

from aiohttp import WSMessage, WSMsgType, web
from aiohttp.test_utils import TestServer
import pytest

from aioxiaozhi.testing import DeviceConfig, SimulatedDevice

WAIT = 2.0

DEFAULT_HELLO: dict[str, Any] = {
    "type": "hello",
    "version": 1,
    "transport": "websocket",
    "session_id": "sess-1",
    "audio_params": {
        "format": "opus",
        "sample_rate": 24000,
        "channels": 1,
        "frame_duration": 60,
    },
}


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations() -> None:
    """Override the repository-wide fixture: the simulator needs no hass."""


class Waitable:
    """Something tests can wait on without sleeping."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._event.wait()


class Conn(Waitable):
    """One device connection, seen from the server."""

    def __init__(self, ws: web.WebSocketResponse, headers: dict[str, str]) -> None:
        super().__init__()
        self.ws = ws
        self.headers = headers
        self.texts: list[str] = []
        self.frames: list[Any] = []
        self.binary: list[bytes] = []
        self.messages: list[str | bytes] = []  # text and binary, in order
        self.pongs = 0
        self.closed = False
        self._next_id = 100

    async def send(self, frame: dict[str, Any] | str) -> None:
        await self.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))

    async def send_mcp(self, payload: dict[str, Any] | str) -> None:
        body = payload if isinstance(payload, str) else json.dumps(payload)
        await self.send('{"session_id":"sess-1","type":"mcp","payload":' + body + "}")

    async def frame(
        self, predicate: Callable[[Any], bool], *, since: int = 0, timeout: float = WAIT
    ) -> Any:
        found: list[Any] = []

        def check() -> bool:
            found[:] = [f for f in self.frames[since:] if predicate(f)][:1]
            return bool(found)

        await self.until(check, timeout)
        return found[0]

    async def text(
        self, predicate: Callable[[str], bool], *, timeout: float = WAIT
    ) -> str:
        found: list[str] = []

        def check() -> bool:
            found[:] = [t for t in self.texts if predicate(t)][:1]
            return bool(found)

        await self.until(check, timeout)
        return found[0]

    def replies(self, request_id: int) -> list[dict[str, Any]]:
        return [
            f["payload"]
            for f in self.frames
            if isinstance(f, dict)
            and f.get("type") == "mcp"
            and isinstance(f.get("payload"), dict)
            and f["payload"].get("id") == request_id
        ]

    async def reply(self, request_id: int, timeout: float = WAIT) -> dict[str, Any]:
        frame = await self.frame(
            lambda f: (
                isinstance(f, dict)
                and f.get("type") == "mcp"
                and isinstance(f.get("payload"), dict)
                and f["payload"].get("id") == request_id
            ),
            timeout=timeout,
        )
        return frame["payload"]

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        request_id: int | None = None,
    ) -> dict[str, Any]:
        if request_id is None:
            self._next_id += 1
            request_id = self._next_id
        payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
        if params is not None:
            payload["params"] = params
        await self.send_mcp(payload)
        return await self.reply(request_id)

    async def call(
        self, name: str, arguments: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = arguments
        return await self.request("tools/call", params)

    async def wait_closed(self, timeout: float = WAIT) -> None:
        await self.until(lambda: self.closed, timeout)


class FakeServer(Waitable):
    """WebSocket, OTA, activation, vision and image endpoints."""

    def __init__(self) -> None:
        super().__init__()
        self.hello: dict[str, Any] | str | None = dict(DEFAULT_HELLO)
        self.conns: list[Conn] = []
        self.ota_answers: list[tuple[int, Any]] = []
        self.ota_default: tuple[int, Any] = (200, {})
        self.ota_requests: list[tuple[dict[str, str], Any]] = []
        self.activate_statuses: list[int] = []
        self.activate_requests: list[tuple[dict[str, str], str]] = []
        self.uploads: list[dict[str, Any]] = []
        self.upload_status = 200
        self.upload_body = '{"success": true, "text": "a cat"}'
        self.image_status = 200
        self.image_bytes = b"\xff\xd8\xff" + b"0" * 61 + b"\xff\xd9"
        self.firmware = b""
        self.firmware_requests = 0
        app = web.Application()
        app.router.add_get("/ws", self._ws)
        app.router.add_post("/ota/", self._ota)
        app.router.add_post("/ota/activate", self._activate)
        app.router.add_post("/vision", self._upload)
        app.router.add_post("/snapshot", self._upload)
        app.router.add_get("/image.jpg", self._image)
        app.router.add_get("/firmware.bin", self._firmware)
        self.server = TestServer(app, host="127.0.0.1")

    async def start(self) -> None:
        await self.server.start_server()

    async def close(self) -> None:
        for conn in self.conns:
            if not conn.ws.closed:
                await conn.ws.close()
        await self.server.close()

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.server.port}{path}"

    @property
    def ws_url(self) -> str:
        return self.url("/ws", "ws")

    @property
    def ota_url(self) -> str:
        return self.url("/ota/")

    async def conn(self, index: int = 0, timeout: float = WAIT) -> Conn:
        await self.until(lambda: len(self.conns) > index, timeout)
        return self.conns[index]

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        conn = Conn(ws, dict(request.headers))
        self.conns.append(conn)
        self.notify()
        try:
            async for msg in ws:
                await self._on_message(conn, msg)
        finally:
            # aiohttp cancels this handler when the peer drops the connection
            conn.closed = True
            conn.notify()
        return ws

    async def _on_message(self, conn: Conn, msg: WSMessage) -> None:
        if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            conn.messages.append(msg.data)
        if msg.type is WSMsgType.TEXT:
            conn.texts.append(msg.data)
            try:
                frame = json.loads(msg.data)
            except ValueError:
                frame = None
            conn.frames.append(frame)
            if (
                isinstance(frame, dict)
                and frame.get("type") == "hello"
                and self.hello is not None
            ):
                await conn.send(self.hello)
        elif msg.type is WSMsgType.BINARY:
            conn.binary.append(msg.data)
        elif msg.type is WSMsgType.PONG:
            conn.pongs += 1
        conn.notify()

    async def _ota(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.ota_requests.append((dict(request.headers), body))
        self.notify()
        status, answer = (
            self.ota_answers.pop(0) if self.ota_answers else self.ota_default
        )
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return web.Response(status=status, text=text, content_type="application/json")

    async def _activate(self, request: web.Request) -> web.Response:
        self.activate_requests.append((dict(request.headers), await request.text()))
        self.notify()
        status = self.activate_statuses.pop(0) if self.activate_statuses else 200
        return web.Response(status=status, text="{}")

    async def _upload(self, request: web.Request) -> web.Response:
        record: dict[str, Any] = {
            "path": request.path,
            "headers": dict(request.headers),
            "chunked": request.headers.get("Transfer-Encoding") == "chunked",
            "fields": [],
        }
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            record["fields"].append(
                {
                    "name": part.name,
                    "filename": part.filename,
                    "content_type": part.headers.get("Content-Type"),
                    "data": await part.read(),  # type: ignore[union-attr]
                }
            )
        self.uploads.append(record)
        self.notify()
        return web.Response(status=self.upload_status, text=self.upload_body)

    async def _image(self, request: web.Request) -> web.Response:
        del request
        return web.Response(
            status=self.image_status, body=self.image_bytes, content_type="image/jpeg"
        )

    async def _firmware(self, request: web.Request) -> web.Response:
        del request
        self.firmware_requests += 1
        self.notify()
        return web.Response(body=self.firmware)


@pytest.fixture
async def server(socket_enabled: None) -> AsyncIterator[FakeServer]:
    del socket_enabled
    fake = FakeServer()
    await fake.start()
    yield fake
    await fake.close()


type DeviceFactory = Callable[..., SimulatedDevice]


@pytest.fixture
async def make_device(server: FakeServer) -> AsyncIterator[DeviceFactory]:
    devices: list[SimulatedDevice] = []

    def factory(**kwargs: Any) -> SimulatedDevice:
        http = kwargs.pop("http", None)
        url_rewriter = kwargs.pop("url_rewriter", None)
        kwargs.setdefault("ws_url", server.ws_url)
        kwargs.setdefault("hello_timeout", WAIT)
        kwargs.setdefault("reboot_delay", 0.01)
        kwargs.setdefault("retry_delay", 0.01)
        kwargs.setdefault("ota_retry_delay", 0.01)
        kwargs.setdefault("activation_poll_interval", 0.01)
        kwargs.setdefault("activation_retry_delay", 0.01)
        device = SimulatedDevice(
            DeviceConfig(**kwargs), http=http, url_rewriter=url_rewriter
        )
        devices.append(device)
        return device

    yield factory
    for device in devices:
        await device.stop()


@pytest.fixture
async def connected(
    server: FakeServer, make_device: DeviceFactory
) -> tuple[SimulatedDevice, Conn]:
    device = make_device()
    await device.connect()
    return device, await server.conn()
