"""One voice turn of a device: its microphone into the pipeline, the reply out.

A turn starts when the device says ``listen start`` and runs one Assist
pipeline from speech-to-text. Pipeline events become device messages, in
order: what it heard (``stt``), ``tts start`` as soon as the agent starts
thinking (the device needs it before audio, and it turns the microphone off),
an emotion (``llm``), the reply text (``tts sentence_start``), the reply audio
as Opus paced in real time, and ``tts stop`` when playback should have ended.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
import contextlib
from dataclasses import dataclass
from typing import Any, Final

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import PipelineEvent, PipelineEventType
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..errors import DeviceUnavailableError
from ..protocol.audio import MIC_SAMPLE_RATE
from ..protocol.audio.codec import OpusDecoder
from ..protocol.audio.pacing import TTS_START_SETTLE
from ..protocol.emotions import emotion_for
from ..speaker.channel import VoiceChannel
from ..speaker.speech import play_audio, stream_pcm
from ..texts import async_device_text
from .stage import Stage

# Microphone audio waiting for the pipeline: 30 s at 60 ms a frame. The
# pipeline's voice detection ends speech after 15 s at most.
MAX_QUEUED_FRAMES: Final = 500
# A listening device sends a frame every 60 ms. Without one for this long it
# has stopped (seen with py-xiaozhi for over a minute): the turn ends.
NO_AUDIO_TIMEOUT: Final = 5.0
DUPLICATE_WAKE_UP: Final = "duplicate_wake_up_detected"

type Step = Callable[[], Awaitable[None]]


def error_text_key(code: str) -> str:
    """Return the device text for a pipeline error code."""
    if code.startswith("stt"):
        return "voice_error_stt"
    if code.startswith("intent"):
        return "voice_error_intent"
    if code.startswith("tts"):
        return "voice_error_tts"
    return "voice_error"


@dataclass(slots=True)
class TurnResult:
    """What a turn heard and said."""

    heard: str | None = None
    reply: str | None = None
    error: str | None = None
    continue_conversation: bool = False


class VoiceTurn:
    """The device side of one pipeline run."""

    def __init__(
        self,
        hass: HomeAssistant,
        channel: VoiceChannel,
        *,
        wake_phrase: str | None,
        on_played: Callable[[], None],
        on_silent: Callable[[], None] | None = None,
        on_stage: Callable[[Stage], None] | None = None,
    ) -> None:
        """Start listening; ``on_played`` is called once the reply has played.

        ``on_silent`` is called when the device sends no audio for
        ``NO_AUDIO_TIMEOUT`` seconds while it is listened to; ``on_stage``
        when the turn stops listening (answering) and starts speaking.
        """
        self.hass = hass
        self.channel = channel
        self.wake_phrase = wake_phrase
        self._on_played = on_played
        self._loop = hass.loop
        self._audio: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._decoder = OpusDecoder(MIC_SAMPLE_RATE)
        self.listening = True
        self.result = TurnResult()
        self._tts_token: str | None = None
        self._tts_start: asyncio.Future[float] = self._loop.create_future()
        self._speaker: asyncio.Task[None] | None = None
        self._steps: asyncio.Queue[Step] = asyncio.Queue()
        self._stepper = hass.async_create_background_task(
            self._run_steps(), f"xiaozhi voice messages of {channel.name}"
        )
        self._speaking = False
        self._tts_stopped = False
        # The reply's end handed the device over to media still Speaking.
        self.handed_over = False
        self.ended = False
        self._on_silent = on_silent
        self._on_stage = on_stage
        self._last_audio = self._loop.time()
        self._watchdog: asyncio.TimerHandle | None = (
            self._loop.call_later(NO_AUDIO_TIMEOUT, self._check_audio)
            if on_silent is not None
            else None
        )

    # --- microphone ------------------------------------------------------

    def feed(self, packet: bytes) -> None:
        """Take one Opus packet from the microphone while listening."""
        if not self.listening:
            return
        self._last_audio = self._loop.time()
        if self._audio.qsize() < MAX_QUEUED_FRAMES:
            self._audio.put_nowait(packet)

    def end_audio(self) -> None:
        """Stop listening: the audio stream ends for the pipeline."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.listening:
            self.listening = False
            self._audio.put_nowait(None)
            if self._on_stage is not None and not self.ended:
                self._on_stage(Stage.ANSWERING)

    def _check_audio(self) -> None:
        """End a turn whose device stopped sending audio while listened to."""
        self._watchdog = None
        if not self.listening or self.ended:
            return
        quiet = self._loop.time() - self._last_audio
        if quiet < NO_AUDIO_TIMEOUT:
            self._watchdog = self._loop.call_later(
                NO_AUDIO_TIMEOUT - quiet, self._check_audio
            )
        elif self._on_silent is not None:
            self._on_silent()

    async def audio_stream(self) -> AsyncIterator[bytes]:
        """Yield 16 kHz 16-bit mono PCM until listening ends.

        Packets are decoded here, on the task of the pipeline that reads
        them, not where they arrive: a decoder's first packet builds its
        resampler (milliseconds), and boxes that start together would
        otherwise pay for all of them in one pass of the UDP reader.
        """
        while (packet := await self._audio.get()) is not None:
            yield self._decoder.decode(packet)

    # --- pipeline events -------------------------------------------------

    def on_event(self, event: PipelineEvent) -> None:
        """Turn a pipeline event into device messages (in order)."""
        data = event.data or {}
        channel = self.channel
        match event.type:
            case PipelineEventType.RUN_START:
                if isinstance(output := data.get("tts_output"), dict):
                    self._tts_token = output.get("token")
            case PipelineEventType.STT_VAD_END:
                self.end_audio()
            case PipelineEventType.STT_END:
                self.end_audio()
                text = str(data.get("stt_output", {}).get("text", ""))
                self.result.heard = text
                self._step(lambda: channel.async_show_heard(text))
            case PipelineEventType.INTENT_START:
                self._step(self._start_speaking)
                self._step(lambda: channel.async_show_emotion("thinking"))
            case PipelineEventType.INTENT_PROGRESS if data.get("tts_start_streaming"):
                self._speak(self._tts_token)
            case PipelineEventType.INTENT_END:
                self._on_intent_end(data)
            case PipelineEventType.TTS_START:
                text = str(data.get("tts_input", ""))
                self._step(lambda: channel.async_show_reply(text))
            case PipelineEventType.TTS_END:
                output = data.get("tts_output") or {}
                self._speak(output.get("token") or self._tts_token)
            case PipelineEventType.ERROR:
                self._on_error(str(data.get("code", "")), str(data.get("message", "")))

    def _on_intent_end(self, data: dict[str, Any]) -> None:
        output = data.get("intent_output") or {}
        response = output.get("response") or {}
        speech = response.get("speech") or {}
        reply = str((speech.get("plain") or {}).get("speech", ""))
        self.result.reply = reply
        self.result.continue_conversation = bool(output.get("continue_conversation"))
        emotion = emotion_for(
            reply,
            failed=response.get("response_type") == "error",
            acted=response.get("response_type") == "action_done",
        )
        self._step(lambda: self.channel.async_show_emotion(emotion))

    def _on_error(self, code: str, message: str) -> None:
        self.end_audio()
        self.result.error = code
        if code == DUPLICATE_WAKE_UP:
            # Another satellite took this wake word: end this turn quietly.
            LOGGER.debug("%s: %s", self.channel.name, message)
            return
        LOGGER.info("%s: the voice assistant failed: %s", self.channel.name, message)
        self._step(lambda: self._show_error(error_text_key(code)))

    async def _show_error(self, key: str) -> None:
        text = await async_device_text(self.hass, key)
        await self.channel.async_show_emotion("sad")
        await self.channel.async_show_sentence(text)

    async def fail(self, key: str) -> None:
        """Stop listening and show why there is no answer (no pipeline ran)."""
        self.end_audio()
        with contextlib.suppress(HomeAssistantError):
            await self._show_error(key)

    # --- device messages, in order ----------------------------------------

    def _step(self, step: Step) -> None:
        self._steps.put_nowait(step)

    async def _run_steps(self) -> None:
        while True:
            step = await self._steps.get()
            try:
                await step()
            except HomeAssistantError as err:
                LOGGER.debug("%s: voice message not sent: %s", self.channel.name, err)
            finally:
                self._steps.task_done()

    async def _start_speaking(self) -> None:
        """Send ``tts start``: the device goes Speaking and its microphone off."""
        if self._tts_start.done() or self._speaking:
            return
        self._speaking = True  # from here on the turn ends with tts stop
        if self._on_stage is not None and not self.ended:
            self._on_stage(Stage.SPEAKING)
        try:
            await self.channel.async_start_speaking()
        finally:
            if not self._tts_start.done():
                self._tts_start.set_result(self._loop.time())

    # --- the reply ---------------------------------------------------------

    def _speak(self, token: str | None) -> None:
        if self._speaker is not None or token is None:
            return
        self._step(self._start_speaking)
        self._speaker = self.hass.async_create_background_task(
            self._play(token), f"xiaozhi reply to {self.channel.name}"
        )

    async def _play(self, token: str) -> None:
        """Play the reply: decode, encode and pace it, then ``tts stop``."""
        stream = tts.async_get_stream(self.hass, token)
        if stream is None:
            LOGGER.warning("%s: the reply's audio is gone", self.channel.name)
            return
        started = await self._tts_start
        try:
            await play_audio(
                self.channel,
                stream_pcm(self.hass, stream, self.channel.sample_rate),
                not_before=started + TTS_START_SETTLE,
            )
        except DeviceUnavailableError as err:
            LOGGER.debug("%s: reply not played: %s", self.channel.name, err)
        except Exception as err:  # noqa: BLE001 - a TTS engine raises its own errors
            LOGGER.warning(
                "%s: the reply could not be spoken: %s",
                self.channel.name,
                str(err) or type(err).__name__,
            )
            self._step(lambda: self._show_error("voice_error_tts"))

    # --- the end -----------------------------------------------------------

    async def finish(self, hand_over: Callable[[bool], bool] | None = None) -> bool:
        """Wait for the reply to play and stop speaking.

        Returns True when the conversation continues (the agent asked a
        question): the device listens again by itself after ``tts stop``.
        Otherwise ``hand_over(speaking)`` is offered the device first; when
        it takes it (media waited for the reply) the device goes on Speaking
        with no ``tts stop``. A stop followed by a start would have the
        firmware enter Listening in between (``application.cc``: auto mode
        sends ``listen start`` once its queue is idle) and drop the audio
        that comes before it is Speaking again.
        """
        if self._speaker is not None:
            await self._speaker
        await self._steps.join()
        continues = self.result.continue_conversation and self.result.error is None
        self.handed_over = (
            not continues
            and hand_over is not None
            and hand_over(self._speaking and not self._tts_stopped)
        )
        if not self.handed_over:
            await self._stop_speaking()
        self._on_played()
        self._close()
        return continues

    async def abort(self) -> None:
        """Stop the reply at once (within one frame) and say ``tts stop``."""
        self.end_audio()
        if self._speaker is not None:
            self._speaker.cancel()
        await self._stop_speaking()
        self._on_played()
        self._close()

    def cancel(self) -> None:
        """Drop the turn without a word to the device (its link is gone)."""
        self.end_audio()
        if self._speaker is not None:
            self._speaker.cancel()
        self._close()

    async def _stop_speaking(self) -> None:
        if self._speaking and not self._tts_stopped:
            self._tts_stopped = True
            try:
                await self.channel.async_stop_speaking()
            except HomeAssistantError as err:
                LOGGER.debug("%s: tts stop not sent: %s", self.channel.name, err)

    def _close(self) -> None:
        self.ended = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._stepper.cancel()
        # What is left will not be sent: nobody may wait for it.
        while not self._steps.empty():
            self._steps.get_nowait()
            self._steps.task_done()
        if not self._tts_start.done():
            self._tts_start.cancel()
