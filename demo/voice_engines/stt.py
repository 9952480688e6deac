"""A stand-in speech-to-text: it hears that someone spoke, not what."""

from collections.abc import AsyncIterable
import logging
from typing import override

from homeassistant.components import stt
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
import numpy as np

from . import DemoVoiceConfigEntry
from .tts import LANGUAGES

_LOGGER = logging.getLogger(__name__)

RATE = 16000
SPEECH_RMS = 300.0  # louder than this, a 16-bit chunk holds speech
QUIET_AFTER_SPEECH = 0.8  # seconds of quiet that end the sentence
MAX_SECONDS = 15.0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: DemoVoiceConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the stand-in recognizer."""
    async_add_entities([DemoSpeechToText(entry)])


class DemoSpeechToText(stt.SpeechToTextEntity):
    """Returns the demo console's sentence once the audio held speech."""

    _attr_name = "Demo speech-to-text"

    def __init__(self, entry: DemoVoiceConfigEntry) -> None:
        """Read transcripts from the entry's queue."""
        self._transcripts = entry.runtime_data.transcripts
        self._attr_unique_id = f"{entry.entry_id}-stt"

    @property
    @override
    def supported_languages(self) -> list[str]:
        """Return the languages the demo speaks."""
        return list(LANGUAGES)

    @property
    @override
    def supported_formats(self) -> list[stt.AudioFormats]:
        """Return WAV."""
        return [stt.AudioFormats.WAV]

    @property
    @override
    def supported_codecs(self) -> list[stt.AudioCodecs]:
        """Return PCM."""
        return [stt.AudioCodecs.PCM]

    @property
    @override
    def supported_bit_rates(self) -> list[stt.AudioBitRates]:
        """Return 16 bits."""
        return [stt.AudioBitRates.BITRATE_16]

    @property
    @override
    def supported_sample_rates(self) -> list[stt.AudioSampleRates]:
        """Return 16 kHz."""
        return [stt.AudioSampleRates.SAMPLERATE_16000]

    @property
    @override
    def supported_channels(self) -> list[stt.AudioChannels]:
        """Return mono."""
        return [stt.AudioChannels.CHANNEL_MONO]

    @override
    async def async_process_audio_stream(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        """Listen until a pause after speech; answer the typed sentence."""
        heard = quiet = total = 0.0
        async for chunk in stream:
            seconds = len(chunk) / (2 * RATE)
            total += seconds
            samples = np.frombuffer(chunk[: len(chunk) // 2 * 2], dtype="<i2")
            loud = samples.size > 0 and float(
                np.sqrt(np.mean(samples.astype(np.float64) ** 2))
            )
            if loud and loud > SPEECH_RMS:
                heard += seconds
                quiet = 0.0
            elif heard:
                quiet += seconds
            if (heard and quiet >= QUIET_AFTER_SPEECH) or total >= MAX_SECONDS:
                break
        if not heard:
            _LOGGER.info("Heard no speech in %.1f s of audio", total)
            return stt.SpeechResult(None, stt.SpeechResultState.ERROR)
        text = self._transcripts.popleft() if self._transcripts else ""
        _LOGGER.info("Heard %.1f s of speech; the console typed %r", heard, text)
        return stt.SpeechResult(text, stt.SpeechResultState.SUCCESS)
