"""In-memory stand-ins for a WebSocket, a xiaozhi device and a session owner."""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
import json
from typing import Any

from aioxiaozhi import (
    CloseReason,
    DeviceEvent,
    DeviceEventType,
    DeviceSession,
)
from aioxiaozhi.audio.preroll import Heard
from aioxiaozhi.testing.device_tools import BUILTIN_TOOLS, FIRMWARE

WAIT = 2.0
STATUS_TOOL_NAME = "self.get_device_status"

# What a board says, shared with the simulator and the benchmarks.
HELLO: dict[str, Any] = FIRMWARE["hello"]
HELLO_NO_MCP: dict[str, Any] = {
    key: value for key, value in HELLO.items() if key != "features"
}
STATUS: dict[str, Any] = FIRMWARE["status"]
SERVER_INFO: dict[str, Any] = FIRMWARE["server_info"]
STATUS_TOOL = BUILTIN_TOOLS[STATUS_TOOL_NAME]
VOLUME_TOOL = BUILTIN_TOOLS["self.audio_speaker.set_volume"]
REBOOT_TOOL = BUILTIN_TOOLS["self.reboot"]


def tool_json(name: str, **properties: dict[str, Any]) -> dict[str, Any]:
    """Describe a tool the way the firmware lists it (every argument required)."""
    return {
        "name": name,
        "description": f"Tool {name}",
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": list(properties),
        },
    }


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """Return a tools/call result holding one text item."""
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def firmware_error_frame(session_id: str, request_id: int, message: str) -> str:
    """Build an error frame by concatenation, as the firmware does (unescaped)."""
    payload = (
        '{"jsonrpc":"2.0","id":'
        + str(request_id)
        + ',"error":{"message":"'
        + message
        + '"}}'
    )
    return '{"session_id":"' + session_id + '","type":"mcp","payload":' + payload + "}"


async def wait[T](awaitable: asyncio.Future[T] | Any, timeout: float = WAIT) -> T:
    """Await something that must happen soon."""
    async with asyncio.timeout(timeout):
        return await awaitable  # type: ignore[no-any-return]


# --- replies the fake device can give ------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """Answer with ``result``."""

    value: Any


@dataclass(frozen=True, slots=True)
class Error:
    """Answer with an error object, ``code`` only when given."""

    message: str
    code: int | None = None


@dataclass(frozen=True, slots=True)
class Raw:
    """Answer with this exact text frame."""

    text: str


SILENT = None
"""Do not answer at all (the firmware's reaction to a malformed request)."""

type Reply = Result | Error | Raw | None
type MethodHandler = Callable[[dict[str, Any], int], Reply]


class FakeLink:
    """Records what the session sends; lets a test await each frame."""

    transport = "fake"
    remote = "192.0.2.7"

    def __init__(self) -> None:
        """Start with nothing sent."""
        self.sent: list[dict[str, Any]] = []
        self.audio: list[tuple[bytes, int]] = []
        self.close_calls: list[str] = []
        self.audio_opened = self.audio_closed = 0
        self.closed = asyncio.Event()
        self.send_error: BaseException | None = None
        self.on_send: Callable[[dict[str, Any]], None] | None = None
        self._frames: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    always_on = False

    def open_audio(self, hello: Any) -> dict[str, Any]:
        """Say the transport in the server hello, as the WebSocket does."""
        self.audio_opened += 1
        return {"transport": "websocket"}

    def close_audio(self) -> None:
        """Count closed audio channels."""
        self.audio_closed += 1

    async def send_audio(self, payload: bytes, timestamp: int) -> None:
        """Take one Opus packet (or fail as a broken socket would)."""
        if self.send_error is not None:
            raise self.send_error
        self.audio.append((payload, timestamp))

    async def send_text(self, data: str) -> None:
        """Take one text frame (or fail as a broken socket would)."""
        if self.send_error is not None:
            raise self.send_error
        frame = json.loads(data)
        self.sent.append(frame)
        self._frames.put_nowait(frame)
        if self.on_send is not None:
            self.on_send(frame)

    async def close(self, message: str) -> None:
        """Remember the close and signal it."""
        self.close_calls.append(message)
        self.closed.set()

    async def next_frame(self) -> dict[str, Any]:
        """Return the next frame sent, waiting for it when needed."""
        return await wait(self._frames.get())

    def drain(self) -> None:
        """Forget every frame sent so far."""
        self.sent.clear()
        while not self._frames.empty():
            self._frames.get_nowait()

    def types_sent(self) -> list[str]:
        """Return the ``type`` of every frame sent so far."""
        return [frame["type"] for frame in self.sent]


