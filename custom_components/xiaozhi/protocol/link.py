"""The transport-neutral seam: what a session needs from a connection."""

from enum import StrEnum
from typing import Any, Protocol

from .messages import DeviceHello


class CloseReason(StrEnum):
    """Why a session ended."""

    DEVICE_CLOSED = "device_closed"
    HELLO_TIMEOUT = "hello_timeout"
    BAD_HELLO = "bad_hello"
    HANDSHAKE_FAILED = "handshake_failed"
    REPLACED = "replaced"
    SERVER_CLOSED = "server_closed"
    CONVERSATION_ENDED = "conversation_ended"


class Link(Protocol):
    """The transport-neutral seam: what a session needs from a connection."""

    @property
    def transport(self) -> str:
        """Return the transport's name (``websocket``, ``mqtt``)."""

    @property
    def remote(self) -> str | None:
        """Return the device's address, when known."""

    @property
    def always_on(self) -> bool:
        """Return True when the link outlives conversations (MQTT)."""

    def open_audio(self, hello: DeviceHello) -> dict[str, Any]:
        """Open the audio of a conversation; return what the server hello adds.

        ``transport`` at least: the firmware reads it without a check.
        """

    def close_audio(self) -> None:
        """Close the audio of the conversation, if the transport has one apart."""

    async def send_text(self, text: str) -> None:
        """Send one JSON message; raise ConnectionError when the link is gone."""

    async def send_audio(self, payload: bytes, timestamp: int) -> None:
        """Send one Opus packet; raise ConnectionError when the link is gone.

        NoAudioAddressError: the transport does not know where to send audio
        (MQTT + UDP before the device's first audio).
        """

    async def close(self, message: str) -> None:
        """Close the connection."""
