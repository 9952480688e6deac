"""The firmware's ``notify`` player: one GET of a mono Ogg Opus stream, played as read.

Modelled on ``main/notify/notify_player.cc`` and its Ogg demuxer
(``docs/notify.md``): the device GETs the URL once with a 5 s timeout per
read and no redirects, needs a 2xx status, and demuxes pages as they arrive.
OpusHead (mono) and OpusTags come first; each packet's length comes from its
TOC byte (at most 120 ms, whole milliseconds). Packets go through a bounded
decode queue played in real time, so a full queue stops reading (TCP
back-pressure). The stream is complete when it ends at a page boundary
after at least one packet (the end-of-stream flag is not looked at); a read
error, a timeout or a cut inside a page drops what is queued at once.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
import struct
from typing import Final

import aiohttp

from .transport import HttpClient
from .voice import SpeakerDecoder

READ_TIMEOUT: Final = 5.0
MAX_PACKET: Final = 2048
_SILK_MS: Final = (10, 20, 40, 60)
_CELT_MS: Final = (2.5, 5, 10, 20)


class OggError(Exception):
    """The stream is not a mono Ogg Opus stream the device plays."""


def packet_ms(packet: bytes) -> float:
    """Return the length of one Opus packet from its TOC byte."""
    if not packet:
        raise OggError("empty packet")
    toc = packet[0]
    config = toc >> 3
    if config < 12:
        frame = float(_SILK_MS[config % 4])
    elif config < 16:
        frame = 10.0 if config % 2 == 0 else 20.0
    else:
        frame = _CELT_MS[config % 4]
    match toc & 3:
        case 0:
            frames = 1
        case 1 | 2:
            frames = 2
        case _:
            if len(packet) < 2:
                raise OggError("code 3 packet without its count")
            frames = packet[1] & 0x3F
    total = frame * frames
    if total > 120 or total != int(total):
        raise OggError(f"packet of {total} ms")
    return total


class OggReader:
    """Ogg pages in, Opus packets out, as bytes arrive."""

    def __init__(self) -> None:
        """Wait for the first page."""
        self._buffer = bytearray()
        self._partial = bytearray()
        self.head = False
        self.tags = False
        self.sample_rate = 48000
        self.packets = 0

    @property
    def at_boundary(self) -> bool:
        """Return True when no page is half read."""
        return not self._buffer and not self._partial

    def feed(self, data: bytes) -> list[bytes]:
        """Take bytes; return the audio packets of the pages they complete."""
        self._buffer += data
        out: list[bytes] = []
        while len(self._buffer) >= 27:
            if self._buffer[:4] != b"OggS":
                raise OggError("lost page sync")
            segments = self._buffer[26]
            header = 27 + segments
            if len(self._buffer) < header:
                break
            lacing = self._buffer[27:header]
            size = sum(lacing)
            if len(self._buffer) < header + size:
                break
            body = bytes(self._buffer[header : header + size])
            del self._buffer[: header + size]
            offset = 0
            for lace in lacing:
                self._partial += body[offset : offset + lace]
                offset += lace
                if len(self._partial) > MAX_PACKET:
                    raise OggError("packet over 2048 bytes")
                if lace < 255:
                    packet = bytes(self._partial)
                    self._partial.clear()
                    if (audio := self._take(packet)) is not None:
                        out.append(audio)
        return out

    def _take(self, packet: bytes) -> bytes | None:
        if packet.startswith(b"OpusHead"):
            if len(packet) < 19:
                raise OggError("short OpusHead")
            if packet[9] != 1:
                raise OggError(f"{packet[9]} channels")
            (rate,) = struct.unpack_from("<I", packet, 12)
            self.sample_rate = rate if rate in (8000, 12000, 16000, 24000) else 48000
            self.head = True
            return None
        if packet.startswith(b"OpusTags"):
            self.tags = True
            return None
        if not (self.head and self.tags):
            return None  # dropped with a warning by the firmware
        packet_ms(packet)
        self.packets += 1
        return packet


@dataclass(kw_only=True)
class NotifyPlayback:
    """What one ``notify`` did."""

    url: str
    subtitles: list[str]
    status: int | None = None
    complete: bool | None = None
    error: str | None = None
    pcm: bytearray = field(default_factory=bytearray)
    packets: int = 0
    max_queue: int = 0
    underruns: int = 0  # the speaker ran dry while the stream went on
    first_bytes_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None


def _check_status(status: int) -> None:
    if not 200 <= status < 300:
        raise OggError(f"HTTP {status}")


def _check_complete(reader: OggReader) -> None:
    if not (reader.head and reader.tags and reader.packets and reader.at_boundary):
        raise OggError("incomplete stream")


async def play_notify(
    session: HttpClient,
    url: str,
    record: NotifyPlayback,
    *,
    queue_size: int,
    changed: Callable[[], None],
    speed: float = 1.0,
) -> None:
    """Fetch and play ``url`` as the firmware does; fill ``record``.

    ``changed`` is called whenever ``record`` changed.
    """
    reader = OggReader()
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(queue_size)
    loop = asyncio.get_running_loop()
    decoder: SpeakerDecoder | None = None

    async def playback() -> None:
        nonlocal decoder
        due = loop.time()  # when the speaker is free for the next packet
        while True:
            starving = queue.empty() and record.started_at is not None
            if (packet := await queue.get()) is None:
                break
            if starving:
                record.underruns += 1
            if decoder is None:
                decoder = SpeakerDecoder(reader.sample_rate, 60)
            if record.started_at is None:
                record.started_at = loop.time()
            record.pcm += decoder.decode(packet)
            record.packets += 1
            changed()
            due = max(due, loop.time()) + packet_ms(packet) / 1000 / speed
            await asyncio.sleep(due - loop.time())

    player = asyncio.create_task(playback())
    timeout = aiohttp.ClientTimeout(sock_read=READ_TIMEOUT)
    response: aiohttp.ClientResponse | None = None
    try:
        response = await session.get(
            url,
            headers={
                "Accept": "audio/ogg, application/ogg",
                "Accept-Encoding": "identity",
            },
            allow_redirects=False,
            timeout=timeout,
        )
        record.status = response.status
        _check_status(response.status)
        async for data in response.content.iter_any():
            if record.first_bytes_at is None:
                record.first_bytes_at = loop.time()
            for packet in reader.feed(data):
                await queue.put(packet)
                record.max_queue = max(record.max_queue, queue.qsize())
        _check_complete(reader)
        await queue.put(None)
        await player
        record.complete = True
    except (aiohttp.ClientError, TimeoutError, OggError) as err:
        # Stopped: what is queued is dropped at once.
        record.complete = False
        record.error = str(err) or type(err).__name__
    except asyncio.CancelledError:
        record.complete = False
        record.error = "cancelled"  # a wake word or the button
        raise
    finally:
        player.cancel()
        if response is not None:
            response.close()
        record.finished_at = loop.time()
        changed()
