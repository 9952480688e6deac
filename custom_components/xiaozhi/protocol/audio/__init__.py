"""Audio on the wire: framing, Opus and PCM (PyAV), pacing, the pre-roll."""

from .framing import (
    FRAME_DURATION_MS,
    MIC_SAMPLE_RATE,
    SPEAKER_SAMPLE_RATE,
    pack_audio,
    parse_protocol_version,
    unpack_audio,
)

__all__ = [
    "FRAME_DURATION_MS",
    "MIC_SAMPLE_RATE",
    "SPEAKER_SAMPLE_RATE",
    "pack_audio",
    "parse_protocol_version",
    "unpack_audio",
]
