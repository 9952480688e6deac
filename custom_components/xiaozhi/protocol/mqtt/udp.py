"""The firmware's UDP audio channel: AES-128-CTR packets, and the endpoint.

Every packet, both ways, is a 16-byte header followed by the Opus packet
encrypted with AES-128-CTR, the header itself being the counter block::

    u8 type = 0x01 | u8 flags | u16 payload length | u32 ssrc
    | u32 timestamp | u32 sequence                        (big-endian)

The server hello gives the device a key and a nonce per audio channel. The
device keeps bytes 0, 1 and 4-7 of the nonce (so the ssrc is ours to choose
and routes its packets here) and writes length, timestamp and sequence into
the rest. Nothing authenticates a packet, so the endpoint drops what does not
fit: a wrong length, an unknown ssrc, a source other than the device's IP, a
sequence that does not rise or jumps ahead, a payload that decrypts to no
Opus packet, or more packets than a microphone makes. Audio is taken from
one port of the device's IP; another port takes over only with a run of
consecutive audio continuing the channel's sequence, so that a spoofer on
the device's own IP can neither be heard nor take the replies.

Known weakness of the firmware's scheme: the sequence sits in the counter's
lowest bytes, so consecutive uplink packets reuse keystream (block 1 of
packet n is block 0 of packet n+1). Downlink packets carry a rising
timestamp, which keeps their counter blocks apart.

No Home Assistant import.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
import logging
import secrets
import socket
import struct
import sys
import time
from typing import Final

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..audio.preroll import Heard
from ..errors import NoAudioAddressError

_LOGGER = logging.getLogger(__name__)

HEADER: Final = struct.Struct(">BBHIII")
HEADER_SIZE: Final = HEADER.size
PACKET_TYPE: Final = 0x01
MAX_DATAGRAM: Final = 1500  # the device's receive buffer
MAX_PAYLOAD: Final = MAX_DATAGRAM - HEADER_SIZE
RECEIVE_SIZE: Final = 65536  # read whole whatever comes, to judge it whole
# Datagrams read in one pass of the event loop at most: a few devices'
# pre-rolls, without holding the loop up for long.
READ_BATCH: Final = 64
# The kernel's receive time of each datagram, not when the event loop read
# it: a busy loop reads late, the kernel's clock is on time. Linux's
# SO_TIMESTAMPNS (asm-generic/socket.h; Python does not name it) gives a
# struct timespec of two native longs.
_TIMESTAMPNS: Final = 35 if sys.platform == "linux" else None
_TIMESPEC: Final = struct.Struct("@ll")
_ANCILLARY: Final = socket.CMSG_SPACE(_TIMESPEC.size) if _TIMESTAMPNS else 0

type OnAudio = Callable[[bytes, Heard], None]
# A microphone makes 17 packets a second (60 ms), 50 with 20 ms frames; the
# wake-word pre-roll arrives as a burst of about 33.
RATE_PER_SECOND: Final = 100.0
BURST: Final = 100.0
# The sequence rises by one a packet: a jump of more than a minute of audio
# is not the device (it restarts its count with every channel).
MAX_SEQUENCE_JUMP: Final = 1000
# Source ports of the device's IP remembered per channel.
MAX_SOURCES: Final = 4
# Audio moves to another port after this many Opus packets in a row with
# consecutive sequences. Random bytes pass for Opus about one time in 40;
# five times running, one in a hundred million.
RUN_TO_MOVE: Final = 5
# A reply port heard within this many seconds keeps its audio unless the
# other port's run is longer than its own.
REPLY_QUIET: Final = 2.0
# How long the first packet to a device waits for the device's first audio,
# which tells the channel where to send. Firmware sends audio before anything
# is answered; a text client (py-xiaozhi over MQTT) may type its first
# question before its microphone sends anything.
FIRST_AUDIO_WAIT: Final = 2.0


def crypt(key: bytes, header: bytes, payload: bytes) -> bytes:
    """Encrypt or decrypt a payload (CTR is its own inverse)."""
    encryptor = Cipher(algorithms.AES(key), modes.CTR(header)).encryptor()
    return encryptor.update(payload) + encryptor.finalize()


def pack_packet(
    key: bytes,
    payload: bytes,
    *,
    ssrc: int,
    timestamp: int,
    sequence: int,
    flags: int = 0,
) -> bytes:
    """Return one encrypted packet."""
    header = HEADER.pack(
        PACKET_TYPE,
        flags,
        len(payload),
        ssrc,
        timestamp & 0xFFFFFFFF,
        sequence & 0xFFFFFFFF,
    )
    return header + crypt(key, header, payload)


@dataclass(frozen=True, slots=True)
class PacketHeader:
    """The fields of a packet header."""

    flags: int
    length: int
    ssrc: int
    timestamp: int
    sequence: int


def parse_header(data: bytes) -> PacketHeader | None:
    """Return the header of a well-formed packet, or None."""
    if len(data) < HEADER_SIZE or data[0] != PACKET_TYPE:
        return None
    _type, flags, length, ssrc, timestamp, sequence = HEADER.unpack_from(data)
    if len(data) != HEADER_SIZE + length:
        return None
    return PacketHeader(flags, length, ssrc, timestamp, sequence)


_SILK_MS: Final = (10.0, 20.0, 40.0, 60.0)
_CELT_MS: Final = (2.5, 5.0, 10.0, 20.0)
MAX_FRAME_BYTES: Final = 1275


def opus_duration_ms(packet: bytes) -> float | None:
    """Return a packet's duration by its TOC, or None if it is no Opus packet.

    The checks are RFC 6716's R1-R7 (section 3.4) as far as the frame sizes
    go; an empty packet (DTX) is a frame of the stream's own duration and is
    left to the caller.
    """
    if not packet:
        return None
    toc = packet[0]
    config, code = toc >> 3, toc & 0x03
    if config < 12:
        frame = _SILK_MS[config % 4]
    elif config < 16:
        frame = (10.0, 20.0)[config % 2]
    else:
        frame = _CELT_MS[config % 4]
    rest = len(packet) - 1
    if code == 0:
        return frame if rest <= MAX_FRAME_BYTES else None
    if code == 1:
        return 2 * frame if rest % 2 == 0 and rest // 2 <= MAX_FRAME_BYTES else None
    if code == 2:
        if rest < 1:
            return None
        first, used = packet[1], 1
        if first >= 252:
            if rest < 2:
                return None
            first, used = packet[1] + 4 * packet[2], 2
        second = rest - used - first
        if second < 0 or max(first, second) > MAX_FRAME_BYTES:
            return None
        return 2 * frame
    if rest < 1:
        return None
    count = packet[1] & 0x3F
    if count == 0 or count * frame > 120.0:
        return None
    return count * frame


@dataclass(slots=True)
class ChannelStats:
    """What a channel received and dropped, by reason."""

    received: int = 0
    accepted: int = 0
    sent: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        """Count a dropped packet."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


