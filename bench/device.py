"""A device that answers at once, and a bare aiohttp server to compare with.

:class:`FastDevice` speaks the firmware's WebSocket protocol with canned
replies: it sends the firmware's hello and answers ``initialize``,
``tools/list`` and ``tools/call`` the moment they arrive, with the bytes a
real device would send (taken from the simulator once, up front). It does no
other work, so a round trip through it is as cheap as the transport allows.

:class:`RawServer` is the baseline: a plain aiohttp WebSocket endpoint that
sends the same request frames to the same :class:`FastDevice` and reads the
reply, without any of the integration in between.

This module does not import Home Assistant: device fleets run it in their own
process.
"""

import asyncio
from dataclasses import dataclass
import time
from typing import Any

import aiohttp
from aiohttp import web
import orjson

from simulator.cli import client_id_for

STATUS_TOOL = "self.get_device_status"
VOLUME_TOOL = "self.audio_speaker.set_volume"
TRUE_RESULT = '{"content":[{"type":"text","text":"true"}],"isError":false}'
EMPTY_PAGE = '{"tools":[]}'
RAW_PATH = "/raw"
SERVER_HELLO_SESSION = "0123456789abcdef"


@dataclass(frozen=True, slots=True)
class DeviceScript:
    """Everything a fast device says, as the firmware would say it."""

    hello: str
    server_info: str
    pages: dict[str, str]
    status_result: str
    tool_names: tuple[str, ...]
    page_count: int


async def build_script(*, battery: bool = True, camera: bool = True) -> DeviceScript:
    """Take hello, server info, ``tools/list`` pages and status from the simulator.

    The simulator's MCP server pages the tool list at the firmware's size
    limit, so the pages are byte for byte what a real board would send.
    """
    from simulator import DeviceConfig, SimulatedDevice, device_status  # noqa: PLC0415
    from simulator.tools import dumps, result_object  # noqa: PLC0415

    sim = SimulatedDevice(DeviceConfig(battery=battery, camera=camera))
    sent: list[str] = []

    async def capture(payload: str) -> bool:
        sent.append(payload)
        return True

    sim.send_mcp_payload = capture  # type: ignore[method-assign]

    async def result_of(method: str, params: dict[str, Any]) -> str:
        sent.clear()
        await sim.mcp.handle(
            {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        )
        (payload,) = sent
        prefix = '{"jsonrpc":"2.0","id":1,"result":'
        if not payload.startswith(prefix):
            raise RuntimeError(f"unexpected simulator reply {payload[:80]!r}")
        return payload[len(prefix) : -1]

    server_info = await result_of("initialize", {"capabilities": {}})
    pages: dict[str, str] = {}
    cursor = ""
    while True:
        page = await result_of("tools/list", {"cursor": cursor, "withUserTools": True})
        pages[cursor] = page
        cursor = orjson.loads(page).get("nextCursor", "")
        if not cursor:
            break
    return DeviceScript(
        hello=sim._hello_text(),  # noqa: SLF001 - the firmware's own hello
        server_info=server_info,
        pages=pages,
        status_result=dumps(result_object(device_status(sim))),
        tool_names=tuple(tool.name for tool in sim.tools),
        page_count=len(pages),
    )


class FastDevice:
    """A device that answers every request the moment it arrives."""

    def __init__(self, script: DeviceScript, mac: str, token: str) -> None:
        """Prepare a device; nothing happens before :meth:`connect`."""
        self.script = script
        self.mac = mac
        self.token = token
        self.client_id = client_id_for(mac)
        self.session_id = ""
        self.requests = 0
        self.replies = 0
        self.last_reply_ns = 0
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._prefix = ""
        self._hello: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def connect(self, http: aiohttp.ClientSession, url: str) -> None:
        """Open the link, send the hello and wait for the server's hello."""
        self.ws = await http.ws_connect(
            url,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Protocol-Version": "1",
                "Device-Id": self.mac,
                "Client-Id": self.client_id,
            },
            autoping=True,
            heartbeat=None,
            compress=0,
            max_msg_size=4 * 1024 * 1024,
        )
        self._hello = asyncio.get_running_loop().create_future()
        self._reader = asyncio.get_running_loop().create_task(self._read(self.ws))
        await self.ws.send_str(self.script.hello)
        await self._hello

    @property
    def connected(self) -> bool:
        """Return True while the link is open."""
        return self.ws is not None and not self.ws.closed

    async def close(self) -> None:
        """Close the link and wait for the reader to finish."""
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await self._reader

    async def wait_closed(self) -> None:
        """Wait until the server ends the link."""
        if self._reader is not None:
            await self._reader

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        try:
            async for message in ws:
                if message.type is aiohttp.WSMsgType.TEXT:
                    reply = self._on_text(message.data)
                    if reply is not None:
                        await ws.send_str(reply)
                        self.replies += 1
                        self.last_reply_ns = time.perf_counter_ns()
        except aiohttp.ClientError, ConnectionError:
            pass
        finally:
            hello = self._hello
            if hello is not None and not hello.done():
                hello.set_exception(ConnectionError("closed before the hello"))

    def _on_text(self, text: str) -> str | None:
        frame = orjson.loads(text)
        kind = frame.get("type")
        if kind == "mcp":
            return self._answer(frame.get("payload"))
        if kind == "hello":
            self.session_id = frame.get("session_id", "")
            self._prefix = (
                '{"session_id":"' + self.session_id + '","type":"mcp","payload":'
            )
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(None)
        return None

    def _answer(self, payload: Any) -> str | None:
        if not isinstance(payload, dict):
            return None
        request_id = payload.get("id")
        method = payload.get("method")
        if type(request_id) is not int or not isinstance(method, str):
            return None
        self.requests += 1
        params = payload.get("params") or {}
        script = self.script
        if method == "tools/call":
            name = params.get("name")
            result = script.status_result if name == STATUS_TOOL else TRUE_RESULT
        elif method == "tools/list":
            result = script.pages.get(params.get("cursor", ""), EMPTY_PAGE)
        elif method == "initialize":
            result = script.server_info
        else:
            # The firmware's answer to a method it does not know.
            return (
                self._prefix
                + '{"jsonrpc":"2.0","id":'
                + str(request_id)
                + ',"error":{"message":"Method not implemented: '
                + method
                + '"}}}'
            )
        return (
            self._prefix
            + '{"jsonrpc":"2.0","id":'
            + str(request_id)
            + ',"result":'
            + result
            + "}}"
        )


