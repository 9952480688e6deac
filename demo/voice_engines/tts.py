"""Text-to-speech with espeak-ng (a tone per word when it is not installed)."""

import asyncio
import io
import logging
import shutil
from typing import Any, override
import wave

from homeassistant.components import tts
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
import numpy as np

from . import DemoVoiceConfigEntry

_LOGGER = logging.getLogger(__name__)

# Home Assistant language -> espeak-ng voice
LANGUAGES = {"en": "en-us", "zh": "cmn", "de": "de", "fr": "fr", "es": "es"}
TONE_RATE = 22050
TIMEOUT = 30.0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: DemoVoiceConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the speaker."""
    async_add_entities([DemoTextToSpeech(entry.entry_id)])


def beeps(message: str) -> bytes:
    """Return a WAV of one short tone per word, for machines without espeak-ng."""
    times = np.arange(TONE_RATE * 18 // 100) / TONE_RATE
    gap = np.zeros(TONE_RATE * 7 // 100)
    words = [
        np.concatenate([8000 * np.sin(2 * np.pi * (440 + 60 * (i % 5)) * times), gap])
        for i in range(max(1, len(message.split())))
    ]
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(TONE_RATE)
        wav.writeframes(np.concatenate(words).astype("<i2").tobytes())
    return out.getvalue()


class DemoTextToSpeech(tts.TextToSpeechEntity):
    """Speaks with espeak-ng."""

    _attr_name = "Demo text-to-speech"
    _attr_default_language = "en"

    def __init__(self, entry_id: str) -> None:
        """Find espeak-ng."""
        self._attr_unique_id = f"{entry_id}-tts"
        self._attr_supported_languages = list(LANGUAGES)
        self._espeak = shutil.which("espeak-ng")
        if self._espeak is None:
            _LOGGER.warning("espeak-ng is not installed: replies will be tones")

    @override
    async def async_get_tts_audio(
        self, message: str, language: str, options: dict[str, Any]
    ) -> tts.TtsAudioType:
        """Return ``message`` as a WAV."""
        if self._espeak is None:
            return "wav", beeps(message)
        process = await asyncio.create_subprocess_exec(
            self._espeak,
            "--stdout",
            "-v",
            LANGUAGES.get(language, "en-us"),
            message,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(TIMEOUT):
                audio, errors = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            _LOGGER.error("espeak-ng took longer than %.0f s", TIMEOUT)
            return None, None
        if process.returncode != 0 or not audio:
            _LOGGER.error("espeak-ng failed: %s", errors.decode(errors="replace"))
            return None, None
        return "wav", audio