class _Source:
    """What one source port of the device's IP has sent on a channel."""

    __slots__ = ("accepted", "heard", "last_sequence", "refilled", "run", "tokens")

    def __init__(self, last_sequence: int) -> None:
        self.last_sequence = last_sequence
        self.accepted = 0
        self.heard = 0.0  # when it last sent audio (monotonic)
        self.run = 0  # Opus packets in a row, sequences consecutive
        self.tokens = BURST
        self.refilled = time.monotonic()

    def allowed(self) -> bool:
        """Take a token of the rate limit; False when there is none."""
        now = time.monotonic()
        self.tokens = min(BURST, self.tokens + (now - self.refilled) * RATE_PER_SECOND)
        self.refilled = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class AudioChannel:
    """One device's audio channel: its key, its counters, its address."""

    def __init__(
        self,
        endpoint: UdpEndpoint,
        ssrc: int,
        device_ip: str,
        on_audio: OnAudio,
        frame_ms: float | None,
    ) -> None:
        """Open a channel for packets from ``device_ip`` with ``ssrc``."""
        self._endpoint = endpoint
        self.ssrc = ssrc
        self.key = secrets.token_bytes(16)
        # Bytes the device keeps: type, flags, ssrc; the rest is random and
        # overwritten by the device.
        nonce = bytearray(secrets.token_bytes(16))
        nonce[0:2] = bytes([PACKET_TYPE, 0])
        nonce[4:8] = ssrc.to_bytes(4, "big")
        self.nonce = bytes(nonce)
        self.device_ip = device_ip
        self.address: tuple[str, int] | None = None
        self.frame_ms = frame_ms
        self._on_audio = on_audio
        self._sources: dict[tuple[str, int], _Source] = {}
        self._highest = 0  # the highest sequence taken from any port
        self._sequence = 0
        self.stats = ChannelStats()
        self.closed = False
        self._addressed = asyncio.Event()  # set once the address is known, or closed
        self._waited = False  # a send waited for the address in vain

    def hello_fields(self, server: str, port: int) -> dict[str, object]:
        """Return the ``udp`` object of the server hello."""
        return {
            "server": server,
            "port": port,
            "key": self.key.hex(),
            "nonce": self.nonce.hex(),
            "encryption": "aes-128-ctr",
        }

    def receive(
        self,
        data: bytes,
        header: PacketHeader,
        address: tuple[str, int],
        received: float | None = None,
    ) -> None:
        """Take a packet with this channel's ssrc; drop what does not fit.

        Audio is taken from one port of the device's IP, the reply port:
        the first to send audio. Another port of that IP (a spoofer, or the
        device after its NAT moved it) is heard out, never passed on: its
        sequence must continue above the channel's highest, and the replies
        move to it only after a run of consecutive non-empty Opus packets,
        longer than the reply port's own run if that port was heard lately.
        Random bytes pass for Opus now and then, but not five times running,
        and a replay of captured packets never rises above the highest.
        The audio goes on with its sequence and ``received``, the kernel's
        receive time (``time.time()`` where the kernel does not say).
        """
        stats = self.stats
        stats.received += 1
        source = None
        if address[0] == self.device_ip:
            source = self._sources.get(address) or self._add_source(address)
        reason = None
        if source is None:
            reason = "source"
        elif (
            not source.last_sequence
            < header.sequence
            <= (source.last_sequence + MAX_SEQUENCE_JUMP)
        ):
            reason = "sequence"
        elif not source.allowed():
            reason = "rate"
        payload = b""
        if reason is None:
            payload = crypt(self.key, data[:HEADER_SIZE], data[HEADER_SIZE:])
            duration = opus_duration_ms(payload) if payload else self.frame_ms
            if duration is None or (self.frame_ms and duration != self.frame_ms):
                reason = "not_opus"
        if source is not None and reason == "not_opus":
            source.run = 0
        if reason is not None or source is None:
            self._drop(reason or "source", address)
            return
        consecutive = header.sequence == source.last_sequence + 1
        source.run = source.run + 1 if consecutive and payload else 0
        source.last_sequence = header.sequence
        source.heard = time.monotonic()
        self._highest = max(self._highest, header.sequence)
        if self.address is None:
            self.address = address
            self._addressed.set()
        elif address != self.address:
            if not self._takes_over(source):
                self._drop("not_reply_port", address)
                return
            _LOGGER.debug("Audio of ssrc %08x moved to %s", self.ssrc, address)
            self.address = address
        source.accepted += 1
        stats.accepted += 1
        when = received if received is not None else time.time()
        self._on_audio(payload, Heard(header.sequence, when))

    def _takes_over(self, source: _Source) -> bool:
        """Return True when ``source`` has shown itself as the device's stream."""
        if source.run < RUN_TO_MOVE:
            return False
        assert self.address is not None  # noqa: S101 - set with the first audio
        reply = self._sources.get(self.address)
        if reply is None or time.monotonic() - reply.heard > REPLY_QUIET:
            return True
        return source.run > reply.run

    def _drop(self, reason: str, address: tuple[str, int]) -> None:
        stats = self.stats
        if reason not in stats.dropped:
            _LOGGER.debug(
                "Dropping UDP packets of ssrc %08x from %s (%s)",
                self.ssrc,
                address[0],
                reason,
            )
        stats.drop(reason)

    def _add_source(self, address: tuple[str, int]) -> _Source:
        if len(self._sources) >= MAX_SOURCES:
            # Forget the source with the least audio (never the reply port).
            weakest = min(
                (known for known in self._sources if known != self.address),
                key=lambda known: self._sources[known].accepted,
            )
            del self._sources[weakest]
        # A new port continues the channel's stream: nothing at or below
        # what was heard (a replay) is taken from it.
        source = self._sources[address] = _Source(self._highest)
        return source

    async def send_when_heard(self, payload: bytes, timestamp: int) -> None:
        """Send one Opus packet once the device's address is known.

        The address comes with the device's first audio packet: a packet to
        send before it waits :data:`FIRST_AUDIO_WAIT` for it, once a channel.
        Raises NoAudioAddressError when no audio came, ConnectionError when
        the channel closed.
        """
        if self.address is None and not self.closed and not self._waited:
            try:
                async with asyncio.timeout(FIRST_AUDIO_WAIT):
                    await self._addressed.wait()
            except TimeoutError:
                self._waited = True
        self.send(payload, timestamp)

    def send(self, payload: bytes, timestamp: int) -> None:
        """Send one Opus packet to the device.

        Raises ConnectionError once the channel is closed, and
        NoAudioAddressError before the device's first audio.
        """
        if self.closed:
            raise ConnectionError("audio channel closed")
        if self.address is None:
            raise NoAudioAddressError(
                f"no audio from {self.device_ip} on its channel: its UDP port "
                "is unknown"
            )
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"Opus packet of {len(payload)} bytes is too large")
        self._sequence += 1
        packet = pack_packet(
            self.key,
            payload,
            ssrc=self.ssrc,
            timestamp=timestamp,
            sequence=self._sequence,
        )
        self._endpoint.sendto(packet, self.address)
        self.stats.sent += 1

    def close(self) -> None:
        """Stop taking and sending packets."""
        if not self.closed:
            self.closed = True
            self._addressed.set()
            self._endpoint.forget(self)