class FakeDevice:
    """Answers the session's MCP requests like a scripted firmware would."""

    def __init__(
        self,
        *,
        tools: list[dict[str, Any]] | None = None,
        status: dict[str, Any] | None = None,
        page_size: int = 100,
    ) -> None:
        """Offer ``tools``; the status tool reports ``status`` as JSON text."""
        self.tools = list(tools or [])
        self.status = status
        self.page_size = page_size
        self.handlers: dict[str, MethodHandler] = {}
        self.tool_handlers: dict[str, MethodHandler] = {}
        self.requests: list[dict[str, Any]] = []
        self.held: list[str] | None = None
        self.session: DeviceSession | None = None
        self._requests: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def attach(self, session: DeviceSession, link: FakeLink) -> None:
        """Answer what ``session`` sends through ``link``."""
        self.session = session
        link.on_send = self._on_frame

    def methods(self) -> list[str]:
        """Return the method of every request received so far."""
        return [payload["method"] for payload in self.requests]

    async def next_request(self, method: str | None = None) -> dict[str, Any]:
        """Return the next request (with ``method`` when given)."""
        async with asyncio.timeout(WAIT):
            while True:
                payload = await self._requests.get()
                if method is None or payload["method"] == method:
                    return payload

    def hold(self) -> None:
        """Keep replies back until :meth:`release`."""
        self.held = []

    def release(self, order: list[int] | None = None) -> None:
        """Send held replies, in ``order`` (indexes) when given."""
        held, self.held = self.held or [], None
        for index in order if order is not None else range(len(held)):
            self.feed(held[index])

    def feed(self, text: str | dict[str, Any]) -> None:
        """Send a text frame to the session."""
        assert self.session is not None
        self.session.feed_text(text if isinstance(text, str) else json.dumps(text))

    def _on_frame(self, frame: dict[str, Any]) -> None:
        if frame.get("type") != "mcp" or "method" not in frame["payload"]:
            return
        payload = frame["payload"]
        self.requests.append(payload)
        self._requests.put_nowait(payload)
        if "id" not in payload:
            return
        text = self._encode(payload["id"], self._answer(payload))
        if text is None:
            return
        if self.held is not None:
            self.held.append(text)
        else:
            self.feed(text)

    def _answer(self, payload: dict[str, Any]) -> Reply:
        method = payload["method"]
        params = payload.get("params", {})
        request_id = payload["id"]
        if method in self.handlers:
            return self.handlers[method](params, request_id)
        match method:
            case "initialize":
                return Result(
                    {
                        "protocolVersion": "2024-11-05",
                        "capabilities": {"tools": {}},
                        "serverInfo": SERVER_INFO,
                    }
                )
            case "tools/list":
                return Result(self._page(params.get("cursor", "")))
            case "tools/call":
                name = params["name"]
                if name in self.tool_handlers:
                    return self.tool_handlers[name](params["arguments"], request_id)
                if name == STATUS_TOOL_NAME and self.status is not None:
                    return Result(text_result(json.dumps(self.status)))
                return Error(f"Unknown tool: {name}")
        return Error(f"Method not implemented: {method}")

    def _page(self, cursor: str) -> dict[str, Any]:
        names = [tool["name"] for tool in self.tools]
        if cursor and cursor not in names:
            return {"tools": []}
        start = names.index(cursor) if cursor else 0
        end = start + self.page_size
        page: dict[str, Any] = {"tools": self.tools[start:end]}
        if end < len(names):
            page["nextCursor"] = names[end]
        return page

    def _encode(self, request_id: int, reply: Reply) -> str | None:
        assert self.session is not None
        match reply:
            case None:
                return None
            case Raw(text):
                return text
            case Result(value):
                body: dict[str, Any] = {"result": value}
            case Error(message, code):
                error: dict[str, Any] = {"message": message}
                if code is not None:
                    error["code"] = code
                body = {"error": error}
        return json.dumps(
            {
                "session_id": self.session.session_id,
                "type": "mcp",
                "payload": {"jsonrpc": "2.0", "id": request_id, **body},
            }
        )


