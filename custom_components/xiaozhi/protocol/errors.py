"""Exceptions raised by the protocol layer.

Every failure a caller can see derives from :class:`XiaozhiError`, so the
Home Assistant side can turn all of them into one translated error.
"""

from typing import Any


class XiaozhiError(Exception):
    """Base class of every protocol-level failure.

    ``subject`` names what failed (a tool, ``alert``, ``tools/list``) once a
    caller knows it, for the message a user sees.
    """

    subject: str | None = None
    # What the message says when the failure came without one (a bare
    # ConnectionResetError, a device's error with an empty message).
    default_reason = "no reason given"

    def __str__(self) -> str:
        """Return the message, never empty."""
        return super().__str__() or self.default_reason


class ProtocolError(XiaozhiError):
    """A frame from the device does not follow the protocol."""


class ConnectionClosedError(XiaozhiError):
    """The link to the device is gone; the request cannot complete."""

    default_reason = "the connection closed"


class NoAudioAddressError(ConnectionClosedError):
    """Nowhere to send audio: the device has sent none on its UDP channel.

    The channel learns the device's UDP address from its first audio
    packet. Firmware always sends audio first; a text client may type its
    first question before its microphone sends anything.
    """


class RequestTimeoutError(XiaozhiError):
    """The device did not answer a request in time."""

    def __init__(self, method: str, timeout: float) -> None:
        """Remember which request timed out and after how long."""
        super().__init__(f"{method} got no answer within {timeout:g} s")
        self.subject = self.method = method
        self.timeout = timeout


class McpError(XiaozhiError):
    """The device answered a JSON-RPC request with an error."""

    def __init__(self, message: str, code: int | None = None) -> None:
        """Keep the device's message and its code when it sent one."""
        super().__init__(message)
        self.message = message
        self.code = code


class ArgumentError(XiaozhiError):
    """Tool arguments do not match the tool's input schema.

    ``reason`` is a stable key (``missing_argument``, ``unknown_argument``,
    ``invalid_type``, ``out_of_range``, ``invalid_choice``) that a user
    interface can translate, with ``placeholders`` for the message.
    """

    def __init__(self, reason: str, argument: str, **details: Any) -> None:
        """Store the reason key and the values a message needs."""
        self.reason = reason
        self.argument = argument
        self.placeholders: dict[str, str] = {
            "argument": argument,
            **{key: str(value) for key, value in details.items()},
        }
        super().__init__(f"{reason}: {argument} {details or ''}".rstrip())


class MediaSourceError(Exception):
    """A sound that cannot be fetched or decoded (not the device's fault)."""

    def __str__(self) -> str:
        """Return the reason, never an empty one."""
        return super().__str__() or "the sound cannot be read"