class UdpEndpoint:
    """The audio endpoint: one socket, channels found by ssrc.

    asyncio's datagram transport reads one datagram per pass of the event
    loop. Audio comes in bursts (a wake word's two-second pre-roll is 33
    packets at once) from many devices: read one by one, they queue in the
    kernel, fall behind the MQTT messages they came with, and overflow.
    The endpoint reads what is waiting, up to :data:`READ_BATCH` datagrams
    a pass.
    """

    def __init__(self) -> None:
        """Start without channels."""
        self._channels: dict[int, AudioChannel] = {}
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.unknown = 0

    @property
    def port(self) -> int | None:
        """Return the port the endpoint listens on, once started."""
        if self._sock is None:
            return None
        return int(self._sock.getsockname()[1])

    @property
    def channels(self) -> int:
        """Return how many channels are open."""
        return len(self._channels)

    async def start(self, host: str, port: int) -> None:
        """Listen; raises OSError when the port cannot be bound."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            if _TIMESTAMPNS is not None:
                sock.setsockopt(socket.SOL_SOCKET, _TIMESTAMPNS, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        loop.add_reader(sock.fileno(), self._read_ready)
        self._sock, self._loop = sock, loop

    def stop(self) -> None:
        """Close the socket and every channel."""
        for channel in list(self._channels.values()):
            channel.close()
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def _read_ready(self) -> None:
        """Take the datagrams waiting on the socket."""
        sock = self._sock
        for _ in range(READ_BATCH):
            if sock is None or sock.fileno() < 0:
                return
            try:
                data, ancillary, _flags, addr = sock.recvmsg(RECEIVE_SIZE, _ANCILLARY)
            except BlockingIOError, InterruptedError:
                return
            except OSError as err:
                # An ICMP error of an earlier send (a device gone): go on.
                _LOGGER.debug("UDP receive error: %s", err)
                continue
            self.datagram_received(data, addr, _kernel_time(ancillary))

    def datagram_received(
        self,
        data: bytes,
        addr: tuple[str | object, int],
        received: float | None = None,
    ) -> None:
        """Pass one datagram to its channel (``received``: the kernel's time)."""
        header = parse_header(data)
        channel = self._channels.get(header.ssrc) if header is not None else None
        if channel is None or header is None:
            self.unknown += 1
            if self.unknown == 1:
                _LOGGER.debug("Dropping UDP packets of no audio channel")
            return
        channel.receive(data, header, (str(addr[0]), int(addr[1])), received)

    def open_channel(
        self,
        device_ip: str,
        on_audio: OnAudio,
        frame_ms: float | None = None,
    ) -> AudioChannel:
        """Open a channel for a device at ``device_ip``, with a fresh key."""
        while True:
            ssrc = secrets.randbits(32)
            if ssrc and ssrc not in self._channels:
                break
        channel = AudioChannel(self, ssrc, device_ip, on_audio, frame_ms)
        self._channels[ssrc] = channel
        return channel

    def forget(self, channel: AudioChannel) -> None:
        """Drop a closed channel."""
        if self._channels.get(channel.ssrc) is channel:
            del self._channels[channel.ssrc]

    def sendto(self, packet: bytes, address: tuple[str, int]) -> None:
        """Send a datagram; ConnectionError when the endpoint is stopped.

        A datagram the socket cannot take now is dropped, as the network
        would drop it: audio is paced, and late audio is no use.
        """
        if self._sock is None:
            raise ConnectionError("UDP endpoint stopped")
        try:
            self._sock.sendto(packet, address)
        except BlockingIOError, InterruptedError:
            _LOGGER.debug("UDP send buffer full: a packet to %s dropped", address[0])
        except OSError as err:
            _LOGGER.debug("UDP send to %s failed: %s", address[0], err)


def _kernel_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """Return the kernel's receive time of a datagram, if it said it."""
    for level, kind, data in ancillary:
        if (
            level == socket.SOL_SOCKET
            and kind == _TIMESTAMPNS
            and len(data) >= _TIMESPEC.size
        ):
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return float(seconds) + float(nanoseconds) / 1e9
    return None
