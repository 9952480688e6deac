"""The wake word: the pre-roll's sound, and what each kind of board sends."""

import json

import pytest

from aioxiaozhi.testing import decode_audio
from aioxiaozhi.testing.voice import (
    FRAME_MS,
    MIC_RATE,
    ROOM_NOISE_DB,
    WAKE_WORD_PREROLL,
    MicEncoder,
    SpeakerDecoder,
    dominant_frequency,
    loudness_at,
    rms_db,
    tone,
    wake_preroll,
)

from .conftest import Conn, DeviceFactory, FakeServer

BYTES_PER_SECOND = MIC_RATE * 2
WINDOW = MIC_RATE // 2  # samples in 0.5 s
PREROLL_PACKETS = 34  # 2 s of 60 ms frames, the last one padded


def _part(pcm: bytes, start: float, end: float | None = None) -> bytes:
    """Return ``pcm`` from ``start`` to ``end`` seconds."""
    stop = None if end is None else round(end * MIC_RATE) * 2
    return pcm[round(start * MIC_RATE) * 2 : stop]


def _loudest(pcm: bytes) -> float:
    """Return the RMS level (dBFS) of the loudest 0.5 s of ``pcm``."""
    samples = len(pcm) // 2
    return max(
        rms_db(pcm[start * 2 : (start + WINDOW) * 2])
        for start in range(0, samples - WINDOW + 1, 160)
    )


def _quietest(pcm: bytes) -> float:
    """Return the RMS level (dBFS) of the quietest 0.1 s of ``pcm``."""
    step = MIC_RATE // 10 * 2
    return min(rms_db(pcm[start : start + step]) for start in range(0, len(pcm), step))


def _encoded_and_decoded(pcm: bytes) -> bytes:
    """Return ``pcm`` after the microphone's Opus encoder and a decoder."""
    decoder = SpeakerDecoder(MIC_RATE, FRAME_MS)
    return b"".join(decoder.decode(packet) for packet in MicEncoder().frames(pcm))


def _audio_before(conn: Conn, text: str) -> list[bytes]:
    """Return the binary messages that came before the first text with ``text``."""
    before: list[bytes] = []
    for message in conn.messages:
        if isinstance(message, str):
            if text in message:
                return before
        else:
            before.append(message)
    raise AssertionError(f"no message with {text!r}")


def _listen_states(conn: Conn) -> list[str]:
    return [f["state"] for f in conn.frames if f and f.get("type") == "listen"]


# ------------------------------------------------------------ the pre-roll


def test_wake_preroll_is_room_noise_then_the_phrase() -> None:
    pcm = wake_preroll()
    assert len(pcm) == WAKE_WORD_PREROLL * BYTES_PER_SECOND
    assert pcm == wake_preroll()  # the same noise every time
    # Room noise, then 0.8 s of phrase ending 0.1 s before the end.
    assert rms_db(_part(pcm, 0.0, 1.05)) == pytest.approx(ROOM_NOISE_DB, abs=0.3)
    assert rms_db(_part(pcm, 1.95)) == pytest.approx(ROOM_NOISE_DB, abs=1.0)
    assert rms_db(_part(pcm, 1.15, 1.85)) == pytest.approx(-20.0, abs=0.3)
    assert dominant_frequency(_part(pcm, 1.1, 1.9), MIC_RATE) == pytest.approx(
        440, abs=2
    )


def test_wake_preroll_with_another_phrase() -> None:
    phrase = tone(1000, 0.5, amplitude=0.9)
    pcm = wake_preroll(1.0, -30.0, phrase)
    assert len(pcm) == BYTES_PER_SECOND
    heard = _part(pcm, 0.4, 0.9)
    assert rms_db(heard) == pytest.approx(-30.0, abs=0.1)
    assert dominant_frequency(heard, MIC_RATE) == pytest.approx(1000, abs=2)
    assert rms_db(_part(pcm, 0.0, 0.4)) == pytest.approx(ROOM_NOISE_DB, abs=0.5)


def test_short_wake_preroll_keeps_the_end_of_the_phrase() -> None:
    pcm = wake_preroll(0.5)
    assert len(pcm) == BYTES_PER_SECOND // 2
    # 0.4 s of phrase from the start, then 0.1 s of room.
    assert rms_db(_part(pcm, 0.0, 0.4)) == pytest.approx(-20.0, abs=0.3)
    assert rms_db(_part(pcm, 0.42)) == pytest.approx(ROOM_NOISE_DB, abs=1.0)
    assert wake_preroll(0.0) == b""


