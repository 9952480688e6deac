"""Turn protocol failures into translated Home Assistant errors, in one place."""

from collections.abc import Callable, Coroutine
from contextlib import suppress
from functools import wraps
from typing import Any, Concatenate, Protocol

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers.translation import async_get_translations

from .const import DOMAIN
from .protocol import (
    ArgumentError,
    ConnectionClosedError,
    RequestTimeoutError,
    XiaozhiError,
)


class Named(Protocol):
    """Something with a name users know: the device a command is for."""

    @property
    def name(self) -> str:
        """Return the name."""


def device_error(err: XiaozhiError, name: str) -> HomeAssistantError:
    """Return the translated Home Assistant error for a protocol failure."""
    placeholders = {"tool": err.subject or "?", "name": name}
    if isinstance(err, ArgumentError):
        return ServiceValidationError(
            translation_domain=DOMAIN,
            translation_key=err.reason,
            translation_placeholders={**placeholders, **err.placeholders},
        )
    if isinstance(err, RequestTimeoutError):
        key = "timeout"
    elif isinstance(err, ConnectionClosedError):
        key = "connection_lost"
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


def device_base_url(hass: HomeAssistant, origin: str) -> str:
    """Return the address devices use to reach Home Assistant.

    The configured internal URL wins; without one, ``origin``, the address
    the device itself used, is the one known to work for it.
    """
    return (hass.config.internal_url or origin).rstrip("/")


async def async_device_text(
    hass: HomeAssistant, key: str, placeholders: dict[str, str] | None = None
) -> str:
    """Return a short text for the device's screen, in the user's language.

    The texts are the integration's translated ``exceptions`` messages.
    """
    language = hass.config.language
    translations = await async_get_translations(hass, language, "exceptions", [DOMAIN])
    message = translations.get(f"component.{DOMAIN}.exceptions.{key}.message", key)
    with suppress(KeyError, IndexError):
        message = message.format(**(placeholders or {}))
    return message
