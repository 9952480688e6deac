"""Fetch a sound by URL: whole for an announcement, or as a live source.

Announcement media and the pre-announcement chime arrive as URLs (Home
Assistant resolves media sources into them); they are fetched with Home
Assistant's shared client session, within a size and time limit, and decoded
by PyAV in the executor. A media player's source may never end (internet
radio): :func:`async_open_source` hands its bytes over as they come.
"""

import asyncio
from typing import Final

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from ..const import DOMAIN
from ..download import async_download, describe_failure
from ..protocol import ProtocolError
from ..protocol.audio.codec import decode_file

MAX_MEDIA_BYTES: Final = 10 * 1024 * 1024
MEDIA_TIMEOUT: Final = 30.0
# A live source: the answer's headers, then every later read.
SOURCE_CONNECT_TIMEOUT: Final = 10.0
SOURCE_READ_TIMEOUT: Final = 15.0
# What PyAV reads a content type as; others are probed.
CONTAINER_FORMATS: Final = {
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/aac": "aac",
    "audio/aacp": "aac",
    "audio/flac": "flac",
    "audio/x-flac": "flac",
    "audio/ogg": "ogg",
    "application/ogg": "ogg",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
}


def media_error(url: str, err: BaseException) -> HomeAssistantError:
    """Return why the sound at ``url`` cannot be played, translated."""
    shown, error = describe_failure(url, err)
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key="media_unavailable",
        translation_placeholders={"url": shown, "error": error},
    )


async def async_fetch_pcm(hass: HomeAssistant, url: str, rate: int) -> list[bytes]:
    """Return the sound at ``url`` as 16-bit mono PCM chunks at ``rate``.

    Raises HomeAssistantError (``media_unavailable``) when it cannot be
    fetched or decoded, or is larger than 10 MB.
    """
    try:
        data = await async_download(
            hass, url, limit=MAX_MEDIA_BYTES, timeout=MEDIA_TIMEOUT
        )
        return await hass.async_add_executor_job(lambda: list(decode_file(data, rate)))
    except (aiohttp.ClientError, TimeoutError, ProtocolError) as err:
        raise media_error(url, err) from err


class LiveSource:
    """The body of a media URL, read as it arrives (it may never end)."""

    def __init__(self, url: str, response: aiohttp.ClientResponse) -> None:
        """Read the body of ``response``."""
        self.url = url
        self._response = response
        self.format_name = CONTAINER_FORMATS.get(response.content_type)

    async def read(self, size: int) -> bytes:
        """Return up to ``size`` bytes, b"" at the end.

        Raises ProtocolError when the source stalls or breaks: the
        transcoder's thread ends with it.
        """
        try:
            async with asyncio.timeout(SOURCE_READ_TIMEOUT):
                return await self._response.content.read(size)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise ProtocolError(describe_failure(self.url, err)[1]) from err

    def close(self) -> None:
        """Drop the connection."""
        self._response.close()


async def async_open_source(hass: HomeAssistant, url: str) -> LiveSource:
    """Start fetching ``url``; raise ``media_unavailable`` when it cannot be."""
    session = async_get_clientsession(hass)
    try:
        async with asyncio.timeout(SOURCE_CONNECT_TIMEOUT):
            response = await session.get(url)
        if response.status >= 400:
            response.release()
            response.raise_for_status()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise media_error(url, err) from err
    return LiveSource(url, response)
