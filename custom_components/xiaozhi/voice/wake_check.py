"""The false-wake check: whether the pre-roll really held the wake word.

A box that detects its wake word sends the two seconds before the detection
(the pre-roll); the phrase is at its end. With the check on, that audio goes
to the speech-to-text of the box's pipeline before the turn starts. When the
text does not resemble the wake word, the wake was false (the television, a
similar word) and the turn ends quietly.

Text is compared by sound: Chinese characters become toneless pinyin with
``pypinyin`` (speech-to-text writes homophones, 小志 for 小智), other
scripts lose their accents and case. ``pypinyin`` is loaded only when a
check first runs, without its phrase dictionary: single characters are
enough for a wake word and cost a quarter of the memory.
"""

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from difflib import SequenceMatcher
import os
from typing import Final
import unicodedata

from homeassistant.components import stt
from homeassistant.components.assist_pipeline import Pipeline
from homeassistant.core import HomeAssistant

from ..const import LOGGER
from ..protocol.audio import MIC_SAMPLE_RATE

# pypinyin reads this once, when it is first imported, and then skips its
# phrase dictionary (documented by pypinyin; 14 MB loaded instead of 57):
# single characters are enough for a wake word. Set here, once, before any
# import of pypinyin, rather than from an executor thread at every check,
# where it would change the environment under other threads. pypinyin itself
# is still imported only when a check first runs: installations that never
# check keep those 14 MB.
os.environ.setdefault("PYPINYIN_NO_PHRASES", "true")

# How alike the heard text and the wake word must sound (0 to 1). Tolerates
# one wrong syllable in four ("ni hao xiao zi"), not another sentence.
MATCH: Final = 0.7
# The speech-to-text has this long; a check that cannot finish lets the turn
# go on rather than leave the user unanswered.
CHECK_TIMEOUT: Final = 5.0
MAX_HEARD: Final = 200  # characters of heard text compared and reported
# Letters compared at most: a wake word is a few syllables; a longer "wake
# word" is not judged (the turn goes on), and heard text is cut.
MAX_WAKE_LETTERS: Final = 48
MAX_HEARD_LETTERS: Final = 400
CHUNK: Final = 2048  # bytes of PCM per chunk handed to the engine


@dataclass(frozen=True, slots=True)
class WakeCheck:
    """What the pre-roll said, and whether the wake was false."""

    heard: str | None  # None: no check could run
    false_wake: bool


def _sounds(text: str) -> str:
    """Return ``text`` as plain letters: pinyin for Chinese, no accents or case."""
    from pypinyin import Style, lazy_pinyin  # noqa: PLC0415 - only when checks run

    spoken = "".join(lazy_pinyin(text[:MAX_HEARD], style=Style.NORMAL))
    plain = unicodedata.normalize("NFKD", spoken.casefold())
    return "".join(char for char in plain if char.isalnum())


def resembles(heard: str, wake_word: str) -> bool:
    """Return True when ``heard`` holds something that sounds like ``wake_word``."""
    want, got = _sounds(wake_word), _sounds(heard)[:MAX_HEARD_LETTERS]
    if not want or len(want) > MAX_WAKE_LETTERS:
        return True  # nothing to compare with
    best = 0.0
    for size in range(max(1, len(want) - 2), len(want) + 3):
        for start in range(max(1, len(got) - size + 1)):
            matcher = SequenceMatcher(None, want, got[start : start + size])
            best = max(best, matcher.ratio())
    return best >= MATCH


async def _chunks(pcm: bytes) -> AsyncIterator[bytes]:
    for start in range(0, len(pcm), CHUNK):
        yield pcm[start : start + CHUNK]


async def async_check_wake(
    hass: HomeAssistant, pipeline: Pipeline, pcm: bytes, wake_word: str, name: str
) -> WakeCheck:
    """Transcribe the pre-roll (16 kHz PCM) and compare it with the wake word."""
    engine = (
        stt.async_get_speech_to_text_engine(hass, pipeline.stt_engine)
        if pipeline.stt_engine
        else None
    )
    if engine is None:
        LOGGER.debug("%s: no speech-to-text to check the wake word with", name)
        return WakeCheck(None, false_wake=False)
    metadata = stt.SpeechMetadata(
        language=pipeline.stt_language or pipeline.language,
        format=stt.AudioFormats.WAV,
        codec=stt.AudioCodecs.PCM,
        bit_rate=stt.AudioBitRates.BITRATE_16,
        sample_rate=stt.AudioSampleRates(MIC_SAMPLE_RATE),
        channel=stt.AudioChannels.CHANNEL_MONO,
    )
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            result = await engine.async_process_audio_stream(metadata, _chunks(pcm))
    except TimeoutError:
        LOGGER.info(
            "%s: the wake word could not be checked: no text within %g s",
            name,
            CHECK_TIMEOUT,
        )
        return WakeCheck(None, false_wake=False)
    except Exception as err:  # noqa: BLE001 - an engine raises its own errors
        LOGGER.info(
            "%s: the wake word could not be checked: %s",
            name,
            str(err) or type(err).__name__,
        )
        return WakeCheck(None, false_wake=False)
    # An engine that recognised nothing says so with an error: nobody spoke.
    succeeded = result.result is stt.SpeechResultState.SUCCESS
    heard = (result.text or "")[:MAX_HEARD] if succeeded else ""
    matches = bool(heard) and await hass.async_add_executor_job(
        resembles, heard, wake_word
    )
    return WakeCheck(heard, false_wake=not matches)
