"""The UDP audio endpoint over real sockets: the firmware's packets, and attacks.

The device side is the simulator's own implementation of the firmware's
scheme (``simulator/mqtt.py``), so both ends are checked against each other.
"""

import asyncio
from collections.abc import AsyncIterator
import socket

import pytest

from custom_components.xiaozhi.protocol.mqtt import udp
from custom_components.xiaozhi.protocol.mqtt.udp import (
    HEADER,
    HEADER_SIZE,
    AudioChannel,
    UdpEndpoint,
    opus_duration_ms,
    pack_packet,
    parse_header,
)
from simulator.mqtt import DeviceUdpChannel, UdpRecord, parse_udp
from simulator.voice import MicEncoder, silence, tone

FRAMES = MicEncoder().frames(tone(440, 0.6) + silence(0.3))


class Device:
    """A device's side of one channel, and what it received."""

    def __init__(self, fields: dict[str, object]) -> None:
        params = parse_udp(fields)
        assert params is not None
        self.received: asyncio.Queue[bytes] = asyncio.Queue()
        self.record = UdpRecord()
        self.channel = DeviceUdpChannel(
            params, lambda payload, _ts: self.received.put_nowait(payload), self.record
        )


@pytest.fixture
async def endpoint(socket_enabled: None) -> AsyncIterator[UdpEndpoint]:
    server = UdpEndpoint()
    await server.start("127.0.0.1", 0)
    yield server
    server.stop()


async def _open(
    endpoint: UdpEndpoint, frame_ms: float | None = 60.0
) -> tuple[AudioChannel, Device, asyncio.Queue[bytes]]:
    heard: asyncio.Queue[bytes] = asyncio.Queue()
    channel = endpoint.open_channel("127.0.0.1", heard.put_nowait, frame_ms)
    assert endpoint.port is not None
    device = Device(channel.hello_fields("127.0.0.1", endpoint.port))
    await device.channel.open()
    return channel, device, heard


async def test_audio_both_ways(endpoint: UdpEndpoint) -> None:
    """Uplink decrypts to the device's Opus; downlink plays on the device."""
    channel, device, heard = await _open(endpoint)
    for packet in FRAMES:
        assert device.channel.send(packet)
    received = [await asyncio.wait_for(heard.get(), 2) for _ in FRAMES]
    assert received == FRAMES
    assert channel.stats.accepted == len(FRAMES)
    assert channel.address is not None

    for index, packet in enumerate(FRAMES):
        channel.send(packet, timestamp=index * 60)
    played = [await asyncio.wait_for(device.received.get(), 2) for _ in FRAMES]
    assert played == FRAMES
    assert device.record.dropped == {}
    # The device's strict check: the first downlink sequence is 1, then rising.
    assert device.channel.remote_sequence == len(FRAMES)
    device.channel.close()
    channel.close()
    assert endpoint.channels == 0


async def test_nonce_carries_the_ssrc(endpoint: UdpEndpoint) -> None:
    channel = endpoint.open_channel("127.0.0.1", lambda _p: None)
    fields = channel.hello_fields("192.0.2.1", 1886)
    nonce = bytes.fromhex(str(fields["nonce"]))
    assert len(bytes.fromhex(str(fields["key"]))) == 16
    assert nonce[0] == 0x01
    assert int.from_bytes(nonce[4:8], "big") == channel.ssrc
    other = endpoint.open_channel("127.0.0.1", lambda _p: None)
    assert (other.ssrc, other.key) != (channel.ssrc, channel.key)


