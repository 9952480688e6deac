"""Audio of any format, transcoded for the device as it arrives (the executor).

A media player's source may be a file, a TTS result or a never-ending stream
(internet radio, Music Assistant). PyAV demuxes and decodes it from the bytes
read so far, resamples it to the speaker's rate and hands it to a
:class:`ChunkEncoder`; nothing waits for the whole file. The work is CPU-bound
and PyAV reads with blocking calls, so each stream runs as one job of the
event loop's default executor (Home Assistant's, in Home Assistant) for as
long as it plays. The job reads through the event loop (``read``), and its
output is bounded: a consumer that sends in real time paces the source too.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
import concurrent.futures
import contextlib
import io
import threading
from typing import Final, override

import av
from av.audio.resampler import AudioResampler

from ..errors import MediaSourceError
from .codec import resampled_pcm
from .ogg import Chunk, ChunkEncoder

# How much is decoded ahead of the consumer, in chunks (frames: 60 ms each).
AHEAD_CHUNKS: Final = 50
# PyAV probes a stream before its first frame: a few kB tell an audio format;
# the default (5 MB, 5 s) would hold a live stream's start for seconds.
PROBE_OPTIONS: Final = {"probesize": "32768", "analyzeduration": "500000"}
# Packets in a row that do not decode before the stream counts as broken.
MAX_BAD_PACKETS: Final = 50
_POLL: Final = 0.25  # how often a waiting thread looks whether it was closed

type ReadBytes = Callable[[int], Awaitable[bytes]]


class _ClosedError(Exception):
    """The transcoder was closed: the thread stops."""


class _LoopReader(io.RawIOBase):
    """A blocking file for PyAV that reads through the event loop."""

    def __init__(self, owner: LiveTranscoder) -> None:
        self._owner = owner

    @override
    def readable(self) -> bool:
        return True

    @override
    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._owner.call_loop(self._owner.read(len(buffer)))
        buffer[: len(data)] = data
        return len(data)


class LiveTranscoder:
    """One source's audio as chunks for the device, made in a thread."""

    def __init__(
        self,
        read: ReadBytes,
        encoder: ChunkEncoder,
        sample_rate: int,
        *,
        format_name: str | None = None,
    ) -> None:
        """Decode what ``read(n)`` returns (b"" at its end) into ``encoder``.

        ``format_name`` is the container's PyAV name when the source says it
        (an HTTP content type); PyAV probes otherwise.
        """
        self.read = read
        self._encoder = encoder
        self._rate = sample_rate
        self._format = format_name
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Chunk | BaseException | None] = asyncio.Queue()
        self._room = threading.Semaphore(AHEAD_CHUNKS)
        self._closed = threading.Event()
        self._job: asyncio.Future[None] | None = None

    def start(self) -> None:
        """Start decoding, in the loop's default executor."""
        self._job = self._loop.run_in_executor(None, self._run)

    async def chunks(self) -> AsyncIterator[Chunk]:
        """Yield the chunks as they are made; raise MediaSourceError on bad audio."""
        while True:
            item = await self._queue.get()
            self._room.release()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        """Stop decoding and wait until the job has ended."""
        self._closed.set()
        self._room.release(AHEAD_CHUNKS)
        if self._job is not None:
            await asyncio.shield(self._job)

    # --- the executor's side -------------------------------------------------

    def call_loop[T](self, awaitable: Awaitable[T]) -> T:
        """Run ``awaitable`` on the event loop and wait for it (thread side)."""

        async def run() -> T:
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        while True:
            if self._closed.is_set():
                future.cancel()
                raise _ClosedError
            try:
                return future.result(_POLL)
            except concurrent.futures.TimeoutError:
                continue

    def _emit(self, item: Chunk | BaseException | None) -> None:
        while not self._room.acquire(timeout=_POLL):
            if self._closed.is_set():
                raise _ClosedError
        if self._closed.is_set():
            raise _ClosedError
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            self._transcode()
            self._emit(None)
        except _ClosedError:
            pass
        except MediaSourceError as err:
            self._emit_last(err)
        except (av.FFmpegError, ValueError, EOFError, OSError) as err:
            self._emit_last(MediaSourceError(f"cannot decode audio: {err}"))

    def _emit_last(self, err: BaseException) -> None:
        with contextlib.suppress(_ClosedError):
            self._emit(err)

    def _transcode(self) -> None:
        options = dict(PROBE_OPTIONS)
        with av.open(
            _LoopReader(self), mode="r", format=self._format, options=options
        ) as container:
            if not container.streams.audio:
                raise MediaSourceError("no audio stream")
            stream = container.streams.audio[0]
            resampler = AudioResampler(format="s16", layout="mono", rate=self._rate)
            bad = 0
            for packet in container.demux(stream):
                try:
                    frames = packet.decode()
                except av.InvalidDataError:
                    bad += 1
                    if bad > MAX_BAD_PACKETS:
                        raise MediaSourceError("the audio does not decode") from None
                    continue
                bad = 0
                for frame in frames:
                    self._take(resampled_pcm(resampler, frame))
            self._take(resampled_pcm(resampler, None))
        for chunk in self._encoder.close():
            self._emit(chunk)

    def _take(self, pcm: bytes) -> None:
        if not pcm:
            return
        for chunk in self._encoder.feed(pcm):
            self._emit(chunk)
