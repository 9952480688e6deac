"""The simulated device's microphone and speaker, as the firmware has them.

Microphone (``application.cc``, ``audio_service.cc``): 16 kHz mono, Opus
frames of 60 ms with DTX (silence becomes tiny packets), sent in real time.

Speaker: incoming audio is queued **only while Speaking**; ``tts start``
takes effect one pass of the main loop later; the queue holds at most 40
packets and drops the rest (pushed without waiting); packets play one frame
duration each; ``tts stop`` does not flush the queue. In auto mode the device
sends ``listen start`` again once playback has drained.

Boards without PSRAM (ESP32-C2, C3, C6: about 80 KB of heap) cannot take a
burst: one stopped after a syllable and rebooted when a server sent its first
six frames within 10 ms, and played whole with one frame every 60 ms
(xinnan-tech/xiaozhi-esp32-server issue 3349). The speaker records every
burst, and on such a board flags one of more than :data:`NO_PSRAM_BURST_LIMIT`
frames as that failure (where between one and six the real limit lies is not
known: the simulator is strict).
"""

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
import io
import logging
import math
from pathlib import Path
from typing import BinaryIO, Final
import wave

import av
from av.audio.frame import AudioFrame
from av.audio.resampler import AudioResampler
import numpy as np

_LOGGER = logging.getLogger(__name__)

MIC_RATE: Final = 16000
SPEAKER_RATE: Final = 24000  # until the server hello says otherwise
FRAME_MS: Final = 60
MAX_DECODE_PACKETS: Final = 2400 // FRAME_MS  # MAX_DECODE_PACKETS_IN_QUEUE
WAKE_WORD_PREROLL: Final = 2.0  # seconds cached before the wake word
ROOM_NOISE_DB: Final = -65.0  # a quiet room's noise, RMS dBFS
WAKE_PHRASE_TAIL: Final = 0.1  # seconds between the wake phrase and detection
# Chips that cannot have PSRAM (``chip_model_name``), and what they take at once.
NO_PSRAM_CHIPS: Final = frozenset({"esp32c2", "esp32c3", "esp32c6"})
BURST_WINDOW: Final = 0.010  # seconds: packets this close together are a burst
NO_PSRAM_BURST_LIMIT: Final = 2
_FULL_SCALE: Final = 32768.0
_NOISE_SEED: Final = 20240601
_WAKE_TONE: Final = 440.0
_WAKE_TONE_SECONDS: Final = 0.8
_FADE_SECONDS: Final = 0.02


def tone(
    frequency: float,
    seconds: float,
    rate: int = MIC_RATE,
    amplitude: float = 0.3,
) -> bytes:
    """Return 16-bit mono PCM of a sine tone."""
    samples = np.arange(round(seconds * rate)) / rate
    wave = np.sin(2 * math.pi * frequency * samples) * amplitude * 32767
    return wave.astype("<i2").tobytes()


def silence(seconds: float, rate: int = MIC_RATE) -> bytes:
    """Return 16-bit mono PCM of silence."""
    return bytes(round(seconds * rate) * 2)


