"""Opus packets for the device's speaker, raw or in Ogg, made as PCM arrives.

A conversation's audio channel carries raw Opus packets; the firmware's
``notify`` player reads a mono Ogg Opus stream over HTTP. Both are made from
16-bit mono PCM by the same encoder settings (the speaker's rate, frames of
``frame_duration`` ms), a piece at a time, so that a never-ending source
(internet radio) is sent as it plays. Each piece says how much audio it
carries: senders pace on that.
"""

from dataclasses import dataclass
import io
from typing import Final, Protocol, override

import av

from .codec import SAMPLE_WIDTH, SPEAKER_BIT_RATE, OpusEncoder
from .framing import FRAME_DURATION_MS, SPEAKER_SAMPLE_RATE

# One Ogg page per frame: the device gets each frame as soon as it is made,
# and ending the stream early leaves no half page behind.
PAGE_DURATION_US: Final = 1000


@dataclass(frozen=True, slots=True)
class Chunk:
    """Bytes for the device and the seconds of audio they carry."""

    data: bytes
    duration: float


class ChunkEncoder(Protocol):
    """Turns PCM into chunks as it arrives."""

    def feed(self, pcm: bytes) -> list[Chunk]:
        """Take PCM; return the chunks it completes."""

    def close(self) -> list[Chunk]:
        """Return what is left (the end of the stream)."""


class OpusChunks:
    """Raw Opus packets of one frame each, for the audio channel."""

    def __init__(
        self,
        sample_rate: int = SPEAKER_SAMPLE_RATE,
        frame_duration: int = FRAME_DURATION_MS,
    ) -> None:
        """Encode frames of ``frame_duration`` ms at ``sample_rate``."""
        self._encoder = OpusEncoder(sample_rate, frame_duration)
        self._frame = frame_duration / 1000

    def feed(self, pcm: bytes) -> list[Chunk]:
        """Take PCM; return one chunk per frame it completes."""
        return [Chunk(packet, self._frame) for packet in self._encoder.encode(pcm)]

    def close(self) -> list[Chunk]:
        """Return the last frame, padded with silence."""
        return [Chunk(packet, self._frame) for packet in self._encoder.flush()]


class _Sink(io.RawIOBase):
    """Collects what the muxer writes until it is taken."""

    def __init__(self) -> None:
        self.data = bytearray()

    @override
    def writable(self) -> bool:
        return True

    @override
    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.data += b
        return len(b)

    def take(self) -> bytes:
        data = bytes(self.data)
        self.data.clear()
        return data


class OggOpusWriter:
    """A mono Ogg Opus stream, one page per frame, as PCM arrives.

    What the ``notify`` player takes: one mono Opus stream, frames of 5 to
    120 ms. The stream ends with its end-of-stream page only through
    :meth:`close`; a stream cut short without it tells the firmware to drop
    what it holds.
    """

    def __init__(
        self,
        sample_rate: int = SPEAKER_SAMPLE_RATE,
        frame_duration: int = FRAME_DURATION_MS,
    ) -> None:
        """Encode frames of ``frame_duration`` ms at ``sample_rate``."""
        self._rate = sample_rate
        self._frame_bytes = sample_rate * frame_duration // 1000 * SAMPLE_WIDTH
        self._sink = _Sink()
        self._container = av.open(
            self._sink,
            mode="w",
            format="ogg",
            options={"page_duration": str(PAGE_DURATION_US)},
        )
        stream = self._container.add_stream("libopus", rate=sample_rate)
        stream.layout = "mono"
        stream.bit_rate = SPEAKER_BIT_RATE
        stream.codec_context.options = {
            "frame_duration": str(frame_duration),
            "application": "audio",
        }
        self._stream = stream
        self._pending = bytearray()
        self._pts = 0
        self._closed = False

    def feed(self, pcm: bytes) -> list[Chunk]:
        """Take PCM; return the pages of the frames it completes."""
        self._pending += pcm
        whole = len(self._pending) - len(self._pending) % self._frame_bytes
        if not whole:
            return []
        data = bytes(self._pending[:whole])
        del self._pending[:whole]
        return self._encode(data)

    def close(self) -> list[Chunk]:
        """Return the rest of the stream, with its end-of-stream page."""
        if self._closed:
            return []
        self._closed = True
        chunks = self._encode(bytes(self._pending)) if self._pending else []
        self._pending.clear()
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        if tail := self._sink.take():
            chunks.append(Chunk(tail, 0.0))
        return chunks

    def _encode(self, pcm: bytes) -> list[Chunk]:
        samples = len(pcm) // SAMPLE_WIDTH
        frame = av.AudioFrame(format="s16", layout="mono", samples=samples)
        frame.sample_rate = self._rate
        frame.planes[0].update(pcm[: samples * SAMPLE_WIDTH])
        frame.pts = self._pts
        self._pts += samples
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        data = self._sink.take()
        return [Chunk(data, samples / self._rate)] if data else []


def encode_ogg_opus(
    pcm: bytes,
    sample_rate: int = SPEAKER_SAMPLE_RATE,
    frame_duration: int = FRAME_DURATION_MS,
) -> bytes:
    """Return 16-bit mono PCM as a whole mono Ogg Opus file."""
    writer = OggOpusWriter(sample_rate, frame_duration)
    chunks = [*writer.feed(pcm), *writer.close()]
    return b"".join(chunk.data for chunk in chunks)