class RecordingHandler:
    """A session owner that records every callback."""

    def __init__(self) -> None:
        """Start with nothing heard."""
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self.ready_calls = 0
        self.ready_snapshot: dict[str, Any] = {}
        self.tools_calls: list[list[str]] = []
        self.statuses: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.status_log: list[dict[str, Any]] = []
        self.events: list[DeviceEvent] = []
        self.audio: list[bytes] = []
        self.closed_reasons: list[CloseReason] = []

    def session_ready(self, session: DeviceSession) -> None:
        """Record what the session knew when it became ready."""
        self.ready_calls += 1
        self.ready_snapshot = {
            "ready": session.ready,
            "tools": sorted(session.tools),
            "status": session.status,
            "server_info": session.server_info,
        }
        self.ready.set()

    def session_tools(self, session: DeviceSession) -> None:
        """Record a fetched tool list."""
        self.tools_calls.append(sorted(session.tools))

    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Record a status."""
        self.status_log.append(status)
        self.statuses.put_nowait(status)

    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Record a device event."""
        self.events.append(event)

    def session_audio(
        self, session: DeviceSession, payload: bytes, heard: Heard | None
    ) -> None:
        """Record a microphone packet."""
        self.audio.append(payload)

    @property
    def notifications(self) -> list[tuple[str, dict[str, Any]]]:
        """Return the MCP notifications heard so far."""
        return [
            (event.data["method"], event.data["params"])
            for event in self.events
            if event.type is DeviceEventType.NOTIFICATION
        ]

    @property
    def messages(self) -> list[DeviceEvent]:
        """Return the events of frames other than MCP heard so far."""
        return [
            event
            for event in self.events
            if event.type is not DeviceEventType.NOTIFICATION
        ]

    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Record the end of the session."""
        self.closed_reasons.append(reason)
        self.closed.set()


class Rig:
    """A fake transport, device and owner wired to the sessions it opens."""

    def __init__(self) -> None:
        """Wire up a device that has no tools until a test gives it some."""
        self.transport = FakeLink()
        self.device = FakeDevice()
        self.handler = RecordingHandler()
        self.sessions: list[DeviceSession] = []

    def open(self, **options: Any) -> DeviceSession:
        """Create a session (keep-alive off unless asked for)."""
        options.setdefault("vision_url", "http://ha.local:8123/api/xiaozhi/vision")
        options.setdefault("keepalive_interval", None)
        session = DeviceSession(self.transport, self.handler, **options)
        self.device.attach(session, self.transport)
        self.sessions.append(session)
        return session

    async def connect(
        self, hello: dict[str, Any] | None = None, **options: Any
    ) -> DeviceSession:
        """Open a session, send the hello and wait until it is ready."""
        session = self.open(**options)
        await self.handshake(session, hello)
        return session

    async def handshake(
        self,
        session: DeviceSession,
        hello: dict[str, Any] | None = None,
        *,
        start: bool = True,
    ) -> None:
        """Start ``session``, send the hello and wait until it is ready."""
        if start:
            session.start()
        session.feed_text(json.dumps(HELLO if hello is None else hello))
        await wait(self.handler.ready.wait())

    async def close_all(self) -> None:
        """End every session as the socket owner does at EOF."""
        for session in self.sessions:
            await session.connection_lost()
