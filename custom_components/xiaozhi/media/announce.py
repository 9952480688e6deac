"""Announcements: a message (and its sound) played on a device.

Three ways, by what the device can do now:

- in a conversation its audio is open: ``tts start``, the text, the sound
  as paced Opus, ``tts stop``;
- idle on an always-on link, on firmware that plays ``notify``: the sound is
  served once as Ogg Opus and the device fetches and plays it;
- idle on older firmware: the text is shown with the device's alert sound.
"""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
import contextlib
from typing import Final

from homeassistant.components import tts
from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import DeviceUnavailableError, translated_error
from ..protocol import MediaSourceError
from ..protocol.audio import SPEAKER_SAMPLE_RATE
from ..protocol.audio.ogg import Chunk, OggOpusWriter
from ..protocol.audio.pacing import TTS_START_SETTLE
from ..speaker.channel import VoiceChannel
from ..speaker.speech import play_audio, stream_pcm
from .fetch import async_fetch_pcm
from .notify import NotifyStream, async_notify

ANNOUNCER: Final = "Home Assistant"  # the alert's title line


def _failed(name: str, err: BaseException) -> HomeAssistantError:
    return translated_error(
        "announce_failed", name, error=str(err) or type(err).__name__
    )


class Announcer:
    """Plays announcements on one device, one at a time."""

    def __init__(
        self, hass: HomeAssistant, name: str, device: XiaozhiEntryData
    ) -> None:
        """Announce on the device ``name``; what it plays is learnt into ``device``."""
        self.hass = hass
        self._name = name
        self._device = device
        self._playback: asyncio.Task[None] | None = None
        # Playbacks cut short that still owe the device their tts stop.
        self._stop_when_cut: set[asyncio.Task[None]] = set()

    @property
    def playing(self) -> bool:
        """Return True while an announcement plays on the open audio."""
        return self._playback is not None

    def cancel(self, *, say_stop: bool = False) -> None:
        """Cut the announcement that plays on the open audio short.

        ``tts stop`` follows only with ``say_stop``: otherwise the device
        started a turn of its own or is gone, and a stop would reach what it
        does next.
        """
        if self._playback is not None:
            if say_stop:
                self._stop_when_cut.add(self._playback)
            self._playback.cancel()

    async def async_stopped(self) -> None:
        """Wait until the playback that was cut short has said ``tts stop``."""
        if (playback := self._playback) is not None:
            await asyncio.wait({playback})

    @staticmethod
    def channel(channel: VoiceChannel | None, name: str) -> VoiceChannel:
        """Return the live session's channel, or say the device cannot be reached."""
        if channel is None:
            raise translated_error("announce_not_connected", name)
        return channel

    async def async_announce(
        self, channel: VoiceChannel, announcement: AssistSatelliteAnnouncement
    ) -> bool:
        """Play an announcement however the device can; return once played.

        Returns True when it played to its end on the open audio (the device
        then listens again, unless the caller ends the conversation); False
        when it was cut short (an abort) or played while the device was idle
        (it goes back to idle by itself, and a conversation the user started
        meanwhile is theirs). Raises HomeAssistantError
        (``announce_not_connected``, ``announce_failed``,
        ``announce_needs_text``, ``media_unavailable``) when it cannot be
        played.
        """
        if not channel.open and channel.idle_reachable:
            await self._async_announce_idle(channel, announcement)
            return False
        return await self.async_play(channel, announcement)

    async def async_play(
        self, channel: VoiceChannel, announcement: AssistSatelliteAnnouncement
    ) -> bool:
        """Play on the open audio; return False when it was cut short (abort)."""
        task = self._playback = self.hass.async_create_background_task(
            self._play(channel, announcement),
            f"xiaozhi announcement on {channel.name}",
        )
        # An abort cancels the playback; it must not end the announcer in error.
        await asyncio.wait({task})
        if self._playback is task:
            self._playback = None
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            raise _failed(channel.name, failure) from failure
        return not task.cancelled()

    async def _play(
        self, channel: VoiceChannel, announcement: AssistSatelliteAnnouncement
    ) -> None:
        await channel.async_start_speaking()
        started = self.hass.loop.time()
        cut = False
        try:
            if announcement.message:
                await channel.async_show_sentence(announcement.message)
            await play_audio(
                channel,
                self._pcm(announcement, channel.sample_rate),
                not_before=started + TTS_START_SETTLE,
            )
        except asyncio.CancelledError:
            playback = asyncio.current_task()
            cut = playback not in self._stop_when_cut
            self._stop_when_cut.discard(playback)
            raise
        finally:
            if not cut:
                with contextlib.suppress(HomeAssistantError):
                    await channel.async_stop_speaking()

    async def _async_announce_idle(
        self, channel: VoiceChannel, announcement: AssistSatelliteAnnouncement
    ) -> None:
        device = self._device
        name, firmware = channel.name, device.firmware or "unknown"
        text = announcement.message
        try:
            # Whether the firmware plays notify sounds is learnt by trying
            # (``async_notify``): its version does not tell.
            if device.plays_notify is not False and channel.urls is not None:
                stream = NotifyStream(name, lambda: self._ogg(announcement))
                if await async_notify(channel, device, stream, text):
                    # Played in real time: over once the device played it.
                    await asyncio.shield(stream.finished)
                    return
                LOGGER.info("%s did not fetch the announcement; showing its text", name)
            else:
                LOGGER.info(
                    "%s plays sounds only in a conversation (firmware %s); "
                    "showing the announcement's text with its alert sound",
                    name,
                    firmware,
                )
            if not text:
                raise translated_error("announce_needs_text", name)
            await channel.async_show_alert(ANNOUNCER, text, "neutral")
        except DeviceUnavailableError as err:
            raise _failed(name, err) from err

    async def _ogg(
        self, announcement: AssistSatelliteAnnouncement
    ) -> tuple[AsyncIterator[Chunk], Callable[[], Awaitable[None]]]:
        """Return the announcement as Ogg Opus pages, made once the device asks.

        The device plays its own chime first, so the pre-announcement is left
        out. The sound is fetched only now: a sound the device never asked
        for is never fetched (the connection test relies on that).
        """
        writer = OggOpusWriter()
        pcm = self._pcm(announcement, SPEAKER_SAMPLE_RATE, preannounce=False)

        async def pages() -> AsyncIterator[Chunk]:
            try:
                async for piece in pcm:
                    for chunk in await self.hass.async_add_executor_job(
                        writer.feed, piece
                    ):
                        yield chunk
            except HomeAssistantError as err:
                raise MediaSourceError(str(err)) from err
            for chunk in writer.close():
                yield chunk

        async def close() -> None:
            await pcm.aclose()

        return pages(), close

    async def _pcm(
        self,
        announcement: AssistSatelliteAnnouncement,
        rate: int,
        *,
        preannounce: bool = True,
    ) -> AsyncGenerator[bytes]:
        """Yield the announcement's sound: the chime, then the message."""
        if preannounce and announcement.preannounce_media_id:
            try:
                chime = await async_fetch_pcm(
                    self.hass, announcement.preannounce_media_id, rate
                )
            except HomeAssistantError as err:
                # The chime only announces the message: the message goes on.
                LOGGER.warning("%s: no chime before the message: %s", self._name, err)
                chime = []
            for pcm in chime:
                yield pcm
        if announcement.media_id_source == "tts" and announcement.tts_token:
            stream = tts.async_get_stream(self.hass, announcement.tts_token)
            if stream is None:
                raise HomeAssistantError(
                    translation_domain=DOMAIN,
                    translation_key="media_unavailable",
                    translation_placeholders={
                        "url": announcement.original_media_id,
                        "error": "gone",
                    },
                )
            async for pcm in stream_pcm(self.hass, stream, rate):
                yield pcm
        else:
            for pcm in await async_fetch_pcm(self.hass, announcement.media_id, rate):
                yield pcm
