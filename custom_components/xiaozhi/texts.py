"""Short texts a device shows or says, in the user's language."""

from contextlib import suppress

from homeassistant.core import HomeAssistant
from homeassistant.helpers.translation import async_get_translations

from .const import DOMAIN


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
