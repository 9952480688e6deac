"""How clearly a wake word's pre-roll holds the wake phrase.

Several boxes that hear one wake word each send the two seconds before their
detection; the phrase is at the end. The nearest box hears it loudest above
the room's noise. The measure is a signal-to-noise ratio in dB: the loudest
quarter second of the pre-roll's last part against its quietest blocks.
Comparing it to the noise floor, rather than the level alone, cancels what
boards differ in: microphone gain and automatic gain control scale the
phrase and the room alike.
"""

from collections.abc import Iterable
import math
from typing import Final

import numpy as np

from .codec import OpusDecoder
from .framing import MIC_SAMPLE_RATE

BLOCK: Final = 0.05  # seconds per level measure
PHRASE: Final = 0.25  # the loudest stretch this long is the phrase's level
PHRASE_SPAN: Final = 1.5  # seconds at the pre-roll's end where the phrase is
NOISE_PERCENTILE: Final = 20  # the room: the quieter blocks of the pre-roll
# A noise floor below this is a digital silence (DTX, a muted microphone):
# it would make every phrase infinitely clear.
FLOOR_DB: Final = -60.0


def decode_preroll(packets: Iterable[bytes], rate: int = MIC_SAMPLE_RATE) -> bytes:
    """Return the pre-roll's Opus packets as 16-bit mono PCM.

    The device's encoder was running long before the pre-roll: a decoder
    that starts in its middle makes a click of its first frame, left out.
    """
    decoder = OpusDecoder(rate)
    return b"".join([decoder.decode(packet) for packet in packets][1:])


def phrase_clarity(pcm: bytes, rate: int = MIC_SAMPLE_RATE) -> float | None:
    """Return how far the wake phrase stands above the room, in dB.

    None when the audio is too short to tell (under half a second).
    """
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768
    block = round(BLOCK * rate)
    count = samples.size // block
    if count * BLOCK < 0.5:
        return None
    # Mean square per block, from the end (the phrase is at the end).
    blocks = samples[samples.size - count * block :].reshape(count, block)
    energy = np.mean(blocks**2, axis=1)
    span = min(count, round(PHRASE_SPAN / BLOCK))
    width = min(span, round(PHRASE / BLOCK))
    tail = energy[count - span :]
    windows = np.convolve(tail, np.ones(width) / width, mode="valid")
    phrase = float(windows.max())
    floor = max(float(np.percentile(energy, NOISE_PERCENTILE)), 10 ** (FLOOR_DB / 10))
    if phrase <= 0:
        return None
    return 10 * math.log10(phrase / floor)


def preroll_clarity(packets: list[bytes]) -> float | None:
    """Return how clearly a pre-roll's Opus packets hold the wake phrase."""
    return phrase_clarity(decode_preroll(packets)) if packets else None
