"""The turns of a conversation: one at a time, from ``listen start`` to its end.

A turn (``turn.py``) runs the satellite's pipeline on the device's
microphone and speaks the reply. This is what starts it, runs it, and ends
it: when the reply has played (the conversation ends, or goes on when the
agent asked back), when the device stops sending audio, when Home Assistant
takes the device for its own words, and when the device aborts.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
import contextlib
from typing import Any, Final, Protocol

from homeassistant.components.assist_pipeline import PipelineEvent, PipelineNotFound
from homeassistant.core import HomeAssistant, callback

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..media.announce import Announcer
from ..media.player import MediaPlayback
from ..settings import server_settings_of
from ..speaker.channel import VoiceChannel
from .stage import Stage
from .turn import VoiceTurn

ABORT_WAKE_WORD: Final = "wake_word_detected"
# After an abort, how long the device may take to listen again (auto mode:
# once what it holds has played, at most 2.4 s) before the conversation ends.
ABORT_LISTEN_GRACE: Final = 3.0
# Home Assistant cancels a turn's pipeline before its own announcement,
# conversation or question; if none of them reaches the device by then, the
# turn is ended rather than left listening to nobody.
TAKEOVER_GRACE: Final = 5.0

# Runs a task of the device's entry, named for what it does.
type Spawn = Callable[[Coroutine[Any, Any, None], str], asyncio.Task[None]]


class PipelineRunner(Protocol):
    """Runs the pipeline of the Assist satellite a turn speaks for."""

    async def async_run_pipeline(
        self, audio: AsyncIterator[bytes], wake_phrase: str | None
    ) -> None:
        """Run the pipeline from speech-to-text on ``audio``."""


class Turns:
    """The device's turns, one at a time."""

    def __init__(
        self,
        hass: HomeAssistant,
        device: XiaozhiEntryData,
        *,
        name: str,
        player: MediaPlayback,
        announcer: Announcer,
        spawn: Spawn,
        enter: Callable[[Stage], None],
        finished: Callable[[], None],
        end: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Run the turns of ``device`` (``name`` in the log).

        ``spawn`` runs a task of the device's entry, ``enter`` moves the
        conversation's stage, ``finished`` tells the satellite a reply has
        played, ``end`` ends the conversation.
        """
        self._hass = hass
        self._device = device
        self._name = name
        self._player = player
        self._announcer = announcer
        self._spawn = spawn
        self._enter = enter
        self._finished = finished
        self._end = end
        self.turn: VoiceTurn | None = None
        self._run: asyncio.Task[None] | None = None
        self._answering = False  # the turn answers Home Assistant's question
        self._started = asyncio.Event()

    @property
    def listening(self) -> bool:
        """Return True while a turn takes the microphone."""
        return self.turn is not None and self.turn.listening

    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Pass a pipeline event on to the turn it belongs to."""
        if self.turn is not None:
            self.turn.on_event(event)

    @callback
    def start(
        self,
        channel: VoiceChannel,
        runner: PipelineRunner | None,
        *,
        wake: str | None,
        live: list[bytes],
        stopped: bool,
        answering: bool,
    ) -> None:
        """Start a turn with the audio held for it (``stopped``: already let go).

        ``answering``: it answers Home Assistant's question, and ends with
        its audio rather than being cut short.
        """
        if self.turn is not None:
            self.turn.cancel()  # a new listen start ends the old turn
        self._announcer.cancel()
        turn = VoiceTurn(
            self._hass,
            channel,
            # With arbitration, Home Assistant's home-wide cooldown by wake
            # phrase must not silence a box in another area.
            wake_phrase=None
            if server_settings_of(self._hass).wake_arbitration
            else wake,
            on_played=self._finished,
            # Called seconds later, when ``turn`` is this turn.
            on_silent=lambda: self._silent(turn),
            on_stage=lambda stage: self._turn_stage(turn, stage),
        )
        self.turn = turn
        self._enter(Stage.LISTENING)
        self._started.set()
        self._answering = answering
        for payload in live:
            turn.feed(payload)
        if stopped:
            turn.end_audio()
        if runner is not None:
            self._run = self._spawn(self._run_turn(runner, turn), "voice turn")

    @callback
    def _turn_stage(self, turn: VoiceTurn, stage: Stage) -> None:
        if turn is self.turn:
            self._enter(stage)

    async def _run_turn(self, runner: PipelineRunner, turn: VoiceTurn) -> None:
        try:
            await runner.async_run_pipeline(turn.audio_stream(), turn.wake_phrase)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            if self.turn is turn:
                # Home Assistant's own announcement, conversation or question
                # is about to take the device; if it fails first, end this.
                self._spawn(self._async_end_unless_taken_over(turn), "takeover")
            return  # another run (a new turn, an announcement) replaced this one
        except PipelineNotFound as err:
            LOGGER.warning("%s: no voice assistant to answer: %s", self._name, err)
            await turn.fail("voice_error")
        if turn.ended:
            # The device went away while it ran: nothing more to say to it.
            self._finished()
            return
        continues = await turn.finish(
            # A turn the device started meanwhile has it listening: media
            # that takes over then says ``tts start`` itself.
            lambda speaking: self._player.take_over_channel(
                speaking=speaking and self.turn is turn
            )
        )
        if self.turn is turn:
            self.turn = None
            self._enter(Stage.ASKING if continues else Stage.IDLE)
        if continues:
            return
        if self.turn is not None:
            # The device went back to listening by itself after tts stop
            # (auto mode) before the end reached it: over all the same.
            self.turn.cancel()
            self.turn = None
            self._enter(Stage.IDLE)
            if (run := self._run) is not None and run is not asyncio.current_task():
                run.cancel()
        if turn.handed_over:
            return  # media waited for the reply; it ends the conversation
        await turn.channel.async_end_conversation()

    async def _async_end_unless_taken_over(self, turn: VoiceTurn) -> None:
        await asyncio.sleep(TAKEOVER_GRACE)
        if self.turn is not turn:
            return  # an announcement or a new turn has the device
        LOGGER.debug("%s: nothing took over the cancelled turn", self._name)
        self.drop()
        self._finished()
        await self._end()

    @callback
    def drop(self) -> None:
        """Drop the current turn without a word to the device.

        A run still listening is cancelled (half a sentence must not reach
        the agent) unless it answers Home Assistant's own question, which
        ends with its audio so that the question learns its outcome. A run
        past listening goes on: the user said all of it.
        """
        if (turn := self.turn) is None:
            return
        self.turn = None
        self._enter(Stage.IDLE)
        cut_short = turn.listening and not self._answering
        turn.cancel()
        if cut_short and self._run is not None:
            self._run.cancel()

    @callback
    def give_up(self) -> None:
        """Let the turn go for Home Assistant's own words (its run stops)."""
        if self.turn is not None:
            self.turn.cancel()
            self.turn = None

    @callback
    def _silent(self, turn: VoiceTurn) -> None:
        """End a turn whose device stopped sending audio; it goes idle.

        Nobody would end it otherwise: the device shows Listening and the
        satellite listens, for as long as the link lasts. A turn answering
        Home Assistant's question ends with its audio (no answer) instead.
        """
        if turn is not self.turn:
            return
        LOGGER.info(
            "%s stopped sending audio while listened to; ending its turn", self._name
        )
        if self._answering:
            turn.end_audio()
            return
        self.drop()
        self._finished()
        self._spawn(self._end(), "end silent turn")

    @callback
    def abort(self, reason: str) -> None:
        """Stop speaking at once, say ``tts stop``, and listen to what comes next.

        The firmware (``main/application.cc``) stays Speaking after its
        button's abort until it gets ``tts stop``; then auto mode listens
        again (a new ``listen start``) and manual mode goes idle. After a wake
        word it listens at once and ignores the stop. So every abort gets its
        stop, and the run answering is cancelled with its agent (Home
        Assistant allows one active turn per conversation); the device's next
        ``listen start`` is a new turn of the same conversation.
        """
        turn, self.turn = self.turn, None
        if turn is None and not self._announcer.playing:
            return
        self._enter(Stage.IDLE)
        self._started.clear()
        if turn is not None:
            turn.end_audio()
        if self._run is not None:
            self._run.cancel()
        self._announcer.cancel(say_stop=True)
        # After a wake word it listens in its default mode; after its button,
        # push-to-talk goes idle.
        idles = reason != ABORT_WAKE_WORD and self._device.push_to_talk
        self._spawn(self._async_after_abort(turn, idles=idles), "abort")

    async def _async_after_abort(self, turn: VoiceTurn | None, *, idles: bool) -> None:
        if turn is not None:
            await turn.abort()
        else:
            await self._announcer.async_stopped()
            self._finished()
        if not idles:
            # Auto mode listens again once its queue has played; a device
            # that does not is not left with an open link.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ABORT_LISTEN_GRACE):
                    await self._started.wait()
        if self.turn is None:
            await self._end()

    @callback
    def shutdown(self) -> None:
        """Drop what runs: the satellite or the device's entry goes."""
        if self.turn is not None:
            self.turn.cancel()
        if self._run is not None:
            self._run.cancel()
