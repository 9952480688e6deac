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

from .texts import async_device_text


class DownloadTooLargeError(aiohttp.ClientPayloadError):
    """A body larger than the download's limit."""

    def __init__(self, limit: int) -> None:
        """Say the limit (bytes)."""
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


def describe_failure(url: str, err: BaseException) -> tuple[str, str]:
    """Return the URL to show (no query) and what went wrong."""
    shown = str(URL(url).with_query(None))
    if isinstance(err, aiohttp.ClientResponseError):
        return shown, f"HTTP {err.status} {err.message}".strip()
    return shown, (str(err) or type(err).__name__).replace(url, shown)


async def async_describe_failure(
    hass: HomeAssistant, url: str, err: BaseException
) -> tuple[str, str]:
    """Return the URL to show (no query) and what went wrong, in the user's words.

    For errors shown inside translated messages: no system or library text,
    which is English (and says more than the user needs).
    """
    shown = str(URL(url).with_query(None))
    if isinstance(err, aiohttp.ClientResponseError):
        return shown, f"HTTP {err.status}"
    if isinstance(err, aiohttp.ClientConnectorDNSError):
        key = "net_no_host"
    elif isinstance(err, aiohttp.ClientConnectorError):
        key = "net_unreachable"
    elif isinstance(err, TimeoutError):
        key = "net_timeout"
    elif isinstance(err, DownloadTooLargeError):
        key = "net_too_large"
    elif isinstance(err, aiohttp.ClientPayloadError):
        key = "net_cut_short"
    else:
        key = "net_failed"
    host = URL(url).host or shown
    limit = err.limit // (1024 * 1024) if isinstance(err, DownloadTooLargeError) else 0
    return shown, await async_device_text(
        hass, key, {"host": host, "limit": str(limit)}
    )


async def async_download(
    hass: HomeAssistant, url: str, *, limit: int, timeout: float
) -> bytes:
    """Return the body at ``url``; raise aiohttp errors or TimeoutError.

    A body larger than ``limit`` bytes stops the download
    (``DownloadTooLargeError``).
    """
    session = async_get_clientsession(hass)
    async with asyncio.timeout(timeout), session.get(url) as response:
        response.raise_for_status()
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > limit:
                raise DownloadTooLargeError(limit)
        return bytes(body)
