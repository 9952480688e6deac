"""Downloads by URL with Home Assistant's shared session, within limits.

Announcement sounds and firmware files are fetched whole: within a time and
size limit, and described without the URL's query when they fail (signed
URLs carry their signature there, and aiohttp's errors repeat the URL).
"""

import asyncio

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from yarl import URL


def describe_failure(url: str, err: BaseException) -> tuple[str, str]:
    """Return the URL to show (no query) and what went wrong."""
    shown = str(URL(url).with_query(None))
    if isinstance(err, aiohttp.ClientResponseError):
        return shown, f"HTTP {err.status} {err.message}".strip()
    return shown, (str(err) or type(err).__name__).replace(url, shown)


async def async_download(
    hass: HomeAssistant, url: str, *, limit: int, timeout: float
) -> bytes:
    """Return the body at ``url``; raise aiohttp errors or TimeoutError.

    A body larger than ``limit`` bytes stops the download
    (``ClientPayloadError``).
    """
    session = async_get_clientsession(hass)
    async with asyncio.timeout(timeout), session.get(url) as response:
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > limit:
                raise aiohttp.ClientPayloadError(f"larger than {limit} bytes")
        return bytes(body)
