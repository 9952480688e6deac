"""A device's voice: what Home Assistant shows, says and plays on it.

The runtime makes one channel per session and hands it to whoever speaks
through the device (the conversation, announcements, the media player, the
pairing code). Every method raises only translated Home Assistant errors
(:class:`DeviceUnavailableError` once the link is gone); the channel records
into the entry data what the device heard and answered, and fires an event
when it starts and stops speaking. It carries the session's one-time URLs
(:class:`DeviceUrls`): they point at the address the device used.
"""

from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from homeassistant.core import CALLBACK_TYPE

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import device_command
from ..protocol import DeviceEvent, DeviceEventType, DeviceSession, XiaozhiError
from ..protocol.audio.pacing import lead_frames


class Sound(Protocol):
    """A sound served once to the device that fetches its URL."""

    async def respond(self, request: web.Request) -> web.StreamResponse:
        """Stream the sound."""


class DeviceUrls(Protocol):
    """Where one session's device uploads and fetches (the transport mints them)."""

    @property
    def vision_url(self) -> str:
        """Return the URL the camera posts photos to."""

    def mint_snapshot_url(self) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time screen picture URL and the callback revoking it."""

    def mint_sound_url(self, sound: Sound) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL streaming ``sound`` and the callback revoking it."""

    def mint_firmware_url(
        self, image: bytes, progress: Callable[[int], None], broke: Callable[[], None]
    ) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of a firmware image, reporting bytes sent."""


class VoiceChannel:
    """Speech, text and sound to one device over one session."""

    def __init__(
        self,
        session: DeviceSession,
        entry_data: XiaozhiEntryData | None,
        fire: Callable[[DeviceEvent], None],
        name: str,
        *,
        urls: DeviceUrls | None = None,
        on_ended: Callable[[], None] | None = None,
    ) -> None:
        """Speak through ``session``; record into ``entry_data`` when given.

        ``on_ended`` is called once Home Assistant ended a conversation on a
        link that stays up: whatever the device started meanwhile is over.
        """
        self._session = session
        self._entry_data = entry_data
        self._fire = fire
        self._name = name
        self.urls = urls
        self._on_ended = on_ended

    @property
    def name(self) -> str:
        """Return the device's name (for errors and logs)."""
        return self._name

    @property
    def open(self) -> bool:
        """Return True while a conversation's audio is open both ways."""
        return self._session.audio_open

    @property
    def idle_reachable(self) -> bool:
        """Return True when the device is idle but reachable (always-on link)."""
        session = self._session
        return session.ready and session.link.always_on and not session.audio_open

    @property
    def sample_rate(self) -> int:
        """Return the rate of the audio the device plays (its server hello's)."""
        return self._session.sample_rate

    @property
    def frame_duration(self) -> int:
        """Return the length of one audio frame to the device, in ms."""
        return self._session.frame_duration

    @property
    def lead_frames(self) -> int:
        """Return the frames audio is sent ahead of the device's playback.

        None for a board without PSRAM (its chip, from its OTA check): a
        burst of frames stops and restarts it.
        """
        data = self._entry_data
        hardware = data.hardware if data is not None else None
        return lead_frames(hardware.chip if hardware is not None else None)

    @device_command
    async def async_start_speaking(self) -> None:
        """Send ``tts start``: the device goes Speaking, its microphone off."""
        await self._session.send_tts("start")
        self._fire(DeviceEvent(type=DeviceEventType.SPEAKING_STARTED))

    @device_command
    async def async_stop_speaking(self) -> None:
        """Send ``tts stop``: the device plays what it has, then moves on."""
        await self._session.send_tts("stop")
        self._fire(DeviceEvent(type=DeviceEventType.SPEAKING_STOPPED))

    @device_command
    async def async_show_sentence(self, text: str) -> None:
        """Show a sentence of what is being said (``tts sentence_start``)."""
        await self._session.send_tts("sentence_start", text)

    async def async_show_reply(self, text: str) -> None:
        """Show the assistant's reply, and record it as the last reply."""
        self.record_reply(text)
        await self.async_show_sentence(text)

    def record_reply(self, text: str) -> None:
        """Record the assistant's reply as the last reply (shown elsewhere)."""
        if self._entry_data is not None:
            self._entry_data.async_set_transcript(None, text)

    @device_command
    async def async_show_heard(self, text: str) -> None:
        """Show what the device heard (``stt``), and record it."""
        if self._entry_data is not None:
            self._entry_data.async_set_transcript(text, None)
        await self._session.send_stt(text)

    @device_command
    async def async_show_emotion(self, emotion: str) -> None:
        """Show a face (``llm``)."""
        await self._session.send_emotion(emotion)

    @device_command
    async def async_show_alert(self, title: str, message: str, emotion: str) -> None:
        """Show a message on the screen, with the alert sound."""
        await self._session.send_alert(title, message, emotion)

    @device_command
    async def async_send_audio(self, packet: bytes, timestamp: int) -> None:
        """Send one Opus packet to the speaker."""
        await self._session.send_audio(packet, timestamp)

    @device_command
    async def async_notify(self, audio_url: str, text: str) -> None:
        """Have an idle device fetch and play a sound (``notify``)."""
        await self._session.send_notify(audio_url, text)

    async def async_end_conversation(self) -> None:
        """End the conversation as Home Assistant wants it ended.

        Over MQTT + UDP ``goodbye`` closes the audio channel and the link
        stays. Over WebSocket the conversation ends when the link closes, and
        the device dials again at its next wake word. Nothing is raised: a
        failing link ends the conversation by itself.
        """
        if self._session.closed:
            return
        try:
            await self._session.end_conversation()
        except XiaozhiError as err:
            LOGGER.debug("%s: conversation not ended: %s", self._name, err)
        if self._session.link.always_on and self._on_ended is not None:
            self._on_ended()
