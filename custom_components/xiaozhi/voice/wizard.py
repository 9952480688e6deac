"""The "Set up voice assistant" wizard's connection test, as the device sees it.

The wizard announces a sound on Home Assistant's connection test URL and
waits for a fetch of it. The device fetches our stream of it, and the sound
is fetched only then, so the test passes only when the device reached Home
Assistant. When the device cannot play it, the wizard can only say it timed
out: the reason is shown in a notification, and nothing is left as a failed
background task (a traceback in the log).
"""

from collections.abc import Awaitable
from typing import Final

from homeassistant.components import persistent_notification
from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER

CONNECTION_TEST_PATH: Final = "/api/assist_satellite/connection_test/"


def is_connection_test(announcement: AssistSatelliteAnnouncement) -> bool:
    """Return True for the wizard's connection test sound."""
    return announcement.original_media_id.startswith(CONNECTION_TEST_PATH)


async def async_connection_test(
    hass: HomeAssistant, name: str, mac: str, announce: Awaitable[None]
) -> None:
    """Play the test sound; say why in a notification when it cannot be played."""
    notification_id = f"{DOMAIN}_connection_test_{mac}"
    try:
        await announce
    except HomeAssistantError as err:
        LOGGER.warning("%s could not play the connection test sound: %s", name, err)
        persistent_notification.async_create(
            hass, str(err), title=name, notification_id=notification_id
        )
    else:
        persistent_notification.async_dismiss(hass, notification_id)
