"""The device as an Assist satellite: its voice runs through the user's pipeline.

The device hears its wake word, dials Home Assistant and streams its
microphone; Home Assistant's pipeline (any speech-to-text, conversation agent
and text-to-speech the user set up) answers, and the reply plays on the
device. Over WebSocket a conversation ends when Home Assistant closes the
link once the reply has played; when the agent asks something back, the
device listens again by itself and the conversation continues.
"""

import asyncio
from collections.abc import AsyncIterator
import contextlib
from pathlib import Path
from typing import Final, override

import aiohttp
from homeassistant.components import assist_satellite, tts
from homeassistant.components.assist_pipeline import PipelineEvent, PipelineNotFound
from homeassistant.components.assist_pipeline.models import PipelineStage
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityDescription,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.assist_satellite.const import PREANNOUNCE_URL
from homeassistant.components.assist_satellite.entity import AssistSatelliteState
from homeassistant.components.intent import (
    TimerEventType,
    TimerInfo,
    async_register_timer_handler,
)
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN, LOGGER
from .entity import XiaozhiEntity
from .helpers import async_device_text
from .manager import XiaozhiConfigEntry, XiaozhiManager
from .protocol import DeviceEvent, DeviceEventType, ProtocolError, XiaozhiError
from .protocol.audio import SPEAKER_SAMPLE_RATE
from .protocol.codec import SAMPLE_WIDTH, decode_file, encode_ogg_opus
from .protocol.voice import TTS_START_SETTLE, EarlyAudio
from .voice import VoiceTurn, play_audio, stream_pcm

PARALLEL_UPDATES = 0

PREANNOUNCE_FILE: Final = Path(assist_satellite.__file__).parent / "preannounce.mp3"
MAX_MEDIA_BYTES: Final = 10 * 1024 * 1024
MEDIA_TIMEOUT: Final = 30.0
ABORT_WAKE_WORD: Final = "wake_word_detected"
ANNOUNCER: Final = "Home Assistant"  # the alert's title line
NOTIFY_FETCH_TIMEOUT: Final = 10.0  # the firmware fetches at once when idle
# Home Assistant cancels a turn's pipeline before its own announcement,
# conversation or question; if none of them reaches the device by then, the
# turn is ended rather than left listening to nobody.
TAKEOVER_GRACE: Final = 5.0
# After a question the device listens again by itself (auto mode).
ANSWER_START_TIMEOUT: Final = 10.0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device's Assist satellite."""
    async_add_entities([XiaozhiAssistSatellite(entry.runtime_data)])