def tool_call_frame(session_id: str, request_id: int, volume: int) -> str:
    """Return the frame Home Assistant sends to set the volume."""
    return (
        '{"session_id":"'
        + session_id
        + '","type":"mcp","payload":{"jsonrpc":"2.0","id":'
        + str(request_id)
        + ',"method":"tools/call","params":{"name":"'
        + VOLUME_TOOL
        + '","arguments":{"volume":'
        + str(volume)
        + "}}}}"
    )


class RawServer:
    """A bare aiohttp WebSocket server: the transport floor of a round trip."""

    def __init__(self) -> None:
        """Prepare the server; :meth:`start` binds it."""
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._links: asyncio.Queue[web.WebSocketResponse] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._open: set[web.WebSocketResponse] = set()
        # Links are handed to accept() while True; later ones are only drained
        # until the device closes them (connect-time baselines).
        self.hold_links = True

    @property
    def url(self) -> str:
        """Return the URL devices dial."""
        return f"ws://127.0.0.1:{self.port}{RAW_PATH}"

    @property
    def dispatch_url(self) -> str:
        """Return the URL of a link whose replies a reader task dispatches."""
        return f"{self.url}?dispatch=1"

    async def start(self) -> None:
        """Serve on a free loopback port."""
        app = web.Application()
        app.router.add_get(RAW_PATH, self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # noqa: SLF001 - the bound port is not public
        if server is None or not server.sockets:
            raise RuntimeError("raw server did not bind")
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close every link and the server."""
        self._stop.set()
        await asyncio.gather(*(ws.close() for ws in list(self._open)))
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        # The same socket options as the integration's WebSocket view.
        ws = web.WebSocketResponse(
            heartbeat=None,
            autoping=True,
            compress=False,
            max_msg_size=1024 * 1024,
            timeout=2.0,
        )
        await ws.prepare(request)
        self._open.add(ws)
        try:
            await self._serve(request, ws)
        finally:
            self._open.discard(ws)
        return ws

    async def _serve(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        await ws.receive()  # the device's hello
        await ws.send_str(
            '{"type":"hello","transport":"websocket","session_id":"'
            + SERVER_HELLO_SESSION
            + '","audio_params":{"format":"opus","sample_rate":24000,'
            '"channels":1,"frame_duration":60}}'
        )
        if "dispatch" in request.query:
            self._links.put_nowait(ws)
            await self._dispatch(ws)
        elif not self.hold_links:
            async for _message in ws:
                pass
        else:
            self._links.put_nowait(ws)
            await self._stop.wait()

    async def _dispatch(self, ws: web.WebSocketResponse) -> None:
        """Read replies and hand each to the request with its id."""
        async for message in ws:
            if message.type is aiohttp.WSMsgType.TEXT:
                payload = orjson.loads(message.data)["payload"]
                future = self._pending.pop(payload["id"], None)
                if future is not None and not future.done():
                    future.set_result(payload.get("result"))

    async def accept(self) -> web.WebSocketResponse:
        """Return the next device link once its hello exchange is done."""
        return await self._links.get()

    async def round_trip(self, ws: web.WebSocketResponse, volume: int) -> int:
        """Send a tool call frame, read the reply; return nanoseconds taken."""
        self._next_id += 1
        frame = tool_call_frame(SERVER_HELLO_SESSION, self._next_id, volume)
        start = time.perf_counter_ns()
        await ws.send_str(frame)
        message = await ws.receive()
        elapsed = time.perf_counter_ns() - start
        if message.type is not aiohttp.WSMsgType.TEXT:
            raise ConnectionError(f"raw link answered {message.type!r}")
        return elapsed

    async def dispatch_round_trip(self, ws: web.WebSocketResponse, volume: int) -> int:
        """Send a tool call frame, await its reply from the reader task."""
        self._next_id += 1
        request_id = self._next_id
        frame = tool_call_frame(SERVER_HELLO_SESSION, request_id, volume)
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        start = time.perf_counter_ns()
        await ws.send_str(frame)
        await future
        return time.perf_counter_ns() - start
