"""Protocol failures as translated Home Assistant errors, in one place.

Everything the runtime offers (commands, the voice channel) raises only
:class:`HomeAssistantError` subclasses with a translation key; this module
is the one place that maps the protocol's own errors onto them.
"""

from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Any, Concatenate, Protocol

from homeassistant.exceptions import HomeAssistantError, ServiceValidationError

from .const import DOMAIN
from .protocol import (
    ArgumentError,
    ConnectionClosedError,
    NoAudioAddressError,
    RequestTimeoutError,
    XiaozhiError,
)


class DeviceUnavailableError(HomeAssistantError):
    """The device cannot be reached now: not connected, or its link went away."""


class Named(Protocol):
    """Something with a name users know: the device a command is for."""

    @property
    def name(self) -> str:
        """Return the name."""


def device_error(err: XiaozhiError, name: str) -> HomeAssistantError:
    """Return the translated Home Assistant error for a protocol failure."""
    placeholders = {"tool": err.subject or "request", "name": name}
    if isinstance(err, ArgumentError):
        return ServiceValidationError(
            translation_domain=DOMAIN,
            translation_key=err.reason,
            translation_placeholders={**placeholders, **err.placeholders},
        )
    if isinstance(err, NoAudioAddressError):
        return DeviceUnavailableError(
            translation_domain=DOMAIN,
            translation_key="no_audio_address",
            translation_placeholders={"name": name},
        )
    if isinstance(err, ConnectionClosedError):
        return DeviceUnavailableError(
            translation_domain=DOMAIN,
            translation_key="connection_lost",
            translation_placeholders=placeholders,
        )
    if isinstance(err, RequestTimeoutError):
        key = "timeout"
    else:
        key = "device_error"
        placeholders["error"] = str(err)
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key=key,
        translation_placeholders=placeholders,
    )


def device_command[SelfT: Named, **P, R](
    func: Callable[Concatenate[SelfT, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SelfT, P], Coroutine[Any, Any, R]]:
    """Decorate a command so that protocol failures reach the user translated."""

    @wraps(func)
    async def handler(self: SelfT, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await func(self, *args, **kwargs)
        except XiaozhiError as err:
            raise device_error(err, self.name) from err

    return handler  # type: ignore[return-value]


def translated_error(key: str, name: str, **placeholders: str) -> HomeAssistantError:
    """Return a translated error about the device ``name``."""
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key=key,
        translation_placeholders={"name": name, **placeholders},
    )


def not_connected(name: str) -> DeviceUnavailableError:
    """Return the error of a command for a device that is not connected."""
    return DeviceUnavailableError(
        translation_domain=DOMAIN,
        translation_key="not_connected",
        translation_placeholders={"name": name},
    )
