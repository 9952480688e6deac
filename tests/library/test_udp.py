"""The UDP audio endpoint over real sockets: the firmware's packets, and attacks.

The device side is the simulator's own implementation of the firmware's
scheme (``simulator/mqtt.py``), so both ends are checked against each other.
"""

import asyncio
from collections.abc import AsyncIterator
import socket
import time

import pytest

from aioxiaozhi import NoAudioAddressError
from aioxiaozhi.audio.preroll import Heard
from aioxiaozhi.mqtt import udp
from aioxiaozhi.mqtt.udp import (
    HEADER,
    HEADER_SIZE,
    AudioChannel,
    UdpEndpoint,
    opus_duration_ms,
    pack_packet,
    parse_header,
)
from aioxiaozhi.testing.mqtt import DeviceUdpChannel, UdpRecord, parse_udp
from aioxiaozhi.testing.voice import MicEncoder, silence, tone

from .kernel import kernel_receive_times

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
    channel = endpoint.open_channel(
        "127.0.0.1", lambda payload, _heard: heard.put_nowait(payload), frame_ms
    )
    return channel, await _device(endpoint, channel), heard


async def _device(endpoint: UdpEndpoint, channel: AudioChannel) -> Device:
    """Return the device's side of ``channel``, open."""
    assert endpoint.port is not None
    device = Device(channel.hello_fields("127.0.0.1", endpoint.port))
    await device.channel.open()
    return device


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


async def test_each_packet_comes_with_its_sequence_and_kernel_time(
    endpoint: UdpEndpoint,
) -> None:
    """What the wire says: the device's sequence, the kernel's receive time.

    The time is when the kernel got the datagram, not when the event loop
    read it: a loop held up for a while reads it late, on time.
    """
    heard: asyncio.Queue[tuple[bytes, Heard]] = asyncio.Queue()
    channel = endpoint.open_channel(
        "127.0.0.1", lambda payload, when: heard.put_nowait((payload, when)), 60.0
    )
    device = await _device(endpoint, channel)
    with kernel_receive_times():
        sent_at = time.time()
        for packet in FRAMES[:3]:
            assert device.channel.send(packet)
        # The event loop is held up: the datagrams wait in the kernel.
        time.sleep(0.2)  # noqa: ASYNC251
        got = [await asyncio.wait_for(heard.get(), 2) for _ in range(3)]
    assert [payload for payload, _ in got] == FRAMES[:3]
    assert [when.sequence for _, when in got] == [1, 2, 3]
    for _, when in got:
        assert sent_at - 0.01 <= when.received < sent_at + 0.1
    device.channel.close()
    channel.close()


async def test_nonce_carries_the_ssrc(endpoint: UdpEndpoint) -> None:
    channel = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
    fields = channel.hello_fields("192.0.2.1", 1886)
    nonce = bytes.fromhex(str(fields["nonce"]))
    assert len(bytes.fromhex(str(fields["key"]))) == 16
    assert nonce[0] == 0x01
    assert int.from_bytes(nonce[4:8], "big") == channel.ssrc
    other = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
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


class _Spoofer:
    """Another program on the device's IP, sending one packet at a time."""

    def __init__(self, endpoint: UdpEndpoint, channel: AudioChannel) -> None:
        assert endpoint.port is not None
        self.target = ("127.0.0.1", endpoint.port)
        self.channel = channel
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.arrived = asyncio.Event()
        take = endpoint.datagram_received

        def datagram_received(
            data: bytes, addr: tuple[str | object, int], received: float | None = None
        ) -> None:
            take(data, addr, received)
            self.arrived.set()

        endpoint.datagram_received = datagram_received  # type: ignore[method-assign]

    async def send(self, packet: bytes) -> None:
        # One at a time, read before the next: loopback drops a burst.
        self.arrived.clear()
        self.socket.sendto(packet, self.target)
        await asyncio.wait_for(self.arrived.wait(), 2)

    def lucky(self, sequence: int) -> bytes:
        """Return a packet that decrypts to Opus, as random bytes now and then do."""
        return pack_packet(
            self.channel.key,
            FRAMES[1],
            ssrc=self.channel.ssrc,
            timestamp=0,
            sequence=sequence,
        )

    def garbage(self, sequence: int, payload: bytes = FRAMES[0]) -> bytes:
        return pack_packet(
            bytes(16), payload, ssrc=self.channel.ssrc, timestamp=0, sequence=sequence
        )


async def test_a_spoofer_on_the_devices_address_is_neither_heard_nor_answered(
    endpoint: UdpEndpoint,
) -> None:
    """Another port of the device's IP, while the device streams.

    Sequences near 2^32, runs of four packets that decrypt to Opus (five in a
    row do not happen by chance), empty packets in a row, and a replay of the
    device's own packets: the device's audio all gets through in order, none
    of the spoofer's does, and replies go to the device.
    """
    channel, device, heard = await _open(endpoint)
    spoofer = _Spoofer(endpoint, channel)
    captured = [device.channel.packet(frame) for frame in FRAMES]
    for packet in captured:
        device.channel.send_raw(packet)
    assert [await asyncio.wait_for(heard.get(), 2) for _ in FRAMES] == FRAMES
    try:
        for sequence in range(2**32 - 50, 2**32):  # raise the floor
            await spoofer.send(spoofer.garbage(sequence))
        sequence = len(FRAMES)
        for _ in range(10):
            for _ in range(4):
                sequence += 1
                await spoofer.send(spoofer.lucky(sequence))
            sequence += 1
            await spoofer.send(spoofer.garbage(sequence))  # noise breaks the run
        for _ in range(10):
            sequence += 1
            await spoofer.send(spoofer.garbage(sequence, b""))  # empty
        for packet in captured:
            await spoofer.send(packet)  # a replay from another port
        assert heard.empty()
        for packet in FRAMES:
            assert device.channel.send(packet)
        received = [await asyncio.wait_for(heard.get(), 2) for _ in FRAMES]
    finally:
        spoofer.socket.close()
    assert received == FRAMES
    assert channel.stats.dropped["sequence"] >= 50 + len(captured)
    assert channel.stats.dropped["not_reply_port"] >= 40 + 10
    channel.send(FRAMES[0], timestamp=0)
    assert await asyncio.wait_for(device.received.get(), 2) == FRAMES[0]


