"""Audio for the voice path: Opus in and out, WAV reading, resampling (PyAV).

The device's microphone arrives as Opus packets of ``frame_duration`` ms at
16 kHz mono; the pipeline wants 16-bit PCM. Replies leave as Opus packets of
exactly ``frame_duration`` ms at the rate the server hello announced (24 kHz),
made from whatever the text-to-speech engine produced: WAV is read as it
streams, other formats (MP3, FLAC, Ogg...) are decoded by PyAV.
"""

from collections.abc import Iterator
from dataclasses import dataclass
import io
import struct
from typing import Any, Final

import av
from av.audio.frame import AudioFrame
from av.audio.resampler import AudioResampler
import numpy as np

from ..errors import MediaSourceError
from .framing import FRAME_DURATION_MS, MIC_SAMPLE_RATE, SPEAKER_SAMPLE_RATE

SAMPLE_WIDTH: Final = 2
# Opus at 24 kHz mono: clear speech for a small speaker, about 240 bytes a frame.
SPEAKER_BIT_RATE: Final = 32000
# What a WAV header may say before its data; more is not a WAV a TTS engine made.
MAX_WAV_HEADER: Final = 64 * 1024


def resampled_pcm(resampler: AudioResampler, frame: AudioFrame | None) -> bytes:
    """Return 16-bit PCM of ``frame`` through ``resampler`` (None: flush it)."""
    return b"".join(
        bytes(out.planes[0])[: out.samples * SAMPLE_WIDTH]
        for out in resampler.resample(frame)
    )


def pcm_bytes(sample_rate: int, duration_ms: int) -> int:
    """Return the size of 16-bit mono PCM of that duration."""
    return sample_rate * duration_ms // 1000 * SAMPLE_WIDTH


class OpusDecoder:
    """Decode a device's Opus packets into 16-bit mono PCM at one rate.

    Every packet is one frame of audio: an empty packet or one that does not
    decode still stands for ``frame_duration`` ms and gives that much silence,
    so the stream keeps its timing.
    """

    def __init__(
        self,
        sample_rate: int = MIC_SAMPLE_RATE,
        frame_duration: int = FRAME_DURATION_MS,
    ) -> None:
        """Prepare a decoder for packets of ``frame_duration`` ms."""
        self.sample_rate = sample_rate
        self.silence = bytes(pcm_bytes(sample_rate, frame_duration))
        self._codec = av.CodecContext.create("libopus", "r")
        self._codec.sample_rate = sample_rate
        self._codec.layout = "mono"
        self._resampler = AudioResampler(format="s16", layout="mono", rate=sample_rate)

    def decode(self, packet: bytes) -> bytes:
        """Return the PCM of one packet (silence for an empty or broken one)."""
        if not packet:
            return self.silence
        try:
            frames = self._codec.decode(av.Packet(packet))
            pcm = b"".join(resampled_pcm(self._resampler, frame) for frame in frames)
        except av.FFmpegError, ValueError:
            return self.silence
        return pcm or self.silence


