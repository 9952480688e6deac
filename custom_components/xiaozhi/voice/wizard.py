"""The "Set up voice assistant" wizard's connection test, as the device sees it.

The wizard announces a sound on Home Assistant's connection test URL and
waits for a fetch of it. The device fetches our stream of it, and the sound
is fetched only then, so the test passes only when the device reached Home
Assistant. When the device cannot play it, the wizard can only say it timed
out: the reason is shown in a notification in the user's language, with what
to do about it, and nothing is left as a failed background task (a
traceback in the log).
"""

from collections.abc import Awaitable
from typing import Final

from homeassistant.components import persistent_notification
from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..entry_data import XiaozhiEntryData
from ..texts import async_device_text

CONNECTION_TEST_PATH: Final = "/api/assist_satellite/connection_test/"


def is_connection_test(announcement: AssistSatelliteAnnouncement) -> bool:
    """Return True for the wizard's connection test sound."""
    return announcement.original_media_id.startswith(CONNECTION_TEST_PATH)


async def async_connection_test(
    hass: HomeAssistant,
    name: str,
    mac: str,
    announce: Awaitable[None],
    device: XiaozhiEntryData,
) -> None:
    """Play the test sound; say why, and what to do, when it cannot be played.

    The notification is in the user's language. A device whose firmware
    plays sounds only in a conversation can pass the test while it listens
    (the sound then goes on its open audio), or once it is updated.
    """
    notification_id = f"{DOMAIN}_connection_test_{mac}"
    try:
        await announce
    except HomeAssistantError as err:
        LOGGER.warning("%s could not play the connection test sound: %s", name, err)
        placeholders = {"name": name, "firmware": device.firmware or "unknown"}
        # Learnt while it tried (``media/notify.py``).
        if device.plays_notify is False:
            message = await async_device_text(
                hass, "connection_test_needs_conversation", placeholders
            )
        else:
            reason = (
                await async_device_text(
                    hass, err.translation_key, err.translation_placeholders
                )
                if err.translation_key
                else str(err)
            )
            hint = await async_device_text(hass, "connection_test_hint", placeholders)
            message = f"{reason}\n\n{hint}"
        persistent_notification.async_create(
            hass, message, title=name, notification_id=notification_id
        )
    else:
        persistent_notification.async_dismiss(hass, notification_id)