def rms_db(pcm: bytes) -> float:
    """Return the RMS level of 16-bit mono PCM in dBFS (-inf for silence)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    if samples.size == 0:
        return -math.inf
    rms = math.sqrt(float(np.mean(samples**2)))
    return 20 * math.log10(rms / _FULL_SCALE) if rms > 0 else -math.inf


def loudness_at(distance: float, *, at_one_metre: float = -20.0) -> float:
    """Return the level (dBFS) of a phrase ``distance`` metres away.

    The phrase is ``at_one_metre`` dBFS loud 1 m away; in a free field it
    falls by the inverse square law, 6 dB each time the distance doubles.
    Distances under 0.1 m count as 0.1 m.
    """
    return at_one_metre - 20 * math.log10(max(distance, 0.1))


def _wake_tone() -> np.ndarray:
    """Return the default wake phrase: a 440 Hz tone with short fades."""
    samples = round(_WAKE_TONE_SECONDS * MIC_RATE)
    wave_ = np.sin(2 * math.pi * _WAKE_TONE * np.arange(samples) / MIC_RATE)
    fade = np.linspace(0.0, 1.0, round(_FADE_SECONDS * MIC_RATE))
    wave_[: fade.size] *= fade
    wave_[-fade.size :] *= fade[::-1]
    return wave_


def wake_preroll(
    seconds: float = WAKE_WORD_PREROLL,
    loudness: float = -20.0,
    phrase: bytes | None = None,
) -> bytes:
    """Return what the microphone held before a wake word was detected.

    16 kHz mono 16-bit PCM, ``seconds`` long: the room's noise
    (:data:`ROOM_NOISE_DB`, the same on every call) with the wake phrase in
    its last part, ending :data:`WAKE_PHRASE_TAIL` seconds before the end.
    The phrase is 0.8 s of a 440 Hz tone unless ``phrase`` (16 kHz PCM, such
    as recorded speech) is given; it is scaled so its RMS is ``loudness``
    dBFS. A pre-roll shorter than the phrase keeps the phrase's end.
    """
    length = max(0, round(seconds * MIC_RATE))
    rng = np.random.default_rng(_NOISE_SEED)
    audio = rng.standard_normal(length) * _FULL_SCALE * 10 ** (ROOM_NOISE_DB / 20)
    voice = (
        _wake_tone()
        if phrase is None
        else np.frombuffer(phrase[: len(phrase) // 2 * 2], dtype="<i2").astype(
            np.float64
        )
    )
    rms = math.sqrt(float(np.mean(voice**2))) if voice.size else 0.0
    if rms > 0 and length > 0:
        voice = voice * (_FULL_SCALE * 10 ** (loudness / 20) / rms)
        tail = round(WAKE_PHRASE_TAIL * MIC_RATE)
        end = length - tail if length > tail else length
        kept = voice[-end:] if voice.size > end else voice
        audio[end - kept.size : end] += kept
    return np.clip(np.round(audio), -32768, 32767).astype("<i2").tobytes()


def read_audio(path: str | Path | BinaryIO, rate: int = MIC_RATE) -> bytes:
    """Read any audio file PyAV can decode as 16-bit mono PCM at ``rate``."""
    resampler = AudioResampler(format="s16", layout="mono", rate=rate)
    pcm = bytearray()
    source = path if isinstance(path, BinaryIO | io.IOBase) else str(path)
    with av.open(source, mode="r") as container:
        for frame in container.decode(audio=0):
            for out in resampler.resample(frame):
                pcm += bytes(out.planes[0])[: out.samples * 2]
        for out in resampler.resample(None):
            pcm += bytes(out.planes[0])[: out.samples * 2]
    return bytes(pcm)


def write_wav(path: str | Path | BinaryIO, pcm: bytes, rate: int) -> None:
    """Write 16-bit mono PCM as a WAV a person can play."""
    target = path if isinstance(path, BinaryIO | io.IOBase) else str(path)
    with wave.open(target, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)


def dominant_frequency(pcm: bytes, rate: int) -> float:
    """Return the loudest frequency of 16-bit mono PCM (Hz)."""
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    if samples.size == 0:
        return 0.0
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])


class MicEncoder:
    """Encode 16 kHz PCM into the firmware's 60 ms Opus frames, with DTX."""

    def __init__(self, rate: int = MIC_RATE, frame_ms: int = FRAME_MS) -> None:
        """Prepare the encoder."""
        codec = av.CodecContext.create("libopus", "w")
        codec.sample_rate = rate
        codec.layout = "mono"
        codec.format = "s16"
        codec.bit_rate = 24000
        codec.options = {
            "frame_duration": str(frame_ms),
            "application": "voip",
            "dtx": "1",
        }
        self._codec = codec
        self._rate = rate
        self.frame_bytes = rate * frame_ms // 1000 * 2
        self._pts = 0

    def frames(self, pcm: bytes) -> list[bytes]:
        """Return one Opus packet per 60 ms of ``pcm`` (the last one padded)."""
        packets: list[bytes] = []
        for start in range(0, len(pcm), self.frame_bytes):
            chunk = pcm[start : start + self.frame_bytes].ljust(self.frame_bytes, b"\0")
            samples = np.frombuffer(chunk, dtype="<i2").reshape(1, -1)
            frame = AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate = self._rate
            frame.pts = self._pts
            self._pts += len(chunk) // 2
            packets += [bytes(packet) for packet in self._codec.encode(frame)]
        return packets


class SpeakerDecoder:
    """Decode the server's Opus packets as the device does."""

    def __init__(self, rate: int, frame_ms: int) -> None:
        """Open a decoder for the server hello's audio parameters."""
        self.rate = rate
        self.frame_ms = frame_ms
        self._codec = av.CodecContext.create("libopus", "r")
        self._codec.sample_rate = rate
        self._codec.layout = "mono"
        self._resampler = AudioResampler(format="s16", layout="mono", rate=rate)
        self.failed = 0

    def decode(self, packet: bytes) -> bytes:
        """Return PCM of one packet; a broken packet plays as nothing."""
        try:
            frames = self._codec.decode(av.Packet(packet))
        except av.FFmpegError, ValueError:
            self.failed += 1
            return b""
        return b"".join(
            bytes(out.planes[0])[: out.samples * 2]
            for frame in frames
            for out in self._resampler.resample(frame)
        )