class OpusEncoder:
    """Encode 16-bit mono PCM into Opus packets of exactly ``frame_duration`` ms."""

    def __init__(
        self,
        sample_rate: int = SPEAKER_SAMPLE_RATE,
        frame_duration: int = FRAME_DURATION_MS,
        bit_rate: int = SPEAKER_BIT_RATE,
    ) -> None:
        """Prepare an encoder; PCM is taken in any amount and cut into frames."""
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * frame_duration // 1000
        self._frame_bytes = self.frame_samples * SAMPLE_WIDTH
        codec = av.CodecContext.create("libopus", "w")
        codec.sample_rate = sample_rate
        codec.layout = "mono"
        codec.format = "s16"
        codec.bit_rate = bit_rate
        codec.options = {"frame_duration": str(frame_duration), "application": "audio"}
        self._codec = codec
        self._pending = bytearray()
        self._pts = 0

    def encode(self, pcm: bytes) -> list[bytes]:
        """Take PCM; return the packets of every frame it completes."""
        self._pending += pcm
        packets: list[bytes] = []
        while len(self._pending) >= self._frame_bytes:
            chunk = bytes(self._pending[: self._frame_bytes])
            del self._pending[: self._frame_bytes]
            packets += self._encode_frame(chunk)
        return packets

    def flush(self) -> list[bytes]:
        """Encode what is left, padded with silence to a whole frame.

        The encoder is not drained: that would add a whole frame for the
        6.5 ms of its look-ahead, making a reply a frame longer than its audio.
        """
        if not self._pending:
            return []
        chunk = bytes(self._pending).ljust(self._frame_bytes, b"\0")
        self._pending.clear()
        return self._encode_frame(chunk)

    def _encode_frame(self, chunk: bytes) -> list[bytes]:
        samples = np.frombuffer(chunk, dtype="<i2").reshape(1, -1)
        frame = AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += self.frame_samples
        return self._packets(self._codec.encode(frame))

    @staticmethod
    def _packets(packets: list[av.Packet[Any]]) -> list[bytes]:
        return [bytes(packet) for packet in packets]


class PcmConverter:
    """Turn PCM of any rate and channel count into 16-bit mono at one rate."""

    def __init__(self, sample_rate: int, channels: int, target_rate: int) -> None:
        """Convert from ``sample_rate`` Hz with ``channels`` to ``target_rate``."""
        self.sample_rate = sample_rate
        self.channels = channels
        self._layout = "mono" if channels == 1 else "stereo"
        self._resampler = AudioResampler(format="s16", layout="mono", rate=target_rate)
        self._passthrough = sample_rate == target_rate and channels == 1

    def convert(self, samples: np.ndarray) -> bytes:
        """Convert interleaved 16-bit samples (a flat array)."""
        if self._passthrough:
            return samples.astype("<i2", copy=False).tobytes()
        if samples.size < self.channels:
            return b""
        frame = AudioFrame.from_ndarray(
            samples.reshape(1, -1), format="s16", layout=self._layout
        )
        frame.sample_rate = self.sample_rate
        return self._resample(frame)

    def flush(self) -> bytes:
        """Return what the resampler still holds."""
        if self._passthrough:
            return b""
        return self._resample(None)

    def _resample(self, frame: AudioFrame | None) -> bytes:
        return resampled_pcm(self._resampler, frame)


@dataclass(frozen=True, slots=True)
class WavFormat:
    """What a WAV header says about its samples."""

    sample_rate: int
    channels: int
    sample_width: int
    is_float: bool = False


class WavReader:
    """Read a WAV as it streams in: the header first, then 16-bit samples.

    TTS engines stream WAV with a data size of 0 or 0xFFFFFFFF (unknown), so the
    data runs to the end of the stream whatever the header says.
    """

    def __init__(self) -> None:
        """Wait for the header."""
        self.format: WavFormat | None = None
        self._buffer = bytearray()
        self._in_data = False

    def feed(self, data: bytes) -> np.ndarray | None:
        """Take bytes; return the new samples as a flat int16 array, if any.

        Raises MediaSourceError when the stream is not a WAV this can read.
        """
        self._buffer += data
        if not self._in_data and not self._read_header():
            return None
        assert self.format is not None  # noqa: S101 - set with the header
        frame_size = self.format.sample_width * self.format.channels
        usable = len(self._buffer) - len(self._buffer) % frame_size
        if not usable:
            return None
        raw = bytes(self._buffer[:usable])
        del self._buffer[:usable]
        return _to_int16(raw, self.format)

    def _read_header(self) -> bool:
        buf = self._buffer
        if len(buf) < 12:
            return False
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise MediaSourceError("audio is not a WAV (no RIFF/WAVE header)")
        offset = 12
        while True:
            if offset > MAX_WAV_HEADER:
                raise MediaSourceError("WAV header too long")
            if len(buf) < offset + 8:
                return False
            chunk_id = bytes(buf[offset : offset + 4])
            (size,) = struct.unpack_from("<I", buf, offset + 4)
            if chunk_id == b"data":
                if self.format is None:
                    raise MediaSourceError("WAV data before its fmt chunk")
                del buf[: offset + 8]
                self._in_data = True
                return True
            end = offset + 8 + size + (size & 1)
            if len(buf) < end:
                return False
            if chunk_id == b"fmt ":
                self.format = _wav_format(bytes(buf[offset + 8 : offset + 8 + size]))
            offset = end


