"""Live transcoding: any audio in, Opus or Ogg Opus out, as it arrives."""

import asyncio
import io
import threading

from PIL import Image
import pytest

from aioxiaozhi import MediaSourceError
from aioxiaozhi.audio.live import LiveTranscoder
from aioxiaozhi.audio.ogg import (
    OggOpusWriter,
    OpusChunks,
    encode_ogg_opus,
)
from aioxiaozhi.testing.notify import OggReader, packet_ms
from aioxiaozhi.testing.voice import SpeakerDecoder, dominant_frequency, mp3_bytes, tone

RATE = 24000


def transcoders() -> list[threading.Thread]:
    """Return the transcoding threads still alive."""
    return [t for t in threading.enumerate() if t.name == "xiaozhi transcoder"]


class Trickle:
    """A source that hands out a body in small pieces, then b""."""

    def __init__(self, body: bytes, piece: int = 2048) -> None:
        """Serve ``body``."""
        self.body = body
        self.piece = piece
        self.position = 0

    async def read(self, size: int) -> bytes:
        """Return the next piece."""
        await asyncio.sleep(0)
        data = self.body[self.position : self.position + min(size, self.piece)]
        self.position += len(data)
        return data


async def test_an_mp3_becomes_60_ms_opus_frames_of_the_same_sound() -> None:
    """Every frame is 60 ms at 24 kHz; the sound keeps its length and pitch."""
    transcoder = LiveTranscoder(Trickle(mp3_bytes(440, 2.0)).read, OpusChunks(), RATE)
    transcoder.start()
    decoder = SpeakerDecoder(RATE, 60)
    pcm = bytearray()
    async for chunk in transcoder.chunks():
        assert chunk.duration == pytest.approx(0.06)
        assert packet_ms(chunk.data) == 60
        pcm += decoder.decode(chunk.data)
    await transcoder.aclose()
    assert abs(len(pcm) / 2 / RATE - 2.0) <= 0.1
    assert abs(dominant_frequency(bytes(pcm), RATE) - 440) <= 5


async def test_ogg_pages_are_what_the_firmware_demuxes() -> None:
    """Mono OpusHead at 24 kHz, OpusTags, then 60 ms packets, page by page."""
    transcoder = LiveTranscoder(
        Trickle(mp3_bytes(660, 1.0)).read, OggOpusWriter(), RATE
    )
    transcoder.start()
    reader = OggReader()
    durations = 0.0
    async for chunk in transcoder.chunks():
        packets = reader.feed(chunk.data)
        assert reader.at_boundary  # every chunk ends on a page
        durations += chunk.duration
        assert all(packet_ms(packet) == 60 for packet in packets)
    await transcoder.aclose()
    assert reader.head
    assert reader.tags
    assert reader.sample_rate == RATE
    assert abs(reader.packets * 0.06 - 1.0) <= 0.13
    assert abs(durations - 1.0) <= 0.1


async def test_a_stream_that_never_ends_is_read_only_as_fast_as_it_is_taken() -> None:
    """Back-pressure: an endless source is read a few seconds ahead at most."""
    song = mp3_bytes(440, 1.0)

    class Endless:
        read_bytes = 0

        async def read(self, size: int) -> bytes:
            await asyncio.sleep(0)
            start = self.read_bytes % len(song)
            data = song[start : start + min(size, 4096)]
            self.read_bytes += len(data)
            return data

    source = Endless()
    transcoder = LiveTranscoder(source.read, OpusChunks(), RATE)
    transcoder.start()
    taken = 0
    async for _chunk in transcoder.chunks():
        taken += 1
        if taken == 10:
            break
    for _ in range(50):  # let the thread fill its room
        await asyncio.sleep(0.01)
    # 10 frames taken, 50 ahead: a few seconds of MP3, not the whole stream.
    assert source.read_bytes < 16 * 16000
    await transcoder.aclose()
    assert not transcoders()  # the thread is gone


async def test_what_is_not_audio_is_refused() -> None:
    """Garbage ends the stream with a MediaSourceError."""
    transcoder = LiveTranscoder(
        Trickle(b"this is not audio at all" * 500).read, OpusChunks(), RATE
    )
    transcoder.start()
    with pytest.raises(MediaSourceError):
        async for _chunk in transcoder.chunks():
            pass
    await transcoder.aclose()


async def test_closing_a_transcoder_never_started_returns() -> None:
    """Nothing to wait for."""
    transcoder = LiveTranscoder(Trickle(b"").read, OpusChunks(), RATE)
    await transcoder.aclose()


def test_a_whole_file_ends_with_its_end_page() -> None:
    """``encode_ogg_opus`` marks the last page end-of-stream."""
    data = encode_ogg_opus(tone(440, 0.5, rate=RATE), RATE)
    last = data.rfind(b"OggS")
    assert data[last + 5] & 0x04  # end of stream
    reader = OggReader()
    assert len(reader.feed(data)) >= 8


async def test_closing_while_the_source_stalls_stops_the_thread() -> None:
    """A source that never answers does not keep the thread alive."""
    stalled = asyncio.Event()

    async def never(_size: int) -> bytes:
        stalled.set()
        await asyncio.Event().wait()
        return b""

    transcoder = LiveTranscoder(never, OpusChunks(), RATE)
    transcoder.start()
    await stalled.wait()
    async with asyncio.timeout(2):
        await transcoder.aclose()
    assert not transcoders()


async def test_a_file_without_sound_is_refused() -> None:
    """A picture decodes, but has no audio stream."""
    picture = io.BytesIO()
    Image.new("RGB", (8, 8)).save(picture, format="PNG")
    transcoder = LiveTranscoder(Trickle(picture.getvalue()).read, OpusChunks(), RATE)
    transcoder.start()
    with pytest.raises(MediaSourceError, match="no audio"):
        async for _chunk in transcoder.chunks():
            pass
    await transcoder.aclose()
