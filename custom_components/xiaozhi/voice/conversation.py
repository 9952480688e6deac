"""A device's conversation: the one owner of its voice path.

The runtime hands the conversation everything the device says (its events,
its microphone) and the channel of each session. The conversation decides,
as one state machine (:class:`Stage`): a ``listen start`` opens a turn, or
waits while its area picks a box (``gate.py``); a turn runs the pipeline of
the Assist satellite it serves (:class:`VoiceHost`) and speaks its reply
(``turns.py``, ``turn.py``); an abort stops it; Home Assistant's
announcements and questions take the open audio (``words.py``). Media on the
speaker gives way to all of it. A typed question (a ``detect`` with a
sentence and no pre-roll) is answered aloud. With no satellite to serve (it
is disabled), a device that starts listening is told so and let go.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, Protocol

from homeassistant.components.assist_pipeline import PipelineEvent
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import translated_error
from ..media.announce import Announcer
from ..media.player import MediaPlayback, PlaybackState
from ..protocol import DeviceEvent, DeviceEventType
from ..protocol.audio.preroll import Heard
from ..settings import DeviceOptions
from ..speaker.channel import VoiceChannel
from .arbiter import WakeArbiter
from .gate import WakeGate
from .stage import Stage
from .turns import ABORT_WAKE_WORD, Turns
from .typed import PrerollWatch, async_answer_typed, async_refuse, is_typed_question
from .words import Words

BUSY: Final = frozenset(
    {Stage.DECIDING, Stage.LISTENING, Stage.ANSWERING, Stage.SPEAKING, Stage.ANNOUNCING}
)


class VoiceHost(Protocol):
    """The Assist satellite a conversation runs through."""

    @property
    def pipeline_entity_id(self) -> str | None:
        """Return the device's pipeline select."""

    async def async_run_pipeline(
        self, audio: AsyncIterator[bytes], wake_phrase: str | None
    ) -> None:
        """Run the pipeline from speech-to-text on ``audio``."""

    def response_finished(self) -> None:
        """Go back to idle, if not there."""

    async def async_converse(self, text: str) -> str:
        """Return the answer of the pipeline's agent to a typed ``text``."""

    async def async_say(self, message: str) -> None:
        """Announce ``message`` with the pipeline's text-to-speech."""

    async def async_say_media(self, media_id: str) -> None:
        """Announce a sound (a media id), as Home Assistant resolves it."""


