"""Fetch a sound by URL: whole for an announcement, or as a live source.

Announcement media and the pre-announcement chime arrive as URLs (Home
Assistant resolves media sources into them); they are fetched with Home
Assistant's shared client session, within a size and time limit, and decoded
by PyAV in the executor. A media player's source may never end (internet
radio): :func:`async_open_source` hands its bytes over as they come.
"""

import asyncio
from dataclasses import dataclass
import io
from typing import Final

import aiohttp
from homeassistant.components import tts
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from ..const import DOMAIN
from ..download import async_describe_failure, async_download, describe_failure
from ..protocol import MediaSourceError
from ..protocol.audio.codec import decode_file, media_duration

TTS_SOURCE: Final = "media-source://tts/"
TTS_STREAM: Final = "-stream-/"
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
# What PyAV reads a text-to-speech result's extension as.
EXTENSION_FORMATS: Final = {"wav": "wav", "mp3": "mp3", "flac": "flac", "ogg": "ogg"}


async def async_media_error(
    hass: HomeAssistant, url: str, err: BaseException
) -> HomeAssistantError:
    """Return why the sound at ``url`` cannot be played, translated."""
    if isinstance(err, MediaSourceError):  # it came, but is no sound
        shown, error = describe_failure(url, err)
    else:
        shown, error = await async_describe_failure(hass, url, err)
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
    except (aiohttp.ClientError, TimeoutError, MediaSourceError) as err:
        raise await async_media_error(hass, url, err) from err


class LiveSource:
    """The body of a media URL, read as it arrives (it may never end)."""

    def __init__(self, url: str, response: aiohttp.ClientResponse) -> None:
        """Read the body of ``response``."""
        self.url = url
        self._response = response
        self.format_name = CONTAINER_FORMATS.get(response.content_type)

    async def read(self, size: int) -> bytes:
        """Return up to ``size`` bytes, b"" at the end.

        Raises MediaSourceError when the source stalls or breaks: the
        transcoder's thread ends with it.
        """
        try:
            async with asyncio.timeout(SOURCE_READ_TIMEOUT):
                return await self._response.content.read(size)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise MediaSourceError(describe_failure(self.url, err)[1]) from err

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
        raise await async_media_error(hass, url, err) from err
    return LiveSource(url, response)


class BytesSource:
    """A sound already at hand (a text-to-speech result), read like a URL's body."""

    def __init__(self, data: bytes, format_name: str | None) -> None:
        """Read ``data``."""
        self._data = io.BytesIO(data)
        self.format_name = format_name

    async def read(self, size: int) -> bytes:
        """Return up to ``size`` bytes, b"" at the end."""
        return self._data.read(size)

    def close(self) -> None:
        """Let the bytes go."""
        self._data.close()


@dataclass(frozen=True, slots=True)
class SpokenText:
    """A text-to-speech result, whole: its audio and what it says."""

    message: str
    media_id: str  # the same text, asked for as WAV
    audio: bytes
    format_name: str | None
    duration: float | None


def is_spoken_text(media_id: str) -> bool:
    """Return True for a text-to-speech media source (``tts.speak``'s)."""
    return media_id.startswith(TTS_SOURCE) and not media_id.removeprefix(
        TTS_SOURCE
    ).startswith(TTS_STREAM)


async def async_speak(hass: HomeAssistant, media_id: str) -> SpokenText:
    """Return a text-to-speech media source's audio, made without conversion.

    Unless the caller chose a format, WAV is asked for, as the satellite
    does: engines that make WAV (Piper, Wyoming) are then not converted,
    which needs the ffmpeg binary; PyAV reads whatever comes. Raises
    HomeAssistantError (``tts_failed``) naming the engine's failure.
    """
    try:
        parsed = tts.parse_media_source_id(media_id.removeprefix(TTS_SOURCE))
        if "stream" in parsed:
            raise HomeAssistantError("a stream, not a text")  # noqa: TRY301
        message, options = parsed["message"], parsed["options"]
        engine_options = dict(options["options"] or {})
        engine_options.setdefault(tts.ATTR_PREFERRED_FORMAT, "wav")
        wav_id = tts.generate_media_source_id(
            hass,
            message,
            options["engine"],
            options["language"],
            engine_options,
            options["use_file_cache"],
        )
        extension, audio = await tts.async_get_media_source_audio(hass, wav_id)
    except HomeAssistantError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="tts_failed",
            translation_placeholders={"error": str(err) or type(err).__name__},
        ) from err
    format_name = EXTENSION_FORMATS.get(extension)
    duration = await hass.async_add_executor_job(media_duration, audio, format_name)
    return SpokenText(message, wav_id, audio, format_name, duration)


async def async_open_spoken(spoken: SpokenText) -> BytesSource:
    """Return a text-to-speech result as a source to play."""
    return BytesSource(spoken.audio, spoken.format_name)
