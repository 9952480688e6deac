"""The device as an Assist satellite: its voice runs through the user's pipeline.

The entity is the seam between Home Assistant's pipeline and the device's
voice (``voice/``): a ``listen start`` starts a pipeline run fed by the
microphone (a :class:`VoiceTurn`), and the run's events become messages on
the device. Announcements are played by the :class:`Announcer`. Over
WebSocket a conversation ends when Home Assistant closes the link once the
reply has played; when the agent asks something back, the device listens
again by itself and the conversation continues.
"""

import asyncio
import contextlib
from typing import Final, override

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import (
    PipelineEvent,
    PipelineNotFound,
    PipelineStage,
)
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityDescription,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.intent import async_register_timer_handler
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN, LOGGER
from .domain_data import DATA_KEY
from .entity import XiaozhiEntity
from .errors import DeviceUnavailableError
from .media.announce import Announcer
from .protocol import DeviceEvent, DeviceEventType
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime
from .settings import server_settings_of
from .voice.gate import WakeGate
from .voice.timers import DeviceTimers
from .voice.turn import VoiceTurn
from .voice.typed import async_answer
from .voice.wizard import async_connection_test, is_connection_test

PARALLEL_UPDATES = 0

ABORT_WAKE_WORD: Final = "wake_word_detected"
# After an abort, how long the device may take to listen again (auto mode:
# once what it holds has played, at most 2.4 s) before the conversation ends.
ABORT_LISTEN_GRACE: Final = 3.0
IDLE: Final = "idle"  # the satellite's own idle state
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

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the satellite of a device."""
        super().__init__(runtime, "assist_satellite")
        self._announcer = Announcer(runtime.hass, runtime)
        self._turn: VoiceTurn | None = None
        self._turn_task: asyncio.Task[None] | None = None
        # Whether a box that starts listening answers (arbitration, check).
        self._gate = WakeGate(
            runtime.hass,
            runtime,
            runtime.hass.data[DATA_KEY].arbiter,
            pipeline_entity=lambda: self.pipeline_entity_id,
            start_turn=self._start_turn,
            stand_down=self._async_end_conversation,
        )
        self._next_turn: asyncio.Future[bool] | None = None
        # The running turn answers an announcement that asked to go on.
        self._answering = False
        self._turn_started = asyncio.Event()

    @override
    async def async_added_to_hass(self) -> None:
        """Serve the device's voice and its timers."""
        await super().async_added_to_hass()
        self.async_on_remove(self.runtime.voice_router.async_set_handler(self))
        if self.registry_entry is not None and self.registry_entry.device_id:
            self.async_on_remove(
                async_register_timer_handler(
                    self.hass,
                    self.registry_entry.device_id,
                    DeviceTimers(self.runtime, self.async_internal_announce).handle,
                )
            )

    @override
    async def async_will_remove_from_hass(self) -> None:
        """Drop what is running."""
        if self._turn is not None:
            self._turn.cancel()
        if self._turn_task is not None:
            self._turn_task.cancel()
        self._gate.reset()
        self._announcer.cancel()
        await super().async_will_remove_from_hass()

    # --- configuration -----------------------------------------------------

    def _own_select(self, key: str) -> str | None:
        """Return the entity id of one of the device's selects, if it has a state."""
        entity_id = er.async_get(self.hass).async_get_entity_id(
            Platform.SELECT, DOMAIN, f"{self.runtime.mac}-{key}"
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
            for wake_word in (self.entry_data.wake_word,)
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
                translation_placeholders={"name": self.runtime.name},
            )

    # --- the device's voice (VoiceHandler) ----------------------------------

    @callback
    def voice_event(self, event: DeviceEvent) -> None:
        """Follow the device: wake word, listening, abort."""
        match event.type:
            case DeviceEventType.WAKE_WORD:
                self._gate.wake_word(str(event.data.get("text") or "") or None)
            case DeviceEventType.LISTENING_STARTED:
                if self.runtime.player.holds_channel:
                    # Sent after the reply, before the media's tts start
                    # reached the device (auto mode): not the user's turn.
                    LOGGER.debug("%s: listen start during media", self.runtime.name)
                    return
                if (
                    self._turn is not None
                    and self._turn.listening
                    and not self._gate.woken
                ):
                    # It says again what it does (py-xiaozhi answers the tts
                    # stop of an abort it followed with its own listen start).
                    LOGGER.debug(
                        "%s: listen start while listened to", self.runtime.name
                    )
                    return
                self._gate.listening_started(
                    asked=self._next_turn is not None and not self._next_turn.done()
                )
                if self._gate.deciding and self._turn is not None:
                    # A wake word inside a conversation: its audio is held.
                    self._turn.cancel()
                    self._turn = None
            case DeviceEventType.LISTENING_STOPPED:
                if self._turn is not None:
                    self._turn.end_audio()
                self._gate.listening_stopped()
            case DeviceEventType.ABORTED:
                self._abort(str(event.data.get("reason") or ""))

    @callback
    def voice_audio(self, payload: bytes) -> None:
        """Take microphone audio; the turn starts with ``listen start``.

        The firmware first sends about two seconds of audio from before the
        wake word, which is not part of what the user says; the gate holds
        it, and the turn's audio until the turn may start.
        """
        if self._turn is not None and self._turn.listening:
            self._turn.feed(payload)
        else:
            self._gate.audio(payload)

    @callback
    def voice_closed(self) -> None:
        """Drop whatever the device was doing: it is gone.

        A run still listening is cancelled: half a sentence must not reach
        the agent. A run that answers Home Assistant's own question or
        conversation ends with its audio instead, so that whoever waits for
        it learns the outcome (the base class resolves it at the run's end).
        A run past listening goes on: the user said all of it.
        """
        self._gate.reset()
        self._gate.conversing = False
        if (turn := self._turn) is not None:
            self._drop_turn(turn)
        self._announcer.cancel()
        if self._next_turn is not None and not self._next_turn.done():
            self._next_turn.set_result(False)
        if self.state != IDLE:
            self.tts_response_finished()

    @callback
    def _drop_turn(self, turn: VoiceTurn) -> None:
        """Drop the current turn without a word to the device.

        A run still listening is cancelled (half a sentence must not reach
        the agent) unless it answers Home Assistant's own question, which
        ends with its audio so that the base class resolves the question.
        """
        self._turn = None
        cut_short = turn.listening and not self._answering
        turn.cancel()
        if cut_short and self._turn_task is not None:
            self._turn_task.cancel()

    @callback
    def _start_turn(self, wake: str | None, live: list[bytes], stopped: bool) -> None:
        """Start a turn with the audio held for it (``stopped``: already let go)."""
        if self._turn is not None:
            # A new listen start ends the old turn (the device moved on).
            self._turn.cancel()
        self._announcer.cancel()
        try:
            channel = self.runtime.voice
        except DeviceUnavailableError:  # pragma: no cover - events need a link
            return
        turn = VoiceTurn(
            self.hass,
            channel,
            # With arbitration, Home Assistant's home-wide cooldown by wake
            # phrase must not silence a box in another area.
            wake_phrase=None
            if server_settings_of(self.hass).wake_arbitration
            else wake,
            on_played=self.tts_response_finished,
            # Called seconds later, when ``turn`` is this turn.
            on_silent=lambda: self._silent(turn),
        )
        self._turn = turn
        self._turn_started.set()
        self._answering = self._next_turn is not None and not self._next_turn.done()
        if self._next_turn is not None and not self._next_turn.done():
            self._next_turn.set_result(True)
        for payload in live:
            turn.feed(payload)
        if stopped:
            turn.end_audio()
        self._turn_task = self.runtime.entry.async_create_background_task(
            self.hass, self._run_turn(turn), f"xiaozhi voice turn of {self.runtime.mac}"
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
                self.runtime.entry.async_create_background_task(
                    self.hass,
                    self._async_end_unless_taken_over(turn),
                    f"xiaozhi takeover on {self.runtime.mac}",
                )
            return  # another run (a new turn, an announcement) replaced this one
        except PipelineNotFound as err:
            LOGGER.warning(
                "%s: no voice assistant to answer: %s", self.runtime.name, err
            )
            await turn.fail("voice_error")
        if turn.ended:
            # The device went away while it ran: nothing more to say to it.
            if self.state != IDLE:
                self.tts_response_finished()
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
            if self.runtime.player.take_over_channel():
                return  # media waited for the reply; it ends the conversation
            await turn.channel.async_end_conversation()

    async def _async_end_unless_taken_over(self, turn: VoiceTurn) -> None:
        await asyncio.sleep(TAKEOVER_GRACE)
        if self._turn is not turn:
            return  # an announcement or a new turn has the device
        self._turn = None
        LOGGER.debug("%s: nothing took over the cancelled turn", self.runtime.name)
        turn.cancel()
        self.tts_response_finished()
        await self._async_end_conversation()

    @override
    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Pass pipeline events on to the turn they belong to."""
        if self._turn is not None:
            self._turn.on_event(event)

    @callback
    def voice_typed(self, text: str) -> None:
        """Answer a question typed on a text client, aloud, then end.

        The agent of the device's pipeline answers the text (no speech to
        text); the answer is spoken and shown like an announcement. A turn
        still listening (py-xiaozhi listens before it sends the text) is
        dropped with its run: half a sentence must not reach the agent.
        """
        if (turn := self._turn) is not None:
            self._drop_turn(turn)
        self._gate.reset()
        self.runtime.entry.async_create_background_task(
            self.hass,
            self._async_answer_typed(text),
            f"xiaozhi typed question on {self.runtime.mac}",
        )

    async def _async_answer_typed(self, text: str) -> None:
        try:
            channel = self._announcer.channel()
            await channel.async_show_heard(text)
            reply = await async_answer(
                self.hass,
                text,
                pipeline_entity_id=self.pipeline_entity_id,
                device_id=self.registry_entry.device_id
                if self.registry_entry
                else None,
                satellite_id=self.entity_id,
            )
            channel.record_reply(reply)
            await self.async_internal_announce(message=reply, preannounce=False)
        except (HomeAssistantError, ValueError) as err:
            # ValueError: the pipeline's agent is gone.
            LOGGER.warning(
                "%s: the typed question was not answered: %s", self.runtime.name, err
            )

    @callback
    def _silent(self, turn: VoiceTurn) -> None:
        """End a turn whose device stopped sending audio; it goes idle.

        Nobody would end it otherwise: the device shows Listening and the
        satellite listens, for as long as the link lasts. A turn answering
        Home Assistant's question ends with its audio (no answer) instead.
        """
        if turn is not self._turn:
            return
        LOGGER.info(
            "%s stopped sending audio while listened to; ending its turn",
            self.runtime.name,
        )
        if self._answering:
            turn.end_audio()
            return
        self._drop_turn(turn)
        if self.state != IDLE:
            self.tts_response_finished()
        self.runtime.entry.async_create_background_task(
            self.hass,
            self._async_end_conversation(),
            f"xiaozhi end silent turn on {self.runtime.mac}",
        )

    @callback
    def _abort(self, reason: str) -> None:
        """Stop speaking at once, say ``tts stop``, and listen to what comes next.

        The firmware (``main/application.cc``) stays Speaking after its
        button's abort until it gets ``tts stop``; then auto mode listens
        again (a new ``listen start``) and manual mode goes idle. After a wake
        word it listens at once and ignores the stop. So every abort gets its
        stop, and the run answering is cancelled with its agent (Home
        Assistant allows one active turn per conversation); the device's next
        ``listen start`` is a new turn of the same conversation.
        """
        turn, self._turn = self._turn, None
        if turn is None and not self._announcer.playing:
            return
        self._turn_started.clear()
        if turn is not None:
            turn.end_audio()
        if self._turn_task is not None:
            self._turn_task.cancel()
        self._announcer.cancel(say_stop=True)
        # After a wake word it listens in its default mode; after its button,
        # push-to-talk goes idle.
        idles = reason != ABORT_WAKE_WORD and self.entry_data.listen_mode == "manual"
        self.runtime.entry.async_create_background_task(
            self.hass,
            self._async_after_abort(turn, idles=idles),
            f"xiaozhi abort on {self.runtime.mac}",
        )

    async def _async_after_abort(self, turn: VoiceTurn | None, *, idles: bool) -> None:
        if turn is not None:
            await turn.abort()
        else:
            await self._announcer.async_stopped()
            self.tts_response_finished()
        if idles:
            # The conversation is over, unless its button started the next
            # turn already.
            if self._turn is None:
                await self._async_end_conversation()
            return
        # Auto mode listens again once its queue has played; a device that
        # does not is not left with an open link.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(ABORT_LISTEN_GRACE):
                await self._turn_started.wait()
        if self._turn is None:
            await self._async_end_conversation()

    # --- announcements --------------------------------------------------------

    @property
    def voice_busy(self) -> bool:
        """Return True while a reply or an announcement is spoken."""
        return self._turn is not None or self._gate.deciding or self._announcer.playing

    async def async_announce_media(self, media_id: str) -> None:
        """Announce a sound (the media player's announce)."""
        await self.async_internal_announce(media_id=media_id, preannounce=False)

    @override
    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Play an announcement; blocks until it has played.

        In a conversation it plays on the open audio. An idle device on MQTT
        fetches it as a sound (newer firmware) or shows its text. Media that
        plays stops first, and does not resume.

        The setup wizard's connection test is one (``voice/wizard.py``).
        """
        if is_connection_test(announcement):
            await async_connection_test(
                self.hass,
                self.runtime.name,
                self.runtime.mac,
                self._async_announce(announcement),
                self.entry_data,
            )
        else:
            await self._async_announce(announcement)

    async def _async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        await self.runtime.player.async_stop(end_conversation=False)
        self._cancel_turn()
        if (
            await self._announcer.async_announce(announcement)
            and self.entry_data.listen_mode != "manual"
        ):
            # After tts stop the device would start listening. (Aborted, it
            # is the abort's: a wake word goes on to a turn of its own.)
            await self._async_end_conversation()

    @override
    async def async_start_conversation(
        self, start_announcement: AssistSatelliteAnnouncement
    ) -> None:
        """Play the announcement; the device then listens and the turn continues it."""
        channel = self._announcer.channel()
        if not channel.open and channel.idle_reachable:
            # The firmware opens its microphone only for its own conversations.
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="conversation_needs_wake",
                translation_placeholders={"name": self.runtime.name},
            )
        listening = False
        # Push-to-talk waits for its button after the announcement: not asked.
        if self.entry_data.listen_mode != "manual":
            self._cancel_turn()
            self._next_turn = self.hass.loop.create_future()
            try:
                if await self._announcer.async_play(channel, start_announcement):
                    async with asyncio.timeout(ANSWER_START_TIMEOUT):
                        listening = await self._next_turn
            except TimeoutError:
                pass  # it did not listen again
            finally:
                self._next_turn = None
        if not listening:
            # Push-to-talk, aborted, gone or not listening: nobody can answer.
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="no_answer",
                translation_placeholders={"name": self.runtime.name},
            )

    def _cancel_turn(self) -> None:
        """Drop the turn an announcement takes the device from."""
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None

    async def _async_end_conversation(self) -> None:
        # Gone, the conversation is over anyway.
        with contextlib.suppress(DeviceUnavailableError):
            await self.runtime.voice.async_end_conversation()