@dataclass(kw_only=True)
class PlaybackRecord:
    """What the speaker did with the server's audio."""

    received: int = 0
    dropped_not_speaking: int = 0
    dropped_queue_full: int = 0
    played: int = 0
    played_pcm: bytearray = field(default_factory=bytearray)
    max_queue: int = 0
    arrivals: list[float] = field(default_factory=list)
    # Packets queued just after each one was taken: how far ahead the server is.
    queue_depths: list[int] = field(default_factory=list)
    finished_at: float | None = None
    # The most packets that arrived within BURST_WINDOW of each other, and
    # (on a board without PSRAM) the bursts it would not have survived.
    max_burst: int = 0
    bursts: int = 0

    @property
    def dropped(self) -> int:
        """Return every packet that was not played."""
        return self.dropped_not_speaking + self.dropped_queue_full


class Speaker:
    """The firmware's playback: a bounded queue drained in real time."""

    def __init__(
        self,
        *,
        is_speaking: Callable[[], bool],
        on_drained: Callable[[], None],
        queue_limit: int = MAX_DECODE_PACKETS,
        decode: bool = True,
        burst_limit: int | None = None,
    ) -> None:
        """Play while ``is_speaking()``; call ``on_drained`` when the queue empties.

        ``burst_limit``: the most packets a board without PSRAM takes within
        :data:`BURST_WINDOW` (None: any burst is survived).
        """
        self._is_speaking = is_speaking
        self._on_drained = on_drained
        self.queue_limit = queue_limit
        self.burst_limit = burst_limit
        self._decode = decode
        self._queue: deque[bytes] = deque()
        self._decoder: SpeakerDecoder | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.record = PlaybackRecord()
        self.frame_seconds = FRAME_MS / 1000
        self.rate = SPEAKER_RATE

    def configure(self, rate: int, frame_ms: int) -> None:
        """Take the server hello's audio parameters."""
        self.frame_seconds = frame_ms / 1000
        self.rate = rate
        if self._decode and (
            self._decoder is None
            or (self._decoder.rate, self._decoder.frame_ms) != (rate, frame_ms)
        ):
            self._decoder = SpeakerDecoder(rate, frame_ms)

    @property
    def idle(self) -> bool:
        """Return True when nothing is queued or playing."""
        return not self._queue and (self._task is None or self._task.done())

    def push(self, packet: bytes) -> None:
        """Take one packet from the server (dropped unless Speaking)."""
        record = self.record
        record.received += 1
        now = asyncio.get_running_loop().time()
        record.arrivals.append(now)
        self._note_burst(now)
        if not self._is_speaking():
            record.dropped_not_speaking += 1
            return
        if len(self._queue) >= self.queue_limit:
            record.dropped_queue_full += 1
            return
        self._queue.append(packet)
        record.max_queue = max(record.max_queue, len(self._queue))
        record.queue_depths.append(len(self._queue))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._play())

    def _note_burst(self, now: float) -> None:
        record = self.record
        burst = 0
        for arrival in reversed(record.arrivals):
            if now - arrival > BURST_WINDOW:
                break
            burst += 1
        record.max_burst = max(record.max_burst, burst)
        if self.burst_limit is not None and burst == self.burst_limit + 1:
            record.bursts += 1
            _LOGGER.warning(
                "More than %d audio packets within %.0f ms: a board without "
                "PSRAM stops playing and reboots",
                self.burst_limit,
                BURST_WINDOW * 1000,
            )

    def reset(self) -> None:
        """Clear the queue (entering Speaking resets the decoder)."""
        self._queue.clear()

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while self._queue:
            packet = self._queue.popleft()
            if self._decoder is not None:
                self.record.played_pcm += self._decoder.decode(packet)
            self.record.played += 1
            next_at += self.frame_seconds
            await asyncio.sleep(max(0.0, next_at - loop.time()))
        self.record.finished_at = loop.time()
        self._on_drained()

    async def stop(self) -> None:
        """Stop playing (the device is stopping)."""
        self._queue.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def wav_bytes(pcm: bytes, rate: int) -> bytes:
    """Return 16-bit mono PCM wrapped in a WAV file."""
    buffer = io.BytesIO()
    write_wav(buffer, pcm, rate)
    return buffer.getvalue()


def mp3_bytes(frequency: float, seconds: float) -> bytes:
    """Return a 44.1 kHz stereo MP3 of a tone (what music servers send)."""
    out = io.BytesIO()
    with av.open(out, "w", format="mp3") as container:
        stream = container.add_stream("libmp3lame", rate=44100)
        stream.layout = "stereo"
        samples = int(44100 * seconds)
        wave_ = np.sin(2 * np.pi * frequency * np.arange(samples) / 44100) * 8000
        pcm = np.repeat(wave_.astype("<i2"), 2).reshape(1, -1)
        frame = AudioFrame.from_ndarray(pcm, format="s16", layout="stereo")
        frame.sample_rate = 44100
        frame.pts = 0
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()