async def test_attacks_are_dropped(endpoint: UdpEndpoint) -> None:
    """Garbage, unknown ssrc, replays, a wrong key, a spoofed source, a flood."""
    channel, device, heard = await _open(endpoint)
    first, second = FRAMES[0], FRAMES[1]
    replay = device.channel.packet(first)
    device.channel.send_raw(replay)
    assert await asyncio.wait_for(heard.get(), 2) == first

    device.channel.send_raw(b"\x00garbage")  # too short, wrong type
    device.channel.send_raw(b"\x02" + bytes(40))  # wrong type
    long = bytearray(device.channel.packet(second))
    long[2:4] = (len(long)).to_bytes(2, "big")  # length does not match
    device.channel.send_raw(bytes(long))
    stranger = pack_packet(
        bytes(16), first, ssrc=channel.ssrc ^ 1, timestamp=0, sequence=9
    )
    device.channel.send_raw(stranger)  # unknown ssrc
    device.channel.send_raw(replay)  # the same sequence again
    # A wrong key decrypts to noise, which passes for a 60 ms Opus packet now
    # and then: pick a key whose noise does not, so the test is not a lottery.
    for attempt in range(256):
        wrong_key = pack_packet(
            bytes([attempt]) * 16, second, ssrc=channel.ssrc, timestamp=0, sequence=50
        )
        noise = udp.crypt(channel.key, wrong_key[:HEADER_SIZE], wrong_key[HEADER_SIZE:])
        if opus_duration_ms(noise) != 60:
            break
    device.channel.send_raw(wrong_key)  # decrypts to no Opus packet of 60 ms

    # Another host sending with the right ssrc and key: not the device.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as spoofer:
        spoofer.bind(("127.0.0.2", 0))
        assert endpoint.port is not None
        spoofer.sendto(device.channel.packet(second), ("127.0.0.1", endpoint.port))

    # Loopback keeps the order: once this one is heard, the rest was read.
    device.channel.send(second)
    assert await asyncio.wait_for(heard.get(), 2) == second
    assert heard.empty()
    assert endpoint.unknown == 4  # short, wrong type, wrong length, unknown ssrc
    assert channel.stats.dropped == {"sequence": 1, "not_opus": 1, "source": 1}


async def test_a_spoofer_on_the_devices_address_cannot_take_the_channel(
    endpoint: UdpEndpoint,
) -> None:
    """300 packets from another port of the device's IP: the device is heard.

    The spoofer sends garbage with sequences near 2^32, and packets as lucky
    as they could ever be (right key, plausible Opus, plausible sequences),
    before and between the device's. The device's audio all gets through in
    order, and replies go to the device.
    """
    channel, device, heard = await _open(endpoint)
    assert endpoint.port is not None
    target = ("127.0.0.1", endpoint.port)

    arrived = asyncio.Event()
    take = endpoint.datagram_received

    def datagram_received(data: bytes, addr: tuple[str | object, int]) -> None:
        take(data, addr)
        arrived.set()

    endpoint.datagram_received = datagram_received  # type: ignore[method-assign]

    async def spoof(packet: bytes) -> None:
        # One at a time, read before the next: loopback drops a burst.
        arrived.clear()
        spoofer.sendto(packet, target)
        await asyncio.wait_for(arrived.wait(), 2)

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as spoofer:
        spoofer.bind(("127.0.0.1", 0))
        for sequence in range(2**32 - 150, 2**32):  # raise the floor
            await spoof(
                pack_packet(
                    bytes(16),
                    FRAMES[0],
                    ssrc=channel.ssrc,
                    timestamp=0,
                    sequence=sequence,
                )
            )
        # Lucky: decrypts to 60 ms of Opus (random bytes do now and then, so
        # never many in a row).
        for sequence in range(1, 161, 2):
            await spoof(
                pack_packet(
                    channel.key,
                    FRAMES[1],
                    ssrc=channel.ssrc,
                    timestamp=0,
                    sequence=sequence,
                )
            )
        spoofed = [heard.get_nowait() for _ in range(80)]
        assert spoofed == [FRAMES[1]] * 80
        for packet in FRAMES + FRAMES + FRAMES:
            assert device.channel.send(packet)
        received = [
            await asyncio.wait_for(heard.get(), 2) for _ in range(3 * len(FRAMES))
        ]
    assert received == FRAMES + FRAMES + FRAMES
    assert channel.stats.dropped == {"sequence": 150}
    # The device's stream is consecutive: replies go to it.
    channel.send(FRAMES[0], timestamp=0)
    assert await asyncio.wait_for(device.received.get(), 2) == FRAMES[0]