def _wav_format(chunk: bytes) -> WavFormat:
    if len(chunk) < 16:
        raise MediaSourceError("WAV fmt chunk too short")
    tag, channels, rate, _byte_rate, _align, bits = struct.unpack_from("<HHIIHH", chunk)
    if tag == 0xFFFE and len(chunk) >= 26:  # WAVE_FORMAT_EXTENSIBLE: sub-format
        (tag,) = struct.unpack_from("<H", chunk, 24)
    if tag not in (1, 3) or channels not in (1, 2) or not 8000 <= rate <= 192000:
        raise MediaSourceError(
            f"WAV format {tag}, {channels} ch, {rate} Hz unsupported"
        )
    if (tag, bits) not in ((1, 8), (1, 16), (1, 24), (1, 32), (3, 32)):
        raise MediaSourceError(f"WAV with {bits}-bit samples unsupported")
    return WavFormat(
        sample_rate=rate, channels=channels, sample_width=bits // 8, is_float=tag == 3
    )


def _to_int16(raw: bytes, fmt: WavFormat) -> np.ndarray:
    match fmt.sample_width, fmt.is_float:
        case 2, False:
            return np.frombuffer(raw, dtype="<i2")
        case 1, False:
            unsigned = np.frombuffer(raw, dtype="u1").astype(np.int16)
            return ((unsigned - 128) << 8).astype(np.int16)
        case 3, False:
            # The two high bytes of each little-endian 24-bit sample.
            return (
                np.frombuffer(raw, dtype="u1")
                .reshape(-1, 3)[:, 1:]
                .copy()
                .view("<i2")[:, 0]
            )
        case 4, False:
            return (np.frombuffer(raw, dtype="<i4") >> 16).astype(np.int16)
        case _:
            floats = np.clip(np.frombuffer(raw, dtype="<f4"), -1.0, 1.0)
            return (floats * 32767).astype(np.int16)


def decode_file(data: bytes, target_rate: int) -> Iterator[bytes]:
    """Decode a whole audio file of any format PyAV reads into 16-bit mono PCM.

    Raises MediaSourceError when it holds no audio PyAV can decode. CPU-bound:
    run it in an executor.
    """
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise MediaSourceError("no audio stream")
            stream = container.streams.audio[0]
            resampler = AudioResampler(format="s16", layout="mono", rate=target_rate)
            for frame in container.decode(stream):
                if pcm := resampled_pcm(resampler, frame):
                    yield pcm
            if pcm := resampled_pcm(resampler, None):
                yield pcm
    except (av.FFmpegError, ValueError, EOFError) as err:
        raise MediaSourceError(f"cannot decode audio: {err}") from err


def media_duration(data: bytes, format_name: str | None = None) -> float | None:
    """Return how long a whole audio file lasts, in seconds; None if unknown.

    What its container says (a WAV's header, an MP3's frames); nothing is
    decoded. CPU-bound for large files: run it in an executor.
    """
    try:
        with av.open(io.BytesIO(data), mode="r", format=format_name) as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            if stream.duration is not None and stream.time_base is not None:
                return float(stream.duration * stream.time_base)
            if container.duration is not None:
                return container.duration / av.time_base
    except av.FFmpegError, ValueError, EOFError:
        return None
    return None
