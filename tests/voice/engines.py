"""Fake speech engines and agent, for the voice tests and the voice benchmark.

Speech-to-text, text-to-speech and a conversation agent are entities of a
mock integration (``voicetest``), built with the plugin's ``MockModule`` and
``MockPlatform`` as core's assist_pipeline tests do. Set them up before the
integration, so the default pipeline uses them; Home Assistant's own agent
answers unless :meth:`Voice.use_agent` switches to the fake one.
"""

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

from homeassistant.components import assist_pipeline, conversation, stt, tts
from homeassistant.config_entries import ConfigEntry, ConfigFlow
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import intent
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.setup import async_setup_component
import numpy as np
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    MockModule,
    MockPlatform,
    mock_config_flow,
    mock_integration,
    mock_platform,
)

from simulator.voice import tone, wav_bytes

ENGINES = "voicetest"
TTS_RATE = 22050  # Piper's rate: the satellite resamples to the device's 24 kHz


def loud(pcm: bytes) -> bool:
    """Return True when 16-bit PCM holds more than silence."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return samples.size > 0 and float(np.sqrt(np.mean(samples**2))) > 300


class FakeSTT(stt.SpeechToTextEntity):
    """Listens until half a second of quiet after sound, then says ``text``."""

    _attr_name = "Fake STT"
    _attr_unique_id = "fake-stt"

    def __init__(self) -> None:
        """Start with a default transcript."""
        self.text: str | Callable[[bytes], str] = "turn on the lights"
        self.received = bytearray()
        self.calls = 0
        self.quiet_after = 0.5
        self.max_seconds = 10.0
        # When each transcript was handed to the pipeline (loop time).
        self.answered_at: list[float] = []
        self.delay = 0.0

    @property
    def supported_languages(self) -> list[str]:
        """Return English."""
        return ["en"]

    @property
    def supported_formats(self) -> list[stt.AudioFormats]:
        """Return WAV."""
        return [stt.AudioFormats.WAV]

    @property
    def supported_codecs(self) -> list[stt.AudioCodecs]:
        """Return PCM."""
        return [stt.AudioCodecs.PCM]

    @property
    def supported_bit_rates(self) -> list[stt.AudioBitRates]:
        """Return 16 bits."""
        return [stt.AudioBitRates.BITRATE_16]

    @property
    def supported_sample_rates(self) -> list[stt.AudioSampleRates]:
        """Return 16 kHz."""
        return [stt.AudioSampleRates.SAMPLERATE_16000]

    @property
    def supported_channels(self) -> list[stt.AudioChannels]:
        """Return mono."""
        return [stt.AudioChannels.CHANNEL_MONO]

    async def async_process_audio_stream(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        """Collect the audio; end at quiet after sound, as a real engine would."""
        self.calls += 1
        self.received = bytearray()
        heard = False
        quiet = 0.0
        async for chunk in stream:
            self.received += chunk
            if loud(chunk):
                heard, quiet = True, 0.0
            elif heard:
                quiet += len(chunk) / 32000
                if quiet >= self.quiet_after:
                    break
            if len(self.received) >= self.max_seconds * 32000:
                break
        if self.delay:
            await asyncio.sleep(self.delay)
        text = self.text(bytes(self.received)) if callable(self.text) else self.text
        self.answered_at.append(asyncio.get_running_loop().time())
        return stt.SpeechResult(text, stt.SpeechResultState.SUCCESS)


class FakeTTS(tts.TextToSpeechEntity):
    """Says every message as a tone of ``seconds`` at ``frequency`` (WAV)."""

    _attr_name = "Fake TTS"
    _attr_unique_id = "fake-tts"
    _attr_default_language = "en"
    _attr_supported_languages = ["en"]  # noqa: RUF012

    def __init__(self) -> None:
        """Start with one second of 880 Hz."""
        self.seconds = 1.0
        self.frequency = 880.0
        self.messages: list[str] = []
        self.fail = False
        self.break_midway: Exception | None = None  # raised after the first half
        self.gate: asyncio.Event | None = None
        # When each stream handed out its first bytes (loop time).
        self.first_chunk_at: list[float] = []

    async def async_get_tts_audio(
        self, message: str, language: str, options: dict[str, Any]
    ) -> tts.TtsAudioType:
        """Return the tone as a WAV."""
        self.messages.append(message)
        if self.fail:
            return None, None
        return "wav", wav_bytes(tone(self.frequency, self.seconds, TTS_RATE), TTS_RATE)

    async def async_stream_tts_audio(
        self, request: tts.TTSAudioRequest
    ) -> tts.TTSAudioResponse:
        """Stream the WAV: the first half at once, the rest once ``gate`` opens."""
        message = "".join([part async for part in request.message_gen])
        extension, data = await self.async_get_tts_audio(message, "en", {})
        if data is None:
            raise tts.HomeAssistantError("no audio")
        gate = self.gate
        broken = self.break_midway

        first_chunks = self.first_chunk_at

        async def chunks() -> AsyncIterator[bytes]:
            middle = len(data) // 2
            first_chunks.append(asyncio.get_running_loop().time())
            yield data[:middle]
            if broken is not None:
                raise broken
            if gate is not None:
                await gate.wait()
            yield data[middle:]

        return tts.TTSAudioResponse(extension=extension or "wav", data_gen=chunks())


class FakeAgent(conversation.ConversationEntity):
    """Answers ``reply``; asks back when ``ask_back`` is set."""

    _attr_name = "Fake agent"
    _attr_unique_id = "fake-agent"
    _attr_supported_features = conversation.ConversationEntityFeature.CONTROL

    def __init__(self) -> None:
        """Start with a short answer."""
        self.reply = "Sure, done 😊"
        self.ask_back = False
        self.delay = 0.0
        self.inputs: list[conversation.ConversationInput] = []
        # Runs answering now, at most at once, and cut short.
        self.answering = 0
        self.most_at_once = 0
        self.cancelled = 0

    @property
    def supported_languages(self) -> list[str]:
        """Return every language."""
        return ["en", "zh-Hans"]

    async def _async_handle_message(
        self,
        user_input: conversation.ConversationInput,
        chat_log: conversation.ChatLog,
    ) -> conversation.ConversationResult:
        """Answer, and say whether the conversation continues."""
        self.inputs.append(user_input)
        self.answering += 1
        self.most_at_once = max(self.most_at_once, self.answering)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.answering -= 1
        chat_log.async_add_assistant_content_without_tools(
            conversation.AssistantContent(
                agent_id=user_input.agent_id, content=self.reply
            )
        )
        response = intent.IntentResponse(language=user_input.language)
        response.async_set_speech(self.reply)
        return conversation.ConversationResult(
            response=response,
            conversation_id=chat_log.conversation_id,
            continue_conversation=self.ask_back,
        )


@dataclass
class Voice:
    """The fake engines, and switches for the pipeline."""

    hass: HomeAssistant
    stt: FakeSTT
    tts: FakeTTS
    agent: FakeAgent
    entries: list[ConfigEntry] = field(default_factory=list)

    async def use_engines(self) -> None:
        """Make the preferred pipeline use the fake speech engines.

        For a Home Assistant whose pipeline was made before the engines.
        """
        pipeline = assist_pipeline.async_get_pipeline(self.hass)
        await assist_pipeline.async_update_pipeline(
            self.hass,
            pipeline,
            stt_engine=self.stt.entity_id,
            stt_language="en",
            tts_engine=self.tts.entity_id,
            tts_language="en",
        )

    async def use_agent(self) -> None:
        """Answer with the fake agent instead of Home Assistant's own."""
        pipeline = assist_pipeline.async_get_pipeline(self.hass)
        await assist_pipeline.async_update_pipeline(
            self.hass, pipeline, conversation_engine=self.agent.entity_id
        )