async def test_the_device_takes_its_audio_back_from_a_spoofer_that_came_first(
    endpoint: UdpEndpoint,
) -> None:
    """A lucky packet before the device's first pins a port; the device's run wins.

    Its first frames prove the run (they are not passed on); then its audio
    is heard and replies go to it.
    """
    channel, device, heard = await _open(endpoint)
    spoofer = _Spoofer(endpoint, channel)
    try:
        await spoofer.send(spoofer.lucky(1))
        assert await asyncio.wait_for(heard.get(), 2) == FRAMES[1]
        device.channel.local_sequence = 1
        for packet in FRAMES:
            assert device.channel.send(packet)
        run = 5  # RUN_TO_MOVE
        received = [await asyncio.wait_for(heard.get(), 2) for _ in FRAMES[run - 1 :]]
    finally:
        spoofer.socket.close()
    assert received == FRAMES[run - 1 :]
    channel.send(FRAMES[0], timestamp=0)
    assert await asyncio.wait_for(device.received.get(), 2) == FRAMES[0]


def test_flood_is_rate_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst beyond the bucket is dropped; tokens come back with time."""
    monkeypatch.setattr(udp, "BURST", 10.0)
    clock = [100.0]
    monkeypatch.setattr(udp.time, "monotonic", lambda: clock[0])
    heard: list[bytes] = []
    endpoint = UdpEndpoint()
    channel = endpoint.open_channel(
        "127.0.0.1", lambda payload, _heard: heard.append(payload), 60.0
    )
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
    channel = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
    with pytest.raises(NoAudioAddressError, match="its UDP port is unknown"):
        channel.send(FRAMES[0], 0)
    channel.address = ("127.0.0.1", 9)
    with pytest.raises(ValueError, match="too large"):
        channel.send(bytes(2000), 0)
    channel.close()
    with pytest.raises(ConnectionError, match="closed"):
        channel.send(FRAMES[0], 0)
    endpoint.stop()
    other = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
    other.address = ("127.0.0.1", 9)
    with pytest.raises(ConnectionError, match="stopped"):
        other.send(FRAMES[0], 0)


async def test_the_first_packet_waits_for_the_devices_first_audio(
    endpoint: UdpEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device's address comes with its first audio: a reply waits for it.

    Once; a channel that waited in vain fails at once, and a closed channel
    lets its waiting sender go.
    """
    monkeypatch.setattr(udp, "FIRST_AUDIO_WAIT", 5.0)
    channel, device, _heard = await _open(endpoint)
    reply = asyncio.create_task(channel.send_when_heard(FRAMES[0], 0))
    await asyncio.sleep(0)
    assert not reply.done()
    assert device.channel.send(FRAMES[1])
    await asyncio.wait_for(reply, 2)
    assert await asyncio.wait_for(device.received.get(), 2) == FRAMES[0]
    device.channel.close()

    monkeypatch.setattr(udp, "FIRST_AUDIO_WAIT", 0.01)
    silent = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
    with pytest.raises(NoAudioAddressError):
        await silent.send_when_heard(FRAMES[0], 0)
    monkeypatch.setattr(udp, "FIRST_AUDIO_WAIT", 5.0)
    with pytest.raises(NoAudioAddressError):  # at once: it waited already
        await asyncio.wait_for(silent.send_when_heard(FRAMES[0], 0), 1)

    closing = endpoint.open_channel("127.0.0.1", lambda _p, _h: None)
    waiting = asyncio.create_task(closing.send_when_heard(FRAMES[0], 0))
    await asyncio.sleep(0)
    closing.close()
    with pytest.raises(ConnectionError, match="closed"):
        await asyncio.wait_for(waiting, 1)


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


async def test_a_burst_is_read_in_one_pass(endpoint: UdpEndpoint) -> None:
    """What waits on the socket is read at once, not a datagram per loop pass.

    Two seconds of pre-roll from several devices come together; read one by
    one they would fall behind their devices' MQTT messages.
    """
    assert endpoint.port is not None
    stray = HEADER.pack(udp.PACKET_TYPE, 0, 4, 0x1234, 0, 1) + b"opus"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for _ in range(udp.READ_BATCH):
            sender.sendto(stray, ("127.0.0.1", endpoint.port))
    for _ in range(2):  # the pass that reads, and the one that resumes here
        await asyncio.sleep(0)
    assert endpoint.unknown == udp.READ_BATCH


async def test_a_stopped_endpoint_sends_and_reads_nothing(
    endpoint: UdpEndpoint,
) -> None:
    endpoint.stop()
    assert endpoint.port is None
    endpoint._read_ready()  # a pass already scheduled finds no socket
    with pytest.raises(ConnectionError):
        endpoint.sendto(b"x", ("127.0.0.1", 9))
    endpoint.stop()  # twice: nothing happens


async def test_a_port_in_use_is_refused(endpoint: UdpEndpoint) -> None:
    other = UdpEndpoint()
    assert endpoint.port is not None
    with pytest.raises(OSError, match="in use"):
        await other.start("127.0.0.1", endpoint.port)
    assert other.port is None
