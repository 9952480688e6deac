"""MQTT and UDP under hostile input: fuzzed packets, floods of refused logins.

The MQTT reader either returns packets or raises MqttError, whatever the
bytes and however they are split; every packet it returns encodes back to
itself; the UDP channel never passes on what it cannot authenticate by its
checks; and thousands of refused logins leave the endpoint's memory flat.
"""

import asyncio
import contextlib
import gc
import tracemalloc

from hypothesis import given, strategies as st
import pytest

from aioxiaozhi.mqtt.packets import (
    Connect,
    MqttError,
    Packet,
    PacketReader,
    Publish,
    encode_connect,
    encode_publish,
)
from aioxiaozhi.mqtt.server import MqttServer
from aioxiaozhi.mqtt.udp import (
    UdpEndpoint,
    opus_duration_ms,
    parse_header,
)
from tests.library.test_mqtt import Authenticator

pytestmark = pytest.mark.slow

topics = st.text(
    alphabet=st.characters(blacklist_characters="\x00+#", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=40,
)


def _feed_all(data: bytes, cuts: list[int]) -> list[Packet]:
    reader = PacketReader(4096)
    packets: list[Packet] = []
    start = 0
    for cut in [*sorted({min(c, len(data)) for c in cuts}), len(data)]:
        packets += reader.feed(data[start:cut])
        start = cut
    return packets


@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=8))
def test_reader_returns_packets_or_refuses(data: bytes, cuts: list[int]) -> None:
    with contextlib.suppress(MqttError):
        _feed_all(data, cuts)


@given(
    topic=topics,
    payload=st.binary(max_size=300),
    qos=st.sampled_from([0, 1, 2]),
    packet_id=st.integers(1, 0xFFFF),
    retain=st.booleans(),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
def test_publish_round_trip(
    topic: str,
    payload: bytes,
    qos: int,
    packet_id: int,
    retain: bool,
    cuts: list[int],
) -> None:
    data = encode_publish(
        topic, payload, qos=qos, packet_id=packet_id if qos else None, retain=retain
    )
    (packet,) = _feed_all(data, cuts)
    assert packet == Publish(
        topic=topic,
        payload=payload,
        qos=qos,
        packet_id=packet_id if qos else None,
        retain=retain,
    )


@given(
    client_id=st.text(max_size=30).filter(lambda t: "\x00" not in t),
    username=st.none() | st.text(max_size=30).filter(lambda t: "\x00" not in t),
    password=st.none() | st.binary(max_size=40),
    keepalive=st.integers(0, 0xFFFF),
)
def test_connect_round_trip(
    client_id: str, username: str | None, password: bytes | None, keepalive: int
) -> None:
    if password is not None and username is None:
        username = "u"  # MQTT 3.1.1: no password without a user name
    connect = Connect(
        client_id=client_id, username=username, password=password, keepalive=keepalive
    )
    (packet,) = PacketReader(4096).feed(encode_connect(connect))
    assert packet == connect


@given(data=st.binary(max_size=120))
def test_udp_packets_are_checked_not_trusted(data: bytes) -> None:
    """Random datagrams to a channel's ssrc are dropped or decrypt to Opus."""
    heard: list[bytes] = []
    endpoint = UdpEndpoint()
    channel = endpoint.open_channel(
        "127.0.0.1", lambda payload, _heard: heard.append(payload), 60.0
    )
    header = parse_header(data)
    if header is None:
        return
    channel.receive(data, header, ("127.0.0.1", 5000))
    for payload in heard:
        assert opus_duration_ms(payload) == 60.0 or not payload


class CountingAuthenticator(Authenticator):
    """Counts refusals without keeping them."""

    def __init__(self) -> None:
        super().__init__()
        self.refused_count = 0

    def refused(self, peer: str, connect: Connect, code: object) -> None:
        self.refused_count += 1


async def test_refused_login_flood_keeps_memory_flat(socket_enabled: None) -> None:
    """2 000 refused CONNECTs: nothing of them is kept.

    64 KiB over 2 000 connections is 32 bytes each: less than any record of a
    connection would take, so a leak shows while the test stays short.
    """
    auth = CountingAuthenticator()
    server = MqttServer(auth)
    await server.start("127.0.0.1", 0)
    bad = encode_connect(Connect(client_id="dev", username="u", password=b"wrong"))

    async def refused(count: int) -> None:
        for _ in range(count):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(bad)
            assert await reader.read(4) == bytes([0x20, 0x02, 0x00, 0x04])
            await reader.read()  # the server closes
            writer.close()
            await writer.wait_closed()

    try:
        await asyncio.gather(*(refused(50) for _ in range(4)))  # warm up
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        await asyncio.gather(*(refused(500) for _ in range(4)))
        await asyncio.sleep(0)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert server.connections == 0
        assert auth.refused_count == 2200
        # A few KiB of allocator noise at most, not 2 000 connections' worth.
        assert grown < 64 * 1024, grown
    finally:
        await server.stop()