class XiaozhiAssistSatellite(XiaozhiEntity, AssistSatelliteEntity):
    """A XiaoZhi device speaking through the user's Assist pipeline."""

    entity_description = AssistSatelliteEntityDescription(
        key="assist_satellite", translation_key="assist_satellite"
    )
    _attr_name = None
    _attr_supported_features = (
        AssistSatelliteEntityFeature.ANNOUNCE
        | AssistSatelliteEntityFeature.START_CONVERSATION
    )
    # WAV leaves engines that make WAV (Piper, Wyoming) unconverted; asking for
    # a rate or channels would run ffmpeg. PyAV converts what arrives.
    _attr_tts_options = {tts.ATTR_PREFERRED_FORMAT: "wav"}  # noqa: RUF012

    def __init__(self, manager: XiaozhiManager) -> None:
        """Create the satellite of a device."""
        super().__init__(manager, "assist_satellite")
        self._turn: VoiceTurn | None = None
        self.last_turn: VoiceTurn | None = None
        self._turn_task: asyncio.Task[None] | None = None
        self._wake_phrase: str | None = None
        self._playback: asyncio.Task[None] | None = None
        self._early = EarlyAudio()
        self._next_turn: asyncio.Future[None] | None = None

    @override
    async def async_added_to_hass(self) -> None:
        """Serve the device's voice and its timers."""
        await super().async_added_to_hass()
        self.async_on_remove(self.manager.async_set_voice_handler(self))
        if self.registry_entry is not None and self.registry_entry.device_id:
            self.async_on_remove(
                async_register_timer_handler(
                    self.hass, self.registry_entry.device_id, self._handle_timer
                )
            )

    @override
    async def async_will_remove_from_hass(self) -> None:
        """Drop what is running."""
        if self._turn is not None:
            self._turn.cancel()
        for task in (self._turn_task, self._playback):
            if task is not None:
                task.cancel()
        await super().async_will_remove_from_hass()

    # --- configuration -----------------------------------------------------

    def _own_select(self, key: str) -> str | None:
        """Return the entity id of one of the device's selects, if it has a state."""
        entity_id = er.async_get(self.hass).async_get_entity_id(
            Platform.SELECT, DOMAIN, f"{self.manager.mac}-{key}"
        )
        if entity_id is None or self.hass.states.get(entity_id) is None:
            return None
        return entity_id

    @property
    @override
    def pipeline_entity_id(self) -> str | None:
        """Return the device's pipeline select."""
        return self._own_select("pipeline")

    @property
    @override
    def vad_sensitivity_entity_id(self) -> str | None:
        """Return the device's "finished speaking" select."""
        return self._own_select("vad_sensitivity")

    @callback
    @override
    def async_get_configuration(self) -> AssistSatelliteConfiguration:
        """Report the wake word: it is built into the device's firmware."""
        words = [
            AssistSatelliteWakeWord(
                id=wake_word, wake_word=wake_word, trained_languages=[]
            )
            for wake_word in (self.data.wake_word,)
            if wake_word
        ]
        return AssistSatelliteConfiguration(
            available_wake_words=words,
            active_wake_words=[word.id for word in words],
            max_active_wake_words=1,
        )

    @override
    async def async_set_configuration(
        self, config: AssistSatelliteConfiguration
    ) -> None:
        """Refuse another wake word: the firmware has its own."""
        if config.active_wake_words != self.async_get_configuration().active_wake_words:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="wake_word_fixed",
                translation_placeholders={"name": self.manager.name},
            )

    # --- the device's voice (VoiceHandler) ----------------------------------

    @callback
    def voice_event(self, event: DeviceEvent) -> None:
        """Follow the device: wake word, listening, abort."""
        match event.type:
            case DeviceEventType.WAKE_WORD:
                phrase = str(event.data.get("text") or "")
                self._wake_phrase = phrase or None
                if phrase:
                    self.data.async_set_wake_word(phrase)
            case DeviceEventType.LISTENING_STARTED:
                self._start_turn()
            case DeviceEventType.LISTENING_STOPPED:
                if self._turn is not None:
                    self._turn.end_audio()
            case DeviceEventType.ABORTED:
                self._abort(str(event.data.get("reason") or ""))

    @callback
    def voice_audio(self, payload: bytes) -> None:
        """Take microphone audio; the turn starts with ``listen start``.

        The firmware first sends about two seconds of audio from before the
        wake word, which is not part of what the user says.
        """
        if self._turn is not None:
            self._turn.feed(payload)
        else:
            self._early.add(self.hass.loop.time(), payload)

    @callback
    def voice_closed(self) -> None:
        """Drop whatever the device was doing: it is gone."""
        self._early.clear()
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        for task in (self._turn_task, self._playback):
            if task is not None:
                task.cancel()
        self._wake_phrase = None
        question = self._ask_question_future
        if question is not None and not question.done():
            question.set_result(None)  # no answer is coming
        if self.state != AssistSatelliteState.IDLE:
            self.tts_response_finished()

    @callback
    def _start_turn(self) -> None:
        if self._turn is not None:
            # A new listen start ends the old turn (the device moved on).
            self._turn.cancel()
        if self._playback is not None:
            self._playback.cancel()
        turn = VoiceTurn(
            self.hass,
            self.manager,
            wake_phrase=self._wake_phrase,
            on_played=self.tts_response_finished,
        )
        self._wake_phrase = None
        self._turn = self.last_turn = turn
        if self._next_turn is not None and not self._next_turn.done():
            self._next_turn.set_result(None)
        for payload in self._early.take_live(self.hass.loop.time()):
            turn.feed(payload)
        self._turn_task = self.manager.entry.async_create_background_task(
            self.hass, self._run_turn(turn), f"xiaozhi voice turn of {self.manager.mac}"
        )

    async def _run_turn(self, turn: VoiceTurn) -> None:
        try:
            await self.async_accept_pipeline_from_satellite(
                turn.audio_stream(),
                start_stage=PipelineStage.STT,
                wake_word_phrase=turn.wake_phrase,
            )
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            if self._turn is turn:
                # Home Assistant's own announcement, conversation or question
                # is about to take the device; if it fails first, end this.
                self.manager.entry.async_create_background_task(
                    self.hass,
                    self._async_end_unless_taken_over(turn),
                    f"xiaozhi takeover on {self.manager.mac}",
                )
            return  # another run (a new turn, an announcement) replaced this one
        except (PipelineNotFound, RuntimeError) as err:
            LOGGER.warning(
                "%s: no voice assistant to answer: %s", self.manager.name, err
            )
            await turn.fail("voice_error")
        if turn.ended:
            return
        continues = await turn.finish()
        if self._turn is turn:
            self._turn = None
        if not continues:
            if self._turn is not None:
                # The device went back to listening by itself after tts stop
                # (auto mode) before the end reached it: over all the same.
                self._turn.cancel()
                self._turn = None
                task = self._turn_task
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
            await self.manager.async_end_conversation()

    async def _async_end_unless_taken_over(self, turn: VoiceTurn) -> None:
        await asyncio.sleep(TAKEOVER_GRACE)
        if self._turn is not turn:
            return  # an announcement or a new turn has the device
        self._turn = None
        LOGGER.debug("%s: nothing took over the cancelled turn", self.manager.name)
        await self._async_after_abort(turn, "cancelled")

    @override
    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Pass pipeline events on to the turn they belong to."""
        if self._turn is not None:
            self._turn.on_event(event)

    @callback
    def _abort(self, reason: str) -> None:
        """Stop speaking at once; a wake word starts listening again by itself."""
        turn, self._turn = self._turn, None
        playback = self._playback
        if turn is None and playback is None:
            return
        if turn is not None:
            turn.end_audio()
        for task in (self._turn_task, playback):
            if task is not None:
                task.cancel()
        self.manager.entry.async_create_background_task(
            self.hass,
            self._async_after_abort(turn, reason),
            f"xiaozhi abort on {self.manager.mac}",
        )

    async def _async_after_abort(self, turn: VoiceTurn | None, reason: str) -> None:
        if turn is not None:
            await turn.abort()
        else:
            with contextlib.suppress(XiaozhiError):
                await self.manager.async_voice_tts("stop")
            self.tts_response_finished()
        if reason != ABORT_WAKE_WORD:
            # The button: the user wants quiet, not another turn.
            await self.manager.async_end_conversation()

    # --- announcements --------------------------------------------------------

    @override
    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Play an announcement; blocks until it has played.

        In a conversation it plays on the open audio. An idle device on MQTT
        fetches it as a sound (newer firmware) or shows its text.
        """
        if not self.manager.voice_ready and self.manager.idle_reachable:
            await self._async_announce_idle(announcement)
            return
        if (
            await self._async_play_announcement(announcement)
            and self.manager.listen_mode != "manual"
        ):
            # After tts stop the device would start listening. (Aborted, it
            # is the abort's: a wake word goes on to a turn of its own.)
            await self.manager.async_end_conversation()

    @override
    async def async_start_conversation(
        self, start_announcement: AssistSatelliteAnnouncement
    ) -> None:
        """Play the announcement; the device then listens and the turn continues it."""
        if not self.manager.voice_ready and self.manager.idle_reachable:
            # The firmware opens its microphone only for its own conversations.
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="conversation_needs_wake",
                translation_placeholders={"name": self.manager.name},
            )
        listening = False
        # Push-to-talk waits for its button after the announcement: not asked.
        if self.manager.listen_mode != "manual":
            self._next_turn = self.hass.loop.create_future()
            try:
                if await self._async_play_announcement(start_announcement):
                    async with asyncio.timeout(ANSWER_START_TIMEOUT):
                        await self._next_turn
                    listening = True
            except TimeoutError:
                pass  # it did not listen again
            finally:
                self._next_turn = None
        if not listening:
            # Push-to-talk, aborted, gone or not listening: nobody can answer.
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="no_answer",
                translation_placeholders={"name": self.manager.name},
            )

    async def _async_announce_idle(
        self, announcement: AssistSatelliteAnnouncement
    ) -> None:
        manager = self.manager
        text = announcement.message
        try:
            if manager.plays_notify:
                if await self._async_notify_sound(announcement):
                    return
                LOGGER.info(
                    "%s did not fetch the announcement (busy?); showing its text",
                    manager.name,
                )
            else:
                LOGGER.info(
                    "%s plays sounds only in a conversation (firmware %s); "
                    "showing the announcement's text with its alert sound",
                    manager.name,
                    manager.data.firmware,
                )
            if not text:
                raise HomeAssistantError(
                    translation_domain=DOMAIN,
                    translation_key="announce_needs_text",
                    translation_placeholders={"name": manager.name},
                )
            await manager.async_voice_alert(ANNOUNCER, text, "neutral")
        except (XiaozhiError, aiohttp.ClientError, OSError, TimeoutError) as err:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="announce_failed",
                translation_placeholders={"name": manager.name, "error": str(err)},
            ) from err

    async def _async_notify_sound(
        self, announcement: AssistSatelliteAnnouncement
    ) -> bool:
        """Serve the announcement as a sound; True once the device fetched it.

        The device plays its own chime first, so the pre-announcement is left
        out; it returns to idle by itself once the sound has played.
        """
        pcm = b"".join(
            [
                chunk
                async for chunk in self._announcement_pcm(
                    announcement, SPEAKER_SAMPLE_RATE, preannounce=False
                )
            ]
        )
        if not pcm:
            return False
        audio = await self.hass.async_add_executor_job(
            encode_ogg_opus, pcm, SPEAKER_SAMPLE_RATE
        )
        fetched, revoke = await self.manager.async_notify_sound(
            audio, announcement.message
        )
        try:
            async with asyncio.timeout(NOTIFY_FETCH_TIMEOUT):
                await fetched.wait()
        except TimeoutError:
            return False
        finally:
            revoke()
        # Played in real time; the announcement is over when it has played.
        await asyncio.sleep(len(pcm) / SAMPLE_WIDTH / SPEAKER_SAMPLE_RATE)
        return True

    async def _async_play_announcement(
        self, announcement: AssistSatelliteAnnouncement
    ) -> bool:
        """Play on the open audio; return False when it was cut short (abort)."""
        try:
            rate, frame_ms = self.manager.voice_format
        except XiaozhiError as err:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="announce_not_connected",
                translation_placeholders={"name": self.manager.name},
            ) from err
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None
        task = self._playback = self.manager.entry.async_create_background_task(
            self.hass,
            self._play_announcement(announcement, rate, frame_ms),
            f"xiaozhi announcement on {self.manager.mac}",
        )
        # An abort cancels the playback; it must not end the announcer in error.
        await asyncio.wait({task})
        if self._playback is task:
            self._playback = None
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="announce_failed",
                translation_placeholders={
                    "name": self.manager.name,
                    "error": str(failure),
                },
            ) from failure
        return not task.cancelled()

    async def _play_announcement(
        self, announcement: AssistSatelliteAnnouncement, rate: int, frame_ms: int
    ) -> None:
        manager = self.manager
        await manager.async_voice_tts("start")
        started = self.hass.loop.time()
        try:
            if announcement.message:
                await manager.async_voice_tts("sentence_start", announcement.message)
            await play_audio(
                manager.async_voice_audio,
                self._announcement_pcm(announcement, rate),
                name=manager.name,
                rate=rate,
                frame_ms=frame_ms,
                not_before=started + TTS_START_SETTLE,
            )
        finally:
            with contextlib.suppress(XiaozhiError):
                await manager.async_voice_tts("stop")

    async def _announcement_pcm(
        self,
        announcement: AssistSatelliteAnnouncement,
        rate: int,
        *,
        preannounce: bool = True,
    ) -> AsyncIterator[bytes]:
        if preannounce and announcement.preannounce_media_id:
            for pcm in await self._decode(announcement.preannounce_media_id, rate):
                yield pcm
        if announcement.media_id_source == "tts" and announcement.tts_token:
            stream = tts.async_get_stream(self.hass, announcement.tts_token)
            if stream is None:
                raise ProtocolError("the announcement's audio is gone")
            async for pcm in stream_pcm(self.hass, stream, rate):
                yield pcm
        else:
            for pcm in await self._decode(announcement.media_id, rate):
                yield pcm

    async def _decode(self, url: str, rate: int) -> list[bytes]:
        """Fetch and decode a sound (the pre-announce chime, a media URL)."""
        if url.endswith(PREANNOUNCE_URL) and PREANNOUNCE_FILE.exists():
            data = await self.hass.async_add_executor_job(PREANNOUNCE_FILE.read_bytes)
        else:
            session = async_get_clientsession(self.hass)
            async with asyncio.timeout(MEDIA_TIMEOUT), session.get(url) as response:
                response.raise_for_status()
                data = await response.content.read(MAX_MEDIA_BYTES + 1)
            if len(data) > MAX_MEDIA_BYTES:
                raise ProtocolError("the announcement's audio is too large")
        return await self.hass.async_add_executor_job(
            lambda: list(decode_file(data, rate))
        )

    # --- timers -------------------------------------------------------------

    @callback
    def _handle_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        """Show timers on the device; say and fire when one finishes."""
        self.manager.entry.async_create_background_task(
            self.hass,
            self._async_timer(event_type, timer),
            f"xiaozhi timer on {self.manager.mac}",
        )

    async def _async_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        name = timer.name or ""
        if event_type is TimerEventType.FINISHED:
            duration = (
                (timer.start_hours or 0) * 3600
                + (timer.start_minutes or 0) * 60
                + (timer.start_seconds or 0)
            )
            self.manager.async_signal_timer_finished(name, duration)
            if self.manager.voice_ready or self.manager.idle_reachable:
                with contextlib.suppress(HomeAssistantError):
                    await self.async_internal_announce(
                        message=await async_device_text(
                            self.hass, "timer_finished", {"name": name}
                        )
                    )
            return
        if not (self.manager.voice_ready or self.manager.idle_reachable):
            return
        minutes, seconds = divmod(timer.seconds_left, 60)
        key = (
            "timer_cancelled" if event_type is TimerEventType.CANCELLED else "timer_set"
        )
        text = await async_device_text(
            self.hass, key, {"name": name, "time": f"{minutes}:{seconds:02d}"}
        )
        with contextlib.suppress(XiaozhiError):
            await self.manager.async_voice_alert(
                await async_device_text(self.hass, "timer_title"), text, "neutral"
            )
