"""A device's link to Home Assistant, over any transport.

A transport (the WebSocket view, the MQTT + UDP endpoint) owns the
connection. It hands the session a :class:`Link` to send through, feeds in
what arrives (:meth:`DeviceSession.feed_text`, :meth:`DeviceSession.feed_audio`)
and calls :meth:`DeviceSession.connection_lost` when the connection ends. The
session answers the hello, runs the MCP handshake (``initialize``, paged
``tools/list``, device status), keeps the link alive and reports what it
learns to a :class:`SessionHandler`.

What depends on the kind of link (a conversation per WebSocket, or an
always-on MQTT link with an audio channel per conversation) is the session's
life cycle (``lifecycle.py``), chosen by :attr:`Link.always_on`.
"""

import asyncio
from collections.abc import Coroutine
import logging
import secrets
from typing import Any, Protocol

from .audio import FRAME_DURATION_MS, SPEAKER_SAMPLE_RATE
from .audio.preroll import Heard
from .errors import (
    ConnectionClosedError,
    McpError,
    ProtocolError,
    RequestTimeoutError,
    XiaozhiError,
)
from .events import DeviceEvent, event_from_frame, notification_event
from .firmware import STATUS_TOOL
from .lifecycle import AlwaysOnLifecycle, Lifecycle, OnDemandLifecycle
from .link import CloseReason, Link
from .mcp import McpClient
from .messages import (
    DEFAULT_AUDIO_PARAMS,
    DeviceHello,
    alert_frame,
    dumps,
    llm_frame,
    mcp_frame,
    notify_frame,
    parse_frame,
    recover_error_reply,
    stt_frame,
    tts_frame,
)
from .tools import Tool, ToolResult

_LOGGER = logging.getLogger(__name__)


