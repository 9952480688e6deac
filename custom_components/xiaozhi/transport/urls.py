"""The addresses a device uses to reach Home Assistant."""

from homeassistant.core import HomeAssistant

from ..const import URL_WEBSOCKET


def device_base_url(hass: HomeAssistant, origin: str) -> str:
    """Return the address devices use to reach Home Assistant.

    The configured internal URL wins; without one, ``origin``, the address
    the device itself used, is the one known to work for it.
    """
    return (hass.config.internal_url or origin).rstrip("/")


def websocket_url(base: str) -> str:
    """Return the WebSocket URL a device should dial, for a base address."""
    if base.startswith("https://"):
        base = "wss://" + base.removeprefix("https://")
    elif base.startswith("http://"):
        base = "ws://" + base.removeprefix("http://")
    return base.rstrip("/") + URL_WEBSOCKET
