"""The device as a speaker: media played by URL, live, one at a time.

Two ways, by what the device can do now:

- a conversation's audio is open: ``tts start``, the source as paced Opus,
  ``tts stop``, then the conversation ends. A reply still being spoken goes
  first: the satellite hands the channel over when its turn is over;
- idle on an always-on link, on firmware with the ``notify`` player: a
  one-time Ogg Opus stream the device fetches (``media/notify.py``).

Anything else cannot play now, and the error says what would. The source is
transcoded as it arrives (``protocol/audio/live.py``), so a stream that
never ends (internet radio, Music Assistant) plays until it is stopped.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.util import dt as dt_util

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import translated_error
from ..protocol import MediaSourceError
from ..protocol.audio import SPEAKER_SAMPLE_RATE
from ..protocol.audio.live import LiveTranscoder
from ..protocol.audio.ogg import Chunk, ChunkEncoder, OggOpusWriter, OpusChunks
from ..protocol.audio.pacing import TTS_START_SETTLE, DownlinkPacer
from ..speaker.channel import VoiceChannel
from .notify import NotifyStream, async_first_chunk, async_notify


class PlaybackState(StrEnum):
    """What the speaker does."""

    IDLE = "idle"
    BUFFERING = "buffering"  # waiting for a reply to end, or for the device
    PLAYING = "playing"


class Source(Protocol):
    """Bytes of a sound, read as they come (a URL's body, a TTS result)."""

    format_name: str | None

    async def read(self, size: int) -> bytes:
        """Return up to ``size`` bytes, b"" at the end."""

    def close(self) -> None:
        """Let the source go."""


type OpenSource = Callable[[], Awaitable[Source]]


@dataclass(slots=True)
class NowPlaying:
    """What plays, and since when."""

    media_id: str
    title: str | None
    route: str  # "conversation", "notify" or "announcement"
    duration: float | None = None  # seconds, when the source says
    started_at: datetime = field(default_factory=dt_util.utcnow)


@dataclass(slots=True, eq=False)
class _Job:
    now: NowPlaying
    state: PlaybackState = PlaybackState.BUFFERING
    task: asyncio.Task[None] | None = None
    stream: NotifyStream | None = None
    go: asyncio.Event = field(default_factory=asyncio.Event)
    # Tell the device: tts stop, and end the conversation (not when the
    # device itself moved on).
    tell_device: bool = True
    end_conversation: bool = True
    # A reply handed the device over still Speaking: no ``tts start``.
    speaking: bool = False

    @property
    def waiting(self) -> bool:
        """Return True while media waits for a reply to end (open channel)."""
        return self.task is not None and not self.go.is_set()

    @property
    def on_channel(self) -> bool:
        """Return True while media plays on a conversation's open audio."""
        return self.task is not None and self.go.is_set()


class MediaPlayback:
    """Plays media on one device; its state is the media player's."""

    def __init__(
        self,
        hass: HomeAssistant,
        name: str,
        device: XiaozhiEntryData,
        *,
        voice_busy: Callable[[], bool],
    ) -> None:
        """Play on the device ``name``; ``voice_busy`` says a reply plays first."""
        self.hass = hass
        self._name = name
        self._device = device
        self._voice_busy = voice_busy
        self._job: _Job | None = None
        # An announcement the satellite plays, shown as what plays.
        self._announcing: NowPlaying | None = None
        self._listeners: list[CALLBACK_TYPE] = []

    @property
    def state(self) -> PlaybackState:
        """Return what the speaker does now."""
        if self._announcing is not None:
            return PlaybackState.PLAYING
        return self._job.state if self._job is not None else PlaybackState.IDLE

    @property
    def now(self) -> NowPlaying | None:
        """Return what plays (or waits to), if anything."""
        if self._announcing is not None:
            return self._announcing
        return self._job.now if self._job is not None else None

    async def async_show_announcement(
        self, announce: Awaitable[None], now: NowPlaying
    ) -> None:
        """Show an announcement (played by the satellite) as what plays."""
        self._announcing = now
        self._changed()
        try:
            await announce
        finally:
            if self._announcing is now:
                self._announcing = None
                self._changed()

    @callback
    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    @callback
    def async_subscribe(self, listener: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``listener`` when the state changes, until the callback is called."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    @callback
    def _set(self, job: _Job, state: PlaybackState) -> None:
        """Put ``job`` in ``state``; listeners hear it while it is the current one."""
        job.state = state
        if job is self._job:
            if state is PlaybackState.IDLE:
                self._job = None
            self._changed()

    # --- playing ------------------------------------------------------------

    async def async_play(
        self,
        channel: VoiceChannel | None,
        source: OpenSource,
        media_id: str,
        title: str | None,
        duration: float | None = None,
    ) -> None:
        """Play what ``source`` opens; return once it plays or waits its turn.

        ``channel`` is the live session's. Whatever played is replaced.
        Raises HomeAssistantError saying why it cannot be played, and what
        would work.
        """
        await self.async_stop(end_conversation=False)
        name, device = self._name, self._device
        if channel is None:
            raise translated_error("play_not_connected", name)
        if channel.open:
            await self._async_play_open(
                channel, source, NowPlaying(media_id, title, "conversation", duration)
            )
            return
        if not channel.idle_reachable or channel.urls is None:
            raise translated_error("play_not_connected", name)
        if device.plays_notify is False:
            raise translated_error(
                "play_needs_conversation",
                name,
                firmware=device.firmware or "unknown",
            )
        await self._async_play_notify(
            channel, source, NowPlaying(media_id, title, "notify", duration)
        )

    async def _async_play_open(
        self, channel: VoiceChannel, source: OpenSource, now: NowPlaying
    ) -> None:
        chunks, close = await _async_open(
            source,
            OpusChunks(channel.sample_rate, channel.frame_duration),
            channel.sample_rate,
        )
        try:
            first = await async_first_chunk(chunks, channel.name)
        except HomeAssistantError:
            await close()
            raise
        job = self._job = _Job(now)
        job.task = self.hass.async_create_background_task(
            self._play_open(job, channel, first, chunks, close),
            f"xiaozhi media on {channel.name}",
        )
        if not self._voice_busy():
            job.go.set()
        self._set(job, PlaybackState.BUFFERING)

    async def _play_open(
        self,
        job: _Job,
        channel: VoiceChannel,
        first: Chunk,
        chunks: AsyncIterator[Chunk],
        close: Callable[[], Awaitable[None]],
    ) -> None:
        spoke = False
        try:
            await job.go.wait()
            settle = 0.0
            if not job.speaking:
                await channel.async_start_speaking()
                settle = TTS_START_SETTLE
            spoke = True
            self._set(job, PlaybackState.PLAYING)
            job.now.started_at = dt_util.utcnow()
            pacer = DownlinkPacer(
                channel.async_send_audio,
                frame_duration=channel.frame_duration / 1000,
                lead=channel.lead_frames,
                not_before=self.hass.loop.time() + settle,
            )
            await pacer.send(first.data)
            async for chunk in chunks:
                await pacer.send(chunk.data)
            await pacer.drain()
        except MediaSourceError as err:
            LOGGER.warning("%s: the media broke off: %s", channel.name, err)
        except HomeAssistantError as err:
            LOGGER.info("%s: media stopped: %s", channel.name, err)
            job.tell_device = False
        finally:
            await close()
            if job.tell_device and spoke:
                with contextlib.suppress(HomeAssistantError):
                    await channel.async_stop_speaking()
            if (
                job.tell_device
                and spoke
                and job.end_conversation
                and not self._device.push_to_talk
            ):
                await channel.async_end_conversation()
            self._set(job, PlaybackState.IDLE)

    async def _async_play_notify(
        self, channel: VoiceChannel, source: OpenSource, now: NowPlaying
    ) -> None:
        async def open_chunks() -> tuple[
            AsyncIterator[Chunk], Callable[[], Awaitable[None]]
        ]:
            return await _async_open(source, OggOpusWriter(), SPEAKER_SAMPLE_RATE)

        stream = NotifyStream(channel.name, open_chunks)
        job = self._job = _Job(now, stream=stream)
        self._set(job, PlaybackState.BUFFERING)
        try:
            played = await async_notify(channel, self._device, stream, now.title or "")
        except BaseException:
            stream.stop()
            self._set(job, PlaybackState.IDLE)
            raise
        if not played:
            self._set(job, PlaybackState.IDLE)
            if self._device.plays_notify is False:
                raise translated_error(
                    "play_needs_conversation",
                    channel.name,
                    firmware=self._device.firmware or "unknown",
                )
            raise translated_error("play_busy", channel.name)
        if stream.finished.done():
            self._set(job, PlaybackState.IDLE)
            return
        job.now.started_at = dt_util.utcnow()
        self._set(job, PlaybackState.PLAYING)
        stream.finished.add_done_callback(lambda _: self._set(job, PlaybackState.IDLE))

    # --- stopping -------------------------------------------------------------

    async def async_stop(self, *, end_conversation: bool = True) -> None:
        """Stop what plays; return once the device was told.

        Without ``end_conversation`` an open conversation stays open (an
        announcement takes the channel over).
        """
        job = self._job
        if job is None:
            return
        job.end_conversation = end_conversation
        self._cancel(job)
        if job.task is not None:
            await asyncio.wait({job.task})

    @callback
    def device_took_over(self, *, gone: bool = False) -> None:
        """Drop playback without a word: the device moved on (wake word, gone).

        Media waiting for a reply to end waits on, unless the device is gone.
        """
        if (job := self._job) is not None and (gone or not job.waiting):
            job.tell_device = False
            self._cancel(job)

    @callback
    def conversation_over(self) -> None:
        """Drop media that waited for a reply: its conversation ended without it."""
        if (job := self._job) is not None and job.waiting:
            job.tell_device = False
            self._cancel(job)

    @callback
    def async_silence(self) -> None:
        """Stop what plays as if stopped from Home Assistant (the button)."""
        if (job := self._job) is not None and job.on_channel:
            self._cancel(job)

    @property
    def holds_channel(self) -> bool:
        """Return True while media plays on a conversation's open audio."""
        return self._job is not None and self._job.on_channel

    @callback
    def take_over_channel(self, *, speaking: bool) -> bool:
        """Take the open channel once a turn is over; True when media waits for it.

        ``speaking``: the device is still Speaking the reply (no ``tts stop``
        was sent), and the media follows it without a ``tts start``.
        """
        if (job := self._job) is None or not job.waiting:
            return False
        job.speaking = speaking
        job.go.set()
        return True

    @callback
    def _cancel(self, job: _Job) -> None:
        if job.stream is not None:
            job.stream.stop()
        if job.task is not None and not job.task.done():
            job.task.cancel()
        self._set(job, PlaybackState.IDLE)


async def _async_open(
    open_source: OpenSource, encoder: ChunkEncoder, rate: int
) -> tuple[AsyncIterator[Chunk], Callable[[], Awaitable[None]]]:
    """Start reading and transcoding a source; return its chunks and a closer."""
    source = await open_source()
    transcoder = LiveTranscoder(
        source.read,
        encoder,
        rate,
        format_name=source.format_name,
    )
    transcoder.start()

    async def close() -> None:
        source.close()
        await transcoder.aclose()

    return transcoder.chunks(), close