def test_flood_is_rate_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst beyond the bucket is dropped; tokens come back with time."""
    monkeypatch.setattr(udp, "BURST", 10.0)
    clock = [100.0]
    monkeypatch.setattr(udp.time, "monotonic", lambda: clock[0])
    heard: list[bytes] = []
    endpoint = UdpEndpoint()
    channel = endpoint.open_channel("127.0.0.1", heard.append, 60.0)
    sequence = 0

    def send(count: int) -> None:
        nonlocal sequence
        for _ in range(count):
            sequence += 1
            packet = pack_packet(
                channel.key,
                FRAMES[0],
                ssrc=channel.ssrc,
                timestamp=0,
                sequence=sequence,
            )
            header = parse_header(packet)
            assert header is not None
            channel.receive(packet, header, ("127.0.0.1", 5000))

    send(30)
    assert len(heard) == 10
    assert channel.stats.dropped == {"rate": 20}
    clock[0] += 0.051  # 5 packets' worth at 100 a second
    send(10)
    assert len(heard) == 15


async def test_sending_needs_an_address_and_an_open_channel(
    endpoint: UdpEndpoint,
) -> None:
    channel = endpoint.open_channel("127.0.0.1", lambda _p: None)
    with pytest.raises(ConnectionError, match="no audio yet"):
        channel.send(FRAMES[0], 0)
    channel.address = ("127.0.0.1", 9)
    with pytest.raises(ValueError, match="too large"):
        channel.send(bytes(2000), 0)
    channel.close()
    with pytest.raises(ConnectionError, match="closed"):
        channel.send(FRAMES[0], 0)
    endpoint.stop()
    other = endpoint.open_channel("127.0.0.1", lambda _p: None)
    other.address = ("127.0.0.1", 9)
    with pytest.raises(ConnectionError, match="stopped"):
        other.send(FRAMES[0], 0)


def test_header_parsing() -> None:
    packet = pack_packet(bytes(16), b"abc", ssrc=7, timestamp=60, sequence=3)
    header = parse_header(packet)
    assert header is not None
    assert (header.length, header.ssrc, header.timestamp, header.sequence) == (
        3,
        7,
        60,
        3,
    )
    assert parse_header(packet[:-1]) is None
    assert parse_header(b"\x01" + packet[1 : HEADER.size]) is None  # length 3, no body


@pytest.mark.parametrize(
    ("packet", "duration"),
    [
        (bytes([11 << 3]) + bytes(20), 60.0),  # SILK WB 60 ms, one frame
        (bytes([(12 << 3) | 1]) + bytes(20), 20.0),  # hybrid 10 ms, two equal
        (bytes([(12 << 3) | 1]) + bytes(21), None),  # two equal frames, odd bytes
        (bytes([(28 << 3) | 2, 5]) + bytes(8), 5.0),  # CELT 2.5 ms, two frames
        (bytes([(28 << 3) | 2, 252, 1]) + bytes(300), 5.0),  # two-byte length
        (bytes([(28 << 3) | 2, 252]), None),  # length cut short
        (bytes([(28 << 3) | 2, 9]) + bytes(3), None),  # first frame too long
        (bytes([(28 << 3) | 2]), None),  # no length at all
        (bytes([(31 << 3) | 3, 3]) + bytes(30), 60.0),  # CELT 20 ms x 3
        (bytes([(31 << 3) | 3, 7]) + bytes(30), None),  # 140 ms: too long
        (bytes([(31 << 3) | 3, 0]), None),  # no frames
        (bytes([(31 << 3) | 3]), None),  # count missing
        (bytes([11 << 3]) + bytes(1276), None),  # frame over 1275 bytes
        (b"", None),
    ],
)
def test_opus_duration(packet: bytes, duration: float | None) -> None:
    assert opus_duration_ms(packet) == duration


def test_every_microphone_frame_is_sixty_ms() -> None:
    assert {opus_duration_ms(frame) for frame in FRAMES} == {60.0}
