"""Audio for the voice path: Opus, WAV as it streams, other formats, pacing."""

import asyncio
import io
import itertools
import math
import struct

import av
import numpy as np
import pytest

from aioxiaozhi import MediaSourceError
from aioxiaozhi.audio.codec import (
    OpusDecoder,
    OpusEncoder,
    PcmConverter,
    WavReader,
    decode_file,
)
from aioxiaozhi.audio.pacing import (
    LEAD_FRAMES,
    DownlinkPacer,
    lead_frames,
)
from aioxiaozhi.emotions import emotion_for
from aioxiaozhi.testing.voice import dominant_frequency, tone, wav_bytes


def samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2")


def wav(fmt_tag: int, channels: int, rate: int, bits: int, data: bytes) -> bytes:
    """Build a WAV by hand, streaming style (data size 0xFFFFFFFF)."""
    fmt = struct.pack(
        "<HHIIHH",
        fmt_tag,
        channels,
        rate,
        rate * channels * bits // 8,
        channels * bits // 8,
        bits,
    )
    return (
        b"RIFF\xff\xff\xff\xffWAVE"
        b"LIST\x04\x00\x00\x00INFO"  # a chunk before fmt, skipped
        b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data\xff\xff\xff\xff" + data
    )


def test_opus_round_trip_keeps_duration_and_pitch() -> None:
    encoder = OpusEncoder(24000, 60)
    packets = encoder.encode(tone(440, 1.0, 24000)) + encoder.flush()
    assert len(packets) == math.ceil(1.0 / 0.06)
    decoder = OpusDecoder(24000, 60)
    pcm = b"".join(decoder.decode(packet) for packet in packets)
    # Within a millisecond: the converter may hold a few samples back.
    assert abs(len(pcm) - len(packets) * 1440 * 2) <= 24 * 2
    assert abs(dominant_frequency(pcm, 24000) - 440) <= 3
    assert encoder.flush() == []


def test_empty_and_broken_packets_are_a_frame_of_silence() -> None:
    decoder = OpusDecoder(16000, 60)
    assert decoder.decode(b"") == bytes(960 * 2)
    assert decoder.decode(b"\xff" * 3) == bytes(960 * 2)


@pytest.mark.parametrize("chunk", [1, 7, 100, 100_000])
def test_wav_read_as_it_streams(chunk: int) -> None:
    """Header and samples split anywhere come out the same."""
    pcm = tone(300, 0.2, 22050)
    data = wav_bytes(pcm, 22050)
    reader = WavReader()
    out = bytearray()
    for start in range(0, len(data), chunk):
        if (part := reader.feed(data[start : start + chunk])) is not None:
            out += part.tobytes()
    assert reader.format is not None
    assert (reader.format.sample_rate, reader.format.channels) == (22050, 1)
    assert bytes(out) == pcm


@pytest.mark.parametrize(
    ("tag", "bits", "raw", "expected"),
    [
        (1, 8, bytes([128, 255, 0]), [0, 127 << 8, -32768]),
        (1, 24, b"\x00\x10\x00" + b"\x00\x00\x80", [16, -32768]),
        (1, 32, struct.pack("<ii", 1 << 16, -(1 << 31)), [1, -32768]),
        (3, 32, struct.pack("<ff", 0.5, -2.0), [16383, -32767]),
    ],
    ids=["u8", "s24", "s32", "float"],
)
def test_wav_sample_formats(
    tag: int, bits: int, raw: bytes, expected: list[int]
) -> None:
    reader = WavReader()
    out = reader.feed(wav(tag, 1, 16000, bits, raw))
    assert out is not None
    assert out.tolist() == expected


@pytest.mark.parametrize(
    "data",
    [
        b"RIFX\x00\x00\x00\x00WAVE",
        wav(2, 1, 16000, 16, b""),  # ADPCM
        wav(1, 6, 16000, 16, b""),  # six channels
        wav(1, 1, 16000, 12, b""),
        b"RIFF\xff\xff\xff\xffWAVEdata\x00\x00\x00\x00",  # data before fmt
        b"RIFF\xff\xff\xff\xffWAVEfmt \x04\x00\x00\x00abcd",
        b"RIFF\xff\xff\xff\xffWAVE" + b"junk\x00\x00\x01\x00" + bytes(65536),
    ],
    ids=["not-riff", "adpcm", "channels", "bits", "no-fmt", "short-fmt", "huge"],
)
def test_wavs_that_cannot_be_read(data: bytes) -> None:
    with pytest.raises(MediaSourceError):
        WavReader().feed(data)


