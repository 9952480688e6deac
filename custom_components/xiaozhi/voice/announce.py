"""Announcements: a message (and its sound) played on a device.

Three ways, by what the device can do now:

- in a conversation its audio is open: ``tts start``, the text, the sound
  as paced Opus, ``tts stop``;
- idle on an always-on link, on firmware that plays ``notify``: the sound is
  served once as Ogg Opus and the device fetches and plays it;
- idle on older firmware: the text is shown with the device's alert sound.
"""

import asyncio
from collections.abc import AsyncIterator
import contextlib
from typing import Final, Protocol

from homeassistant.components import tts
from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import CALLBACK_TYPE, HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..errors import DeviceUnavailableError
from ..media.fetch import async_fetch_pcm
from ..protocol.audio import SPEAKER_SAMPLE_RATE
from ..protocol.audio.codec import SAMPLE_WIDTH, encode_ogg_opus
from ..protocol.audio.pacing import TTS_START_SETTLE
from .channel import VoiceChannel
from .speech import play_audio, stream_pcm

ANNOUNCER: Final = "Home Assistant"  # the alert's title line
NOTIFY_FETCH_TIMEOUT: Final = 5.0  # the firmware fetches at once when idle


class ClipUrls(Protocol):
    """Mints one-time URLs of sounds a device fetches."""

    def mint_clip_url(self, audio: bytes) -> tuple[str, asyncio.Event, CALLBACK_TYPE]:
        """Return a one-time URL of a sound, its fetched event and its revoker."""


class AnnounceTarget(Protocol):
    """The device's runtime, as far as announcements need it."""

    @property
    def name(self) -> str:
        """Return the device's name."""

    @property
    def voice(self) -> VoiceChannel:
        """Return the voice of the live session (DeviceUnavailableError without)."""

    @property
    def uploads(self) -> ClipUrls | None:
        """Return the URLs of the live session."""

    @property
    def firmware(self) -> str | None:
        """Return the firmware version the device reported."""

    @property
    def plays_notify(self) -> bool | None:
        """Return whether its firmware plays notify sounds (None: not known)."""

    def async_learn_notify(self, *, plays: bool) -> None:
        """Remember whether its firmware plays notify sounds."""


def _failed(name: str, err: BaseException) -> HomeAssistantError:
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key="announce_failed",
        translation_placeholders={"name": name, "error": str(err)},
    )


class Announcer:
    """Plays announcements on one device, one at a time."""

    def __init__(self, hass: HomeAssistant, target: AnnounceTarget) -> None:
        """Announce on the device of ``target``."""
        self.hass = hass
        self._target = target
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

    def channel(self) -> VoiceChannel:
        """Return the device's voice channel, or say it cannot be reached now."""
        try:
            return self._target.voice
        except DeviceUnavailableError as err:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="announce_not_connected",
                translation_placeholders={"name": self._target.name},
            ) from err

    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> bool:
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
        channel = self.channel()
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
        name, firmware = channel.name, self._target.firmware
        text = announcement.message
        try:
            # Whether the firmware plays notify sounds is learnt by trying:
            # its version does not tell. An idle device that does not fetch
            # the sound has none (busy devices are not idle).
            known = self._target.plays_notify
            if known is not False:
                if await self._async_notify_sound(channel, announcement):
                    if known is None:
                        self._target.async_learn_notify(plays=True)
                    return
                if known is None:
                    self._target.async_learn_notify(plays=False)
                    LOGGER.info(
                        "%s did not fetch the announcement: its firmware (%s) "
                        "plays sounds only in a conversation; showing the "
                        "text with its alert sound from now on",
                        name,
                        firmware,
                    )
                else:
                    LOGGER.info(
                        "%s did not fetch the announcement (busy?); showing its text",
                        name,
                    )
            else:
                LOGGER.info(
                    "%s plays sounds only in a conversation (firmware %s); "
                    "showing the announcement's text with its alert sound",
                    name,
                    firmware,
                )
            if not text:
                raise HomeAssistantError(
                    translation_domain=DOMAIN,
                    translation_key="announce_needs_text",
                    translation_placeholders={"name": name},
                )
            await channel.async_show_alert(ANNOUNCER, text, "neutral")
        except DeviceUnavailableError as err:
            raise _failed(name, err) from err

    async def _async_notify_sound(
        self, channel: VoiceChannel, announcement: AssistSatelliteAnnouncement
    ) -> bool:
        """Serve the announcement as a sound; True once the device fetched it.

        The device plays its own chime first, so the pre-announcement is left
        out; it returns to idle by itself once the sound has played.
        """
        uploads = self._target.uploads
        pcm = b"".join(
            [
                chunk
                async for chunk in self._pcm(
                    announcement, SPEAKER_SAMPLE_RATE, preannounce=False
                )
            ]
        )
        if not pcm or uploads is None:
            return False
        audio = await self.hass.async_add_executor_job(
            encode_ogg_opus, pcm, SPEAKER_SAMPLE_RATE
        )
        url, fetched, revoke = uploads.mint_clip_url(audio)
        try:
            await channel.async_notify(url, announcement.message)
            async with asyncio.timeout(NOTIFY_FETCH_TIMEOUT):
                await fetched.wait()
        except TimeoutError:
            return False
        finally:
            revoke()
        # Played in real time; the announcement is over when it has played.
        await asyncio.sleep(len(pcm) / SAMPLE_WIDTH / SPEAKER_SAMPLE_RATE)
        return True

    async def _pcm(
        self,
        announcement: AssistSatelliteAnnouncement,
        rate: int,
        *,
        preannounce: bool = True,
    ) -> AsyncIterator[bytes]:
        """Yield the announcement's sound: the chime, then the message."""
        if preannounce and announcement.preannounce_media_id:
            try:
                chime = await async_fetch_pcm(
                    self.hass, announcement.preannounce_media_id, rate
                )
            except HomeAssistantError as err:
                # The chime only announces the message: the message goes on.
                LOGGER.warning(
                    "%s: no chime before the message: %s", self._target.name, err
                )
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
