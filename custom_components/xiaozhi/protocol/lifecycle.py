"""The two life cycles of a device's link, one per kind of transport.

- :class:`OnDemandLifecycle` (WebSocket): the device dials for a
  conversation. Its hello opens the link and starts the handshake; closing
  the link ends the conversation.
- :class:`AlwaysOnLifecycle` (MQTT + UDP): the link is up from boot and the
  handshake runs at once (MCP works without audio). Each device hello opens
  an audio channel for a conversation, and ``goodbye`` (from either side)
  closes it.

A :class:`~.session.DeviceSession` owns one of them and asks it whatever
depends on the kind of link.
"""

import asyncio
from collections.abc import Coroutine
import logging
import secrets
from typing import Any, Protocol

from .errors import ConnectionClosedError, ProtocolError
from .link import CloseReason, Link
from .messages import DeviceHello, goodbye_frame, server_hello

_LOGGER = logging.getLogger(__name__)


class LifecycleHost(Protocol):
    """The session a life cycle serves, as far as it needs it."""

    link: Link
    hello: DeviceHello | None
    session_id: str
    audio_params: dict[str, Any]

    @property
    def closed(self) -> bool:
        """Return True once the connection is gone."""

    @property
    def closing(self) -> bool:
        """Return True once Home Assistant decided to close the link."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the session."""

    async def send_frame(self, frame: dict[str, Any]) -> None:
        """Send a frame."""

    def start_handshake(self) -> None:
        """Run the handshake."""

    def report_frame(self, frame: dict[str, Any]) -> None:
        """Pass what the device did on to the handler."""

    def malformed_frame(self, err: Exception, text: str) -> None:
        """Note a frame that breaks the protocol."""

    async def close(self, reason: CloseReason, message: str = "") -> None:
        """Close the link; pending requests fail at once."""


class Lifecycle(Protocol):
    """What differs between an on-demand and an always-on link."""

    @property
    def audio_open(self) -> bool:
        """Return True while the device can hear and be heard."""

    @property
    def mcp_required(self) -> bool:
        """Return True when a device that does not answer MCP is a failure."""

    def start(self) -> None:
        """Begin: wait for the hello, or talk at once."""

    def on_hello(self, frame: dict[str, Any]) -> None:
        """Take a hello from the device."""

    def refuses(self, kind: str, text: str) -> bool:
        """Return True (and log why) when a frame of this kind is not taken now."""

    def on_goodbye(self, frame: dict[str, Any]) -> None:
        """Take a goodbye from the device."""

    async def before_mcp(self) -> bool:
        """Do what comes before MCP; return True when MCP should run."""

    async def end_conversation(self) -> None:
        """End the conversation as Home Assistant wants it ended."""

    def stop(self) -> None:
        """Forget timers and audio: the session is over."""