def test_wav_waits_for_a_whole_header() -> None:
    reader = WavReader()
    assert reader.feed(b"RIFF") is None
    assert reader.feed(b"\xff\xff\xff\xffWAVE") is None  # no chunk yet
    assert reader.feed(b"fmt \x10\x00") is None  # a chunk header cut short


def test_converter_resamples_and_downmixes() -> None:
    left = samples(tone(500, 1.0, 44100))
    stereo = np.column_stack([left, left]).reshape(-1)
    converter = PcmConverter(44100, 2, 24000)
    pcm = converter.convert(stereo) + converter.flush()
    assert abs(len(pcm) / 2 / 24000 - 1.0) <= 0.01
    assert abs(dominant_frequency(pcm, 24000) - 500) <= 3
    assert converter.convert(np.zeros(1, dtype=np.int16)) == b""


def test_converter_passes_through_what_needs_nothing() -> None:
    converter = PcmConverter(24000, 1, 24000)
    pcm = tone(440, 0.1, 24000)
    assert converter.convert(samples(pcm)) == pcm
    assert converter.flush() == b""


@pytest.mark.parametrize(("codec", "fmt"), [("flac", "flac"), ("libopus", "ogg")])
def test_other_formats_decode_with_pyav(codec: str, fmt: str) -> None:
    """What an engine sends that is not WAV is decoded, resampled, kept whole."""
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=fmt) as container:
        rate = 48000
        stream = container.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(
            samples(tone(660, 1.0, rate)).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    pcm = b"".join(decode_file(buffer.getvalue(), 24000))
    assert abs(len(pcm) / 2 / 24000 - 1.0) <= 0.03
    assert abs(dominant_frequency(pcm, 24000) - 660) <= 3


@pytest.mark.parametrize("data", [b"", b"not audio at all", bytes(1000)])
def test_undecodable_files(data: bytes) -> None:
    with pytest.raises(MediaSourceError):
        list(decode_file(data, 24000))


async def test_pacer_keeps_a_small_lead_and_real_time() -> None:
    """Five frames ahead, then one per frame; playback ends when it should."""
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    async def send(packet: bytes, timestamp: int) -> None:
        sent.append(loop.time())

    start = loop.time()
    pacer = DownlinkPacer(send, frame_duration=0.02, lead=5, not_before=start + 0.05)
    for _ in range(20):
        await pacer.send(b"x")
    await pacer.drain()
    end = loop.time()
    assert sent[0] >= start + 0.05
    assert pacer.stats.max_lead <= 6 * 0.02 + 0.01
    assert end - start >= 0.05 + 20 * 0.02 - 0.005
    assert pacer.stats.frames == 20
    assert pacer.lead_seconds == 0


async def test_pacer_without_a_lead_sends_each_frame_when_the_last_has_played() -> None:
    """A board without PSRAM: frame n at start + n frames, the first one as early."""
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    async def send(packet: bytes, timestamp: int) -> None:
        sent.append(loop.time())

    start = loop.time() + 0.05
    pacer = DownlinkPacer(send, frame_duration=0.02, lead=0, not_before=start)
    for _ in range(10):
        await pacer.send(b"x")
    assert sent[0] - start < 0.01
    assert all(b - a >= 0.02 - 0.002 for a, b in itertools.pairwise(sent))
    assert pacer.stats.max_lead <= 0.02 + 0.005


@pytest.mark.parametrize(
    ("chip", "lead"),
    [
        ("esp32s3", LEAD_FRAMES),
        ("esp32", LEAD_FRAMES),
        (None, LEAD_FRAMES),
        ("esp32c3", 0),
        ("ESP32C2", 0),
        ("esp32c6", 0),
    ],
)
def test_boards_without_psram_get_no_lead(chip: str | None, lead: int) -> None:
    assert lead_frames(chip) == lead


@pytest.mark.parametrize(
    ("text", "failed", "acted", "emotion"),
    [
        ("Done 😊", False, False, "happy"),
        ("哈哈😂", False, False, "laughing"),
        ("Sorry", True, False, "confused"),
        ("Turned on", False, True, "happy"),
        ("It is 20 degrees", False, False, "neutral"),
        ("🤔 let me think", True, False, "thinking"),
    ],
)
def test_emotions(text: str, failed: bool, acted: bool, emotion: str) -> None:
    assert emotion_for(text, failed=failed, acted=acted) == emotion
