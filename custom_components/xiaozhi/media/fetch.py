"""Fetch a sound by URL and decode it into PCM for a device's speaker.

Announcement media and the pre-announcement chime arrive as URLs (Home
Assistant resolves media sources into them); they are fetched with Home
Assistant's shared client session, within a size and time limit, and decoded
by PyAV in the executor.
"""

import asyncio
from typing import Final

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from yarl import URL

from ..const import DOMAIN
from ..protocol import ProtocolError
from ..protocol.audio.codec import decode_file

MAX_MEDIA_BYTES: Final = 10 * 1024 * 1024
MEDIA_TIMEOUT: Final = 30.0


async def async_fetch_pcm(hass: HomeAssistant, url: str, rate: int) -> list[bytes]:
    """Return the sound at ``url`` as 16-bit mono PCM chunks at ``rate``.

    Raises HomeAssistantError (``media_unavailable``) when it cannot be
    fetched or decoded, or is larger than 10 MB.
    """
    session = async_get_clientsession(hass)
    try:
        async with asyncio.timeout(MEDIA_TIMEOUT), session.get(url) as response:
            response.raise_for_status()
            body = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > MAX_MEDIA_BYTES:
                    raise aiohttp.ClientPayloadError("larger than 10 MB")
            data = bytes(body)
        return await hass.async_add_executor_job(lambda: list(decode_file(data, rate)))
    except (aiohttp.ClientError, TimeoutError, ProtocolError) as err:
        # Without its query: signed URLs carry their signature there, and
        # aiohttp's errors repeat the whole URL.
        shown = str(URL(url).with_query(None))
        if isinstance(err, aiohttp.ClientResponseError):
            error = f"HTTP {err.status} {err.message}".strip()
        else:
            error = (str(err) or type(err).__name__).replace(url, shown)
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="media_unavailable",
            translation_placeholders={"url": shown, "error": error},
        ) from err