class OnDemandLifecycle:
    """A link the device opens for a conversation (WebSocket)."""

    def __init__(self, session: LifecycleHost, hello_timeout: float) -> None:
        """Serve ``session``; the hello must come within ``hello_timeout``."""
        self._session = session
        self._hello_timeout = hello_timeout
        self._hello_timer: asyncio.TimerHandle | None = None
        self._started = False

    @property
    def audio_open(self) -> bool:
        """Return True once the hello came: audio shares the link."""
        return self._session.hello is not None and not self._session.closed

    @property
    def mcp_required(self) -> bool:
        """Return True: a device that announced MCP must answer it."""
        return True

    def start(self) -> None:
        """Start waiting for the device's hello."""
        if self._started:
            return
        self._started = True
        self._hello_timer = asyncio.get_running_loop().call_later(
            self._hello_timeout, self._hello_expired
        )

    def _hello_expired(self) -> None:
        self._hello_timer = None
        _LOGGER.warning("Device sent no hello within %g s", self._hello_timeout)
        self._session.spawn(self._session.close(CloseReason.HELLO_TIMEOUT, "no hello"))

    def on_hello(self, frame: dict[str, Any]) -> None:
        """Take the first hello; a second one is ignored."""
        session = self._session
        if session.hello is not None:
            _LOGGER.debug("Ignoring a second hello")
            return
        if session.closing:
            return
        self.stop()
        session.hello = DeviceHello.from_frame(frame)
        session.start_handshake()

    def refuses(self, kind: str, text: str) -> bool:
        """Refuse everything but the hello until it came."""
        if self._session.hello is not None:
            return False
        self._session.malformed_frame(ProtocolError(f"{kind!r} before hello"), text)
        return True

    def on_goodbye(self, frame: dict[str, Any]) -> None:
        """Pass a goodbye on as an event: the link closes next."""
        self._session.report_frame(frame)

    async def before_mcp(self) -> bool:
        """Answer the hello; MCP runs when the device announced it."""
        session = self._session
        hello = session.hello
        if hello is None:  # pragma: no cover - the handshake follows the hello
            raise ProtocolError("handshake before hello")
        await session.send_frame(
            server_hello(
                session.session_id, session.audio_params, session.link.open_audio(hello)
            )
        )
        return hello.supports_mcp

    async def end_conversation(self) -> None:
        """Close the link: the firmware has no message that makes it idle."""
        await self._session.close(CloseReason.CONVERSATION_ENDED, "conversation ended")

    def stop(self) -> None:
        """Stop waiting for the hello."""
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None


class AlwaysOnLifecycle:
    """A link that is up from boot, with an audio channel per conversation."""

    def __init__(self, session: LifecycleHost) -> None:
        """Serve ``session``."""
        self._session = session
        self._audio_open = False
        self._started = False

    @property
    def audio_open(self) -> bool:
        """Return True while a conversation's audio channel is open."""
        return self._audio_open and not self._session.closed

    @property
    def mcp_required(self) -> bool:
        """Return False: no hello says whether the device has MCP.

        Firmware from before MCP does not answer ``initialize``.
        """
        return False

    def start(self) -> None:
        """Run the handshake at once: MCP works without audio."""
        if not self._started:
            self._started = True
            self._session.start_handshake()

    def on_hello(self, frame: dict[str, Any]) -> None:
        """Open a conversation: a fresh session id and audio channel.

        The device's ``goodbye`` names the session id, so each conversation
        gets its own.
        """
        session = self._session
        if session.closing:
            return
        hello = session.hello = DeviceHello.from_frame(frame)
        self._close_audio()
        session.session_id = secrets.token_hex(8)
        fields = session.link.open_audio(hello)
        self._audio_open = True
        frame = server_hello(session.session_id, session.audio_params, fields)
        session.spawn(self._send_hello(frame))

    async def _send_hello(self, frame: dict[str, Any]) -> None:
        try:
            await self._session.send_frame(frame)
        except ConnectionClosedError as err:
            _LOGGER.debug("Could not send the hello: %s", err)

    def refuses(self, kind: str, text: str) -> bool:
        """Refuse ``listen`` after the conversation ended.

        A device in auto mode listens again after ``tts stop``; what it sent
        before it saw our goodbye belongs to nothing.
        """
        if kind != "listen" or self._audio_open:
            return False
        _LOGGER.debug("Ignoring listen after the conversation ended")
        return True

    def on_goodbye(self, frame: dict[str, Any]) -> None:
        """Close the audio channel the device closed; the link stays."""
        session = self._session
        if frame.get("session_id") != session.session_id or not self._audio_open:
            _LOGGER.debug("Ignoring a goodbye for another conversation")
            return
        self._close_audio()
        session.report_frame(frame)

    async def before_mcp(self) -> bool:
        """Nothing comes first; MCP always runs."""
        return True

    async def end_conversation(self) -> None:
        """Send ``goodbye``: the device closes its audio channel and idles."""
        if not self._audio_open:
            return
        self._close_audio()
        await self._session.send_frame(goodbye_frame(self._session.session_id))

    def _close_audio(self) -> None:
        if self._audio_open:
            self._audio_open = False
            self._session.link.close_audio()

    def stop(self) -> None:
        """Close the audio channel."""
        self._close_audio()