@pytest.mark.parametrize("loudness", [-10.0, -20.0, -30.0, -40.0])
def test_wake_preroll_level_survives_opus(loudness: float) -> None:
    decoded = _encoded_and_decoded(wake_preroll(loudness=loudness))
    # 34 frames (the decoder's resampler keeps a few samples back).
    assert len(decoded) / BYTES_PER_SECOND == pytest.approx(2.04, abs=0.005)
    assert _loudest(_part(decoded, 1.0)) == pytest.approx(loudness, abs=1.5)
    # The room stays quiet: under the -60 dBFS a ranking takes as the floor.
    assert _quietest(_part(decoded, 0.0, 1.0)) < -60


def test_loudness_at_distance() -> None:
    assert loudness_at(1.0) == -20.0
    assert loudness_at(1.0, at_one_metre=-12.0) == -12.0
    assert loudness_at(2.0) == pytest.approx(-26.02, abs=0.01)
    assert loudness_at(3.0) - loudness_at(6.0) == pytest.approx(6.02, abs=0.01)
    assert loudness_at(0.01) == loudness_at(0.1) == pytest.approx(0.0)


def test_twice_as_far_is_six_db_quieter_after_opus() -> None:
    near = _loudest(_encoded_and_decoded(wake_preroll(loudness=loudness_at(1.5))))
    far = _loudest(_encoded_and_decoded(wake_preroll(loudness=loudness_at(3.0))))
    assert near - far == pytest.approx(6.0, abs=0.5)


# ------------------------------------------------------------ what a board sends


async def test_wake_sends_the_preroll_then_detect_then_start(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(microphone=False)
    await device.wake("你好小智", loudness=-32.0)
    conn = await server.conn()
    await conn.until(lambda: _listen_states(conn) == ["detect", "start"])
    preroll = _audio_before(conn, '"state":"detect"')
    assert len(preroll) == PREROLL_PACKETS
    assert _audio_before(conn, '"state":"start"') == preroll
    detect = next(f for f in conn.frames if f.get("state") == "detect")
    assert detect["text"] == "你好小智"
    decoder = SpeakerDecoder(MIC_RATE, FRAME_MS)
    pcm = b"".join(decoder.decode(decode_audio(data, 1).payload) for data in preroll)
    assert _loudest(_part(pcm, 1.0)) == pytest.approx(-32.0, abs=1.5)


async def test_wake_with_recorded_phrase(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(microphone=False)
    await device.wake(phrase_audio=tone(660, 0.6), preroll=1.2, loudness=-15.0)
    conn = await server.conn()
    await conn.until(lambda: _listen_states(conn) == ["detect", "start"])
    preroll = _audio_before(conn, '"state":"detect"')
    assert len(preroll) == 20  # 1.2 s
    decoder = SpeakerDecoder(MIC_RATE, FRAME_MS)
    pcm = b"".join(decoder.decode(decode_audio(data, 1).payload) for data in preroll)
    heard = _part(pcm, 0.6, 1.1)
    assert dominant_frequency(heard, MIC_RATE) == pytest.approx(660, abs=3)
    assert rms_db(heard) == pytest.approx(-15.0, abs=1.5)


async def test_wake_without_preroll_sends_detect_alone(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(microphone=False)
    await device.wake("Hi ESP", preroll=0)
    conn = await server.conn()
    await conn.until(lambda: _listen_states(conn) == ["detect", "start"])
    assert conn.binary == []
    assert device.mic_frames_sent == 0
    detect = next(f for f in conn.frames if f.get("state") == "detect")
    assert detect["text"] == "Hi ESP"


async def test_wake_without_detect_is_a_bare_listen_start(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device()
    await device.wake("你好小智", tone(300, 0.3), detect=False)
    conn = await server.conn()
    await conn.until(lambda: _listen_states(conn) == ["start"])
    start = next(f for f in conn.frames if f.get("type") == "listen")
    assert start == {
        "session_id": "sess-1",
        "type": "listen",
        "state": "start",
        "mode": "auto",
    }
    assert _audio_before(conn, '"state":"start"') == []
    # The speech follows in real time, as after a button press.
    await conn.until(lambda: len(conn.binary) >= 2)
    assert device.state.activity == "listening"
    assert "detect" not in _listen_states(conn)


async def test_board_without_preroll_wakes_as_a_button_press(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    device = make_device(wake_preroll=False, microphone=False, chip="esp32c3")
    await device.wake()
    conn = await server.conn()
    await conn.until(lambda: _listen_states(conn) == ["start"])
    assert conn.binary == []
    # Asked for, it still sends them.
    await device.wake("Hi ESP", detect=True, preroll=0.6)
    await conn.until(lambda: _listen_states(conn) == ["start", "detect", "start"])
    assert len(conn.binary) == 10
    texts = [json.loads(t) for t in conn.texts]
    assert [t.get("text") for t in texts if t.get("state") == "detect"] == ["Hi ESP"]