class Conversation:
    """The voice path of one device, across its sessions."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        device: XiaozhiEntryData,
        *,
        player: MediaPlayback,
        arbiter: WakeArbiter,
        options: DeviceOptions,
        fire: Callable[[DeviceEvent], None],
    ) -> None:
        """Serve the device of ``entry``; media on ``player`` gives way to it.

        ``fire`` fires the device's events (the runtime's).
        """
        self._hass = hass
        self._entry = entry
        self._device = device
        self._name = entry.title
        self._player = player
        self.options = options
        self.stage = Stage.IDLE
        self.channel: VoiceChannel | None = None
        self._host: VoiceHost | None = None
        self.words = Words(
            hass,
            self._name,
            device,
            player,
            take=self._take,
            release=self._release,
            end=self.async_end,
        )
        self._turns = Turns(
            hass,
            device,
            name=self._name,
            player=player,
            announcer=self.words.announcer,
            spawn=self._spawn,
            enter=self._enter,
            finished=self._finished,
            end=self.async_end,
        )
        self._gate = WakeGate(
            hass,
            arbiter,
            name=self._name,
            device=device,
            checks_false_wakes=lambda: self.options.false_wake_check,
            fire=fire,
            pipeline_entity=lambda: (
                self._host.pipeline_entity_id if self._host else None
            ),
            start_turn=self._start_turn,
            stand_down=self.async_end,
        )
        self._preroll = PrerollWatch(hass.loop.time)

    @property
    def busy(self) -> bool:
        """Return True while the device hears or says something of ours."""
        return self.stage in BUSY

    @callback
    def _enter(self, stage: Stage) -> None:
        if stage is not self.stage:
            LOGGER.debug("%s: %s -> %s", self._name, self.stage, stage)
            self.stage = stage

    @callback
    def _finished(self) -> None:
        """Tell the satellite the reply has played (or was cut short)."""
        if self._host is not None:
            self._host.response_finished()

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> asyncio.Task[None]:
        return self._entry.async_create_background_task(
            self._hass, coro, f"xiaozhi {what} of {self._device.mac}"
        )

    # --- the satellite and the sessions ------------------------------------

    @callback
    def attach(self, host: VoiceHost) -> CALLBACK_TYPE:
        """Serve ``host`` until the callback is called."""
        self._host = host
        leave = self._gate.join(self._could_start)

        @callback
        def detach() -> None:
            leave()
            if self._host is host:
                self.shutdown()
                self._host = None

        return detach

    @callback
    def _could_start(self) -> bool:
        """Return True when a wake word would start a conversation here now.

        Not in a conversation, announcing or playing media, and reachable
        (connected, or away as planned: a WebSocket box dials on its wake).
        """
        device = self._device
        return (
            self.stage is Stage.IDLE
            and self._player.state is PlaybackState.IDLE
            and (device.link is not None or device.expected_disconnect)
        )

    @callback
    def session_opened(self, channel: VoiceChannel) -> None:
        """Speak through the new session's ``channel``."""
        self.channel = channel

    @callback
    def session_closed(self) -> None:
        """Drop everything: the device is gone."""
        self.channel = None
        self._player.device_took_over(gone=True)
        self._gone()

    @callback
    def conversation_over(self) -> None:
        """Home Assistant ended a conversation on a link that stays up."""
        self._player.conversation_over()
        self._gone()

    @callback
    def _gone(self) -> None:
        """Drop whatever the device was doing: its audio is gone."""
        self._gate.reset()
        self._gate.conversing = False
        self._turns.drop()
        self.words.announcer.cancel()
        self.words.answered(listening=False)
        self._enter(Stage.IDLE)
        self._finished()

    async def async_end(self) -> None:
        """End the conversation (the device goes idle); gone, it is over anyway."""
        if (channel := self.channel) is not None:
            await channel.async_end_conversation()

    @callback
    def shutdown(self) -> None:
        """Drop what runs: the satellite or the device's entry goes."""
        self._turns.shutdown()
        self._gate.reset()
        self.words.announcer.cancel()

    # --- what the device says ------------------------------------------------

    @callback
    def takes_typed(self, event: DeviceEvent) -> bool:
        """Answer a question typed on a text client; True when ``event`` was one.

        A wake word comes after the audio from before it (the pre-roll); a
        text client sends none (py-xiaozhi streams live audio first).
        """
        text = str(event.data.get("text") or "")
        if (
            event.type is not DeviceEventType.WAKE_WORD
            or not is_typed_question(text, self._device.wake_word)
            or self._preroll.recent
        ):
            return False
        LOGGER.debug("%s: typed question %r", self._name, text)
        if (host := self._host) is None:
            self._refuse()
            return True
        # py-xiaozhi listens before it sends the text: half a sentence must
        # not reach the agent.
        self._turns.drop()
        self._gate.reset()
        self._spawn(
            async_answer_typed(
                self.channel, self._name, text, host.async_converse, host.async_say
            ),
            "typed question",
        )
        return True

    @callback
    def _refuse(self) -> None:
        if (channel := self.channel) is not None:
            self._spawn(async_refuse(self._hass, channel, self._name), "refuse voice")

    @callback
    def on_event(self, event: DeviceEvent) -> None:
        """Follow the device: wake word, listening, abort, goodbye."""
        reason = str(event.data.get("reason") or "")
        match event.type:
            case DeviceEventType.WAKE_WORD:
                # The user woke the device: media gives way to the conversation.
                self._player.device_took_over()
                # Only the firmware's wake word engine sends its pre-roll: a
                # text client's greeting ("hi") is not the device's wake word.
                text = str(event.data.get("text") or "")
                if text and self._preroll.recent:
                    self._device.async_set_wake_word(text)
                if self._host is not None:
                    self._gate.wake_word(text or None)
            case DeviceEventType.ABORTED:
                if reason == ABORT_WAKE_WORD:
                    self._player.device_took_over()
                else:
                    self._player.async_silence()  # its button: the user wants quiet
                self._turns.abort(reason)
            case DeviceEventType.CONVERSATION_ENDED:
                self._player.conversation_over()
                self._gone()
            case DeviceEventType.LISTENING_STARTED:
                self._listening_started()
            case DeviceEventType.LISTENING_STOPPED:
                if (turn := self._turns.turn) is not None:
                    turn.end_audio()
                self._gate.listening_stopped()

    @callback
    def _listening_started(self) -> None:
        if self._host is None:
            # Nobody serves it: a listening device would stream its
            # microphone for as long as the link stays open.
            self._refuse()
            return
        if self._player.holds_channel:
            # Sent after the reply, before the media's tts start reached the
            # device (auto mode): not the user's turn.
            LOGGER.debug("%s: listen start during media", self._name)
            return
        if self._turns.listening and not self._gate.woken:
            # It says again what it does (py-xiaozhi answers the tts stop of
            # an abort it followed with its own listen start).
            LOGGER.debug("%s: listen start while listened to", self._name)
            return
        self._gate.listening_started(asked=self.words.asking)
        if self._gate.deciding:
            self._enter(Stage.DECIDING)
            # A wake word inside a conversation: its audio is held.
            self._turns.give_up()

    @callback
    def on_audio(self, payload: bytes, heard: Heard | None = None) -> None:
        """Take microphone audio; the turn starts with ``listen start``.

        The firmware first sends about two seconds of audio from before the
        wake word, which is not part of what the user says; the gate holds
        it, and the turn's audio until the turn may start. ``heard``: what
        the wire says of a UDP packet.
        """
        if not self._turns.listening and not self._gate.deciding:
            # Only audio that came before a listen start can be a pre-roll:
            # what follows one is live, however bunched a busy server reads it.
            self._preroll.heard(heard.received if heard is not None else None)
        if self._turns.listening and (turn := self._turns.turn) is not None:
            for live in self._gate.turn_audio(payload, heard):
                turn.feed(live)
        elif self._host is not None:
            self._gate.audio(payload, heard)

    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Pass a pipeline event on to the turn it belongs to."""
        self._turns.on_pipeline_event(event)

    @callback
    def _start_turn(self, wake: str | None, live: list[bytes], stopped: bool) -> None:
        """Start the turn the gate let through, with the audio held for it."""
        if (channel := self.channel) is None:  # pragma: no cover - events need a link
            return
        self._turns.start(
            channel,
            self._host,
            wake=wake,
            live=live,
            stopped=stopped,
            answering=self.words.answered(listening=True),
        )

    # --- Home Assistant's own words -------------------------------------------

    async def async_announce_media(self, media_id: str) -> None:
        """Announce a sound through the satellite (the media player's announce)."""
        if self._host is None:
            raise translated_error("announce_voice_off", self._name)
        await self._host.async_say_media(media_id)

    @callback
    def _take(self, stage: Stage) -> VoiceChannel:
        """Give the device up to Home Assistant's own words (``words.py``)."""
        channel = Announcer.channel(self.channel, self._name)
        self._turns.give_up()
        self._enter(stage)
        return channel

    @callback
    def _release(self, stage: Stage) -> None:
        if self.stage is stage:
            self._enter(Stage.IDLE)