class SessionHandler(Protocol):
    """Receives what a session learns, in the order it learns it."""

    def session_ready(self, session: DeviceSession) -> None:
        """Handshake done: server info, tools and first status are known."""

    def session_tools(self, session: DeviceSession) -> None:
        """Take a tool list that was fetched again."""

    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Take a status the device reported."""

    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Take something the device did (listen, abort, notification...)."""

    def session_audio(
        self, session: DeviceSession, payload: bytes, heard: Heard | None
    ) -> None:
        """Take one Opus packet from the microphone (``heard``: over UDP)."""

    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Learn that the session ended; pending requests have failed."""


class DeviceSession:
    """Server side of one device connection."""

    def __init__(
        self,
        link: Link,
        handler: SessionHandler,
        *,
        vision_url: str,
        request_timeout: float = 10.0,
        call_timeout: float = 30.0,
        hello_timeout: float = 10.0,
        keepalive_interval: float | None = 50.0,
        audio_params: dict[str, Any] | None = None,
        mcp: bool = True,
    ) -> None:
        """Prepare a session; nothing is sent before the device's hello.

        ``mcp=False`` serves the link without asking the device anything
        (a device that is not paired yet).
        """
        self.link = link
        self._handler = handler
        self.session_id = secrets.token_hex(8)
        self.vision_url = vision_url
        self.vision_token = secrets.token_urlsafe(24)
        self.request_timeout = request_timeout
        self.call_timeout = call_timeout
        self._keepalive_interval = keepalive_interval
        self._use_mcp = mcp
        self.audio_params = audio_params or DEFAULT_AUDIO_PARAMS
        self.mcp = McpClient(self._send_payload, self._on_notification)
        self.hello: DeviceHello | None = None
        self.server_info: dict[str, Any] = {}
        self.tools: dict[str, Tool] = {}
        self.status: dict[str, Any] | None = None
        self.ready = False
        self.closed = False
        self.close_reason: CloseReason | None = None
        self.audio_frames = 0
        self.audio_bytes = 0
        self.malformed_audio_frames = 0
        self._malformed_frames = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._keepalive_task: asyncio.Task[None] | None = None
        self._life: Lifecycle = (
            AlwaysOnLifecycle(self)
            if link.always_on
            else OnDemandLifecycle(self, hello_timeout)
        )

    # --- life cycle -----------------------------------------------------

    @property
    def closing(self) -> bool:
        """Return True once the link is being closed (or is gone)."""
        return self.close_reason is not None

    def start(self) -> None:
        """Start waiting for the device's hello (on an always-on link: talk)."""
        if not self.closed:
            self._life.start()

    @property
    def audio_open(self) -> bool:
        """Return True while the device can hear and be heard (a conversation)."""
        return self._life.audio_open

    async def close(self, reason: CloseReason, message: str = "") -> None:
        """Close the link; pending requests fail at once."""
        if self.close_reason is None:
            self.close_reason = reason
        self._life.stop()
        self.mcp.close(f"session closed: {reason}")
        try:
            await self.link.close(message or str(reason))
        except (ConnectionError, RuntimeError) as err:  # pragma: no cover
            _LOGGER.debug("Closing the link failed: %s", err)

    async def connection_lost(self) -> None:
        """Tear down after the connection ended, whatever ended it."""
        if self.closed:
            return
        self.closed = True
        self.ready = False
        self._life.stop()
        reason = self.close_reason or CloseReason.DEVICE_CLOSED
        self.close_reason = reason
        self.mcp.close(f"connection lost ({reason})")
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current]
        for task in tasks:
            task.cancel()
        # Report first: the connection's owner may itself be cancelled while
        # it waits for the tasks below (the web server does that to handlers
        # of closed connections).
        self._handler.session_closed(self, reason)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of this session (cancelled when it ends)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def set_keepalive(self, interval: float | None) -> None:
        """Start, restart or stop the keep-alive on a live session."""
        self._keepalive_interval = interval
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
            self._keepalive_task = None
        if interval and self.ready and not self.closed:
            self._keepalive_task = self.spawn(self._keepalive(interval))

    # --- incoming -------------------------------------------------------

    def feed_text(self, text: str) -> None:
        """Handle one JSON message from the device (nothing once closed)."""
        if self.closed:
            return
        try:
            frame = parse_frame(text)
        except ProtocolError as err:
            recovered = recover_error_reply(text)
            if recovered is not None:
                self.mcp.fail_request(*recovered)
                return
            self.malformed_frame(err, text)
            return
        kind = frame["type"]
        if kind == "mcp":
            answer = self.mcp.handle_payload(frame.get("payload"))
            if answer is not None:
                self.spawn(self._answer(answer))
        elif kind == "hello":
            self._life.on_hello(frame)
        elif self._life.refuses(kind, text):
            return
        elif kind == "goodbye":
            self._life.on_goodbye(frame)
        else:
            self.report_frame(frame)

    def report_frame(self, frame: dict[str, Any]) -> None:
        """Pass what the device did on to the handler."""
        self._handler.session_event(self, event_from_frame(frame))

    def feed_audio(self, payload: bytes, heard: Heard | None = None) -> None:
        """Handle one unframed Opus packet (``heard``: its UDP sequence, time)."""
        self.audio_frames += 1
        self.audio_bytes += len(payload)
        if self.hello is not None and not self.closed:
            self._handler.session_audio(self, payload, heard)

    def malformed_audio(self, err: Exception) -> None:
        """Note a binary frame the transport could not unframe.

        Audio arrives 16 times a second: one debug line per session says it.
        """
        self.malformed_audio_frames += 1
        if self.malformed_audio_frames == 1:
            _LOGGER.debug("Ignoring malformed audio frames (%s)", err)

    def malformed_frame(self, err: Exception, text: str) -> None:
        """Note a frame that breaks the protocol: one warning, then debug."""
        self._malformed_frames += 1
        level = logging.WARNING if self._malformed_frames == 1 else logging.DEBUG
        _LOGGER.log(level, "Ignoring malformed frame (%s): %.200r", err, text)

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        self._handler.session_event(self, notification_event(method, params))

    # --- outgoing -------------------------------------------------------

    async def send_frame(self, frame: dict[str, Any]) -> None:
        """Send a frame.

        Raises ConnectionClosedError when the link is gone and ProtocolError
        when the frame holds something JSON cannot carry.
        """
        subject = str(frame.get("type"))
        if self.closed:
            raise _closed("session closed", subject)
        try:
            await self.link.send_text(dumps(frame))
        except (ConnectionError, RuntimeError) as err:
            raise _closed(str(err), subject) from err

    async def send_audio(self, payload: bytes, timestamp: int = 0) -> None:
        """Send one Opus packet; raises ConnectionClosedError when gone."""
        if self.closed:
            raise _closed("session closed", "audio")
        try:
            await self.link.send_audio(payload, timestamp)
        except (ConnectionError, RuntimeError) as err:
            raise _closed(str(err), "audio") from err
        except XiaozhiError as err:
            err.subject = "audio"
            raise

    async def _send_payload(self, payload: dict[str, Any]) -> None:
        await self.send_frame(mcp_frame(self.session_id, payload))

    async def _answer(self, payload: dict[str, Any]) -> None:
        """Answer a request of the device; nobody waits for this to succeed."""
        try:
            await self._send_payload(payload)
        except ConnectionClosedError as err:
            _LOGGER.debug("Could not answer the device: %s", err)

    async def end_conversation(self) -> None:
        """End the conversation as Home Assistant wants it ended.

        On an always-on link, ``goodbye`` closes the device's audio channel
        and the link stays. Over WebSocket the firmware has no such message:
        the conversation ends when the link closes.
        """
        await self._life.end_conversation()

    async def send_alert(
        self, status: str, message: str, emotion: str = "neutral"
    ) -> None:
        """Show a message on the device's screen."""
        try:
            await self.send_frame(
                alert_frame(self.session_id, status, message, emotion)
            )
        except XiaozhiError as err:
            err.subject = "alert"
            raise

    async def send_notify(self, audio_url: str, text: str) -> None:
        """Have an idle device fetch and play a sound (newer firmware)."""
        await self.send_frame(notify_frame(audio_url, text))

    async def send_tts(self, state: str, text: str | None = None) -> None:
        """Tell the device about speech: ``start``, ``stop``, ``sentence_start``."""
        await self.send_frame(tts_frame(self.session_id, state, text))

    async def send_stt(self, text: str) -> None:
        """Show the device what it heard."""
        await self.send_frame(stt_frame(self.session_id, text))

    async def send_emotion(self, emotion: str) -> None:
        """Show an emotion on the device."""
        await self.send_frame(llm_frame(self.session_id, emotion))

    @property
    def sample_rate(self) -> int:
        """Return the rate of audio sent to the device (the server hello's)."""
        return int(self.audio_params.get("sample_rate", SPEAKER_SAMPLE_RATE))

    @property
    def frame_duration(self) -> int:
        """Return the duration of one audio frame sent to the device, in ms."""
        return int(self.audio_params.get("frame_duration", FRAME_DURATION_MS))

    # --- MCP ------------------------------------------------------------

    def start_handshake(self) -> None:
        """Run the handshake: what the life cycle needs first, then MCP."""
        self.spawn(self._handshake())

    async def _handshake(self) -> None:
        try:
            if await self._life.before_mcp() and self._use_mcp:
                await self._mcp_handshake()
        except ConnectionClosedError:
            return
        except XiaozhiError as err:
            _LOGGER.warning("Device handshake failed: %s", err)
            await self.close(CloseReason.HANDSHAKE_FAILED, "handshake failed")
            return
        self.ready = True
        self._handler.session_ready(self)
        self.set_keepalive(self._keepalive_interval)

    async def _mcp_handshake(self) -> None:
        try:
            self.server_info = await self.mcp.initialize(
                self.vision_url, self.vision_token, self.request_timeout
            )
        except RequestTimeoutError:
            if self._life.mcp_required:
                raise
            _LOGGER.info("Device did not answer initialize: it offers no tools")
            return
        await self.list_tools()
        if STATUS_TOOL in self.tools:
            await self._refresh_status_quietly()

    async def list_tools(self) -> dict[str, Tool]:
        """Fetch every page of ``tools/list`` (user-only tools included)."""
        self.tools = await self.mcp.list_tools(self.request_timeout)
        return self.tools

    async def refresh(self) -> None:
        """Fetch the tool list and the status again."""
        try:
            await self.list_tools()
        except XiaozhiError as err:
            err.subject = "tools/list"
            raise
        self._handler.session_tools(self)
        if STATUS_TOOL in self.tools:
            await self.refresh_status()

    async def refresh_status(self) -> dict[str, Any] | None:
        """Ask the device for its status and report it."""
        result = await self.call_tool(STATUS_TOOL, {}, self.request_timeout)
        status = result.json
        if result.is_error or not isinstance(status, dict):
            _LOGGER.debug("Unusable device status: %.200r", result.text)
            return None
        self.status = status
        if self.ready:
            self._handler.session_status(self, status)
        return status

    async def _refresh_status_quietly(self) -> None:
        try:
            await self.refresh_status()
        except (McpError, ProtocolError, RequestTimeoutError) as err:
            _LOGGER.debug("Device status unavailable: %s", err)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> ToolResult:
        """Call a tool; a JSON-RPC error comes back as an error result."""
        return await self.mcp.call_tool(
            name, arguments, timeout if timeout is not None else self.call_timeout
        )

    async def _keepalive(self, interval: float) -> None:
        """Talk to the device often enough that it keeps the link open."""
        while True:
            await asyncio.sleep(interval)
            try:
                if STATUS_TOOL in self.tools:
                    await self.refresh_status()
                else:
                    # Any answer counts as traffic; the firmware answers an
                    # unknown method with an error.
                    await self.mcp.request("ping", None, self.request_timeout)
            except ConnectionClosedError:
                return
            except XiaozhiError as err:
                _LOGGER.debug("Keep-alive request failed: %s", err)


def _closed(message: str, subject: str) -> ConnectionClosedError:
    """Return the error of a send on a link that is gone; ``subject`` was sent."""
    err = ConnectionClosedError(message)
    err.subject = subject
    return err