class _EnginesFlow(ConfigFlow):
    """The mock integration needs a config flow to have entries."""


@contextmanager
def tts_cache_in(directory: Path) -> Generator[None]:
    """Keep text-to-speech files in ``directory``."""
    with (
        patch(
            "homeassistant.components.tts._init_tts_cache_dir",
            return_value=str(directory),
        ),
        patch("homeassistant.components.tts._get_cache_files", return_value={}),
    ):
        yield


async def async_setup_engines(hass: HomeAssistant) -> Voice:
    """Set up fake speech-to-text, text-to-speech and agent entities.

    Call it with :func:`tts_cache_in` in effect, before the integration.
    """
    fakes = Voice(hass=hass, stt=FakeSTT(), tts=FakeTTS(), agent=FakeAgent())

    async def setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
        await hass.config_entries.async_forward_entry_setups(
            entry, [Platform.STT, Platform.TTS, Platform.CONVERSATION]
        )
        return True

    def platform(entity: Any) -> MockPlatform:
        async def add(
            hass: HomeAssistant,
            entry: ConfigEntry,
            async_add_entities: AddConfigEntryEntitiesCallback,
        ) -> None:
            async_add_entities([entity])

        return MockPlatform(async_setup_entry=add)

    mock_integration(hass, MockModule(ENGINES, async_setup_entry=setup_entry))
    mock_platform(hass, f"{ENGINES}.stt", platform(fakes.stt))
    mock_platform(hass, f"{ENGINES}.tts", platform(fakes.tts))
    mock_platform(hass, f"{ENGINES}.conversation", platform(fakes.agent))
    mock_platform(hass, f"{ENGINES}.config_flow")
    assert await async_setup_component(hass, "homeassistant", {})
    with mock_config_flow(ENGINES, _EnginesFlow):
        entry = MockConfigEntry(domain=ENGINES)
        entry.add_to_hass(hass)
        if not await hass.config_entries.async_setup(entry.entry_id):
            raise RuntimeError("the fake voice engines did not set up")
        await hass.async_block_till_done()
    return fakes
