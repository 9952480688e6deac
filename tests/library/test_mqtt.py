"""The MQTT 3.1.1 codec and the device endpoint, against well-kept clients.

paho-mqtt (Home Assistant's own MQTT client) and aiomqtt talk to the
endpoint over real TCP on loopback: what they accept is what the
specification says. The codec's own checks come from the specification's
numbered rules.
"""

import asyncio
from collections.abc import AsyncIterator
import contextlib
import socket
import threading
from typing import Any

import aiomqtt
from paho.mqtt import client as paho
from paho.mqtt.enums import CallbackAPIVersion
import pytest

from aioxiaozhi.mqtt import server as mqtt_server
from aioxiaozhi.mqtt.packets import (
    DISCONNECT,
    PINGREQ,
    PINGRESP,
    ConnAck,
    Connect,
    ConnectReturn,
    Empty,
    MqttError,
    PacketIdOnly,
    PacketReader,
    PacketTooLargeError,
    PacketType,
    Publish,
    SubAck,
    Subscribe,
    Unsubscribe,
    decode_packet,
    encode_connack,
    encode_connect,
    encode_packet_id,
    encode_publish,
    encode_suback,
    encode_subscribe,
    encode_unsubscribe,
)
from aioxiaozhi.mqtt.server import MqttConnection, MqttServer

PASSWORD = "secret-token"


def _reader(max_packet: int = 1024) -> PacketReader:
    return PacketReader(max_packet)


# ------------------------------------------------------------------ codec


@pytest.mark.parametrize(
    "connect",
    [
        Connect(client_id="c", username="u", password=b"p", keepalive=240),
        Connect(client_id="", clean_session=True, keepalive=0),
        Connect(
            client_id="dev",
            will_topic="w",
            will_message=b"gone",
            will_qos=1,
            will_retain=True,
        ),
        Connect(protocol_name="MQIsdp", protocol_level=3, client_id="old"),
    ],
)
def test_connect_round_trip(connect: Connect) -> None:
    (packet,) = _reader().feed(encode_connect(connect))
    assert packet == connect


def test_connect_repr_hides_the_password() -> None:
    text = repr(Connect(client_id="c", username="u", password=b"hunter2"))
    assert "hunter2" not in text
    assert "'c'" in text


@pytest.mark.parametrize(
    "data",
    [
        encode_publish("a/b", b"x"),
        encode_publish("a/b", b"x" * 300, qos=1, packet_id=7, retain=True),
        encode_publish("a", b"", qos=2, packet_id=1, dup=True),
        encode_packet_id(PacketType.PUBACK, 3),
        encode_packet_id(PacketType.PUBREL, 3),
        encode_packet_id(PacketType.UNSUBACK, 9),
        encode_subscribe(5, [("a/#", 0), ("b/+", 2)]),
        encode_suback(5, [0x80, 1]),
        encode_unsubscribe(6, ["a/#"]),
        encode_connack(ConnectReturn.BAD_CREDENTIALS),
        encode_connack(0, session_present=True),
        PINGREQ,
        PINGRESP,
        DISCONNECT,
    ],
)
def test_packets_survive_any_split(data: bytes) -> None:
    """Bytes may arrive one at a time: the same packet comes out."""
    (whole,) = _reader(100_000).feed(data)
    reader = _reader(100_000)
    packets = [packet for byte in data for packet in reader.feed(bytes([byte]))]
    assert packets == [whole]
    assert reader.buffered == 0


def test_decoded_fields() -> None:
    reader = _reader(100_000)
    publish, puback, subscribe, suback, unsubscribe, connack, ping = reader.feed(
        encode_publish("t", b"hi", qos=1, packet_id=7)
        + encode_packet_id(PacketType.PUBACK, 7)
        + encode_subscribe(5, [("a/#", 1)])
        + encode_suback(5, [0x80])
        + encode_unsubscribe(6, ["a/#"])
        + encode_connack(5)
        + PINGREQ
    )
    assert publish == Publish(topic="t", payload=b"hi", qos=1, packet_id=7)
    assert puback == PacketIdOnly(PacketType.PUBACK, 7)
    assert subscribe == Subscribe(5, (("a/#", 1),))
    assert suback == SubAck(5, (0x80,))
    assert unsubscribe == Unsubscribe(6, ("a/#",))
    assert connack == ConnAck(code=5)
    assert ping == Empty(PacketType.PINGREQ)


def test_large_remaining_length() -> None:
    payload = b"x" * 20_000  # three length bytes
    (packet,) = _reader(100_000).feed(encode_publish("t", payload))
    assert isinstance(packet, Publish)
    assert packet.payload == payload


def _connect_bytes(flags: int, payload: bytes, name: bytes = b"\x00\x04MQTT") -> bytes:
    body = name + bytes([4, flags]) + b"\x00\x3c" + payload
    return bytes([0x10, len(body)]) + body


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (bytes([0x00, 0x00]), "reserved packet type 0"),
        (bytes([0xF0, 0x00]), "reserved packet type 15"),
        (bytes([0xC1, 0x00]), "bad fixed header flags"),  # PINGREQ flags
        (bytes([0x80, 0x05, 0, 1, 0, 1, 0x61]), "bad fixed header flags"),  # SUBSCRIBE
        (bytes([0x36, 0x04, 0, 1, 0x61, 0]), "QoS 3"),
        (bytes([0x38, 0x03, 0, 1, 0x61]), "DUP flag on a QoS 0"),
        (bytes([0x30, 0x04, 0, 2, 0x61, 0x23]), "wildcards"),
        (bytes([0x30, 0x02, 0, 0]), "empty or has wildcards"),
        (bytes([0x32, 0x05, 0, 1, 0x61, 0, 0]), "packet identifier 0"),
        (bytes([0x30, 0x03, 0, 2, 0x61]), "ends early"),
        (bytes([0x30, 0x05, 0, 2, 0xC3, 0x28, 0x00]), "not valid UTF-8"),
        (bytes([0x30, 0x04, 0, 2, 0x61, 0x00]), r"U\+0000"),
        (bytes([0xC0, 0x01, 0x00]), "unexpected bytes"),
        (bytes([0x82, 0x02, 0, 1]), "without topic filters"),
        (bytes([0x82, 0x06, 0, 1, 0, 1, 0x61, 3]), "bad requested QoS"),
        (bytes([0xA2, 0x02, 0, 1]), "without topic filters"),
        (bytes([0x20, 0x02, 0x02, 0x00]), "reserved CONNACK flags"),
        (bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF]), "longer than four bytes"),
        (_connect_bytes(0x03, b"\x00\x01c"), "reserved CONNECT flag"),
        (_connect_bytes(0x12, b"\x00\x01c"), "will QoS or retain without a will"),
        (_connect_bytes(0x1E, b"\x00\x01c"), "will QoS 3"),
        (_connect_bytes(0x42, b"\x00\x01c\x00\x01p"), "password without user name"),
        (_connect_bytes(0x02, b"\x00\x01c", b"\x00\x04MQTX"), "unknown protocol"),
    ],
)
def test_malformed_packets(data: bytes, message: str) -> None:
    with pytest.raises(MqttError, match=message):
        list(_reader(100_000).feed(data))


def test_size_limit_is_checked_before_the_bytes_arrive() -> None:
    reader = _reader(100)
    with pytest.raises(PacketTooLargeError):
        list(reader.feed(bytes([0x30, 0xE8, 0x07])))  # announces 1000 bytes
    assert reader.buffered == 3


def test_unsupported_level_is_decoded_for_the_connack() -> None:
    (packet,) = _reader().feed(encode_connect(Connect(client_id="c", protocol_level=5)))
    assert isinstance(packet, Connect)
    assert not packet.supported


def test_encoders_refuse_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="packet identifier"):
        encode_publish("t", b"", qos=1)
    with pytest.raises(ValueError, match="65535"):
        encode_connect(Connect(client_id="c" * 70_000))
    with pytest.raises(ValueError, match="out of range"):
        encode_publish("t", b"x" * 268_435_456)


def test_decode_packet_of_a_publish_topic_and_payload() -> None:
    packet = decode_packet(0x30, b"\x00\x01ahello")
    assert packet == Publish(topic="a", payload=b"hello")


# ------------------------------------------------------------------ endpoint


class Device:
    """What the endpoint hands a logged-in client to."""

    def __init__(self, connection: MqttConnection, identity: str) -> None:
        self.connection = connection
        self.identity = identity
        self.messages: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.closed = asyncio.Event()

    def mqtt_message(self, topic: str, payload: bytes) -> None:
        self.messages.put_nowait((topic, payload))

    def mqtt_closed(self) -> None:
        self.closed.set()


class Authenticator:
    """Lets in the client with the right password; records the rest."""

    def __init__(self) -> None:
        self.devices: list[Device] = []
        self.refusals: list[tuple[str, ConnectReturn]] = []
        self.banned: set[str] = set()
        self.identities: dict[str, str] = {}  # client id -> who it is
        self.logged_in = asyncio.Event()

    def allowed(self, peer: str) -> bool:
        return peer not in self.banned

    def authenticate(
        self, connection: MqttConnection, connect: Connect
    ) -> Device | ConnectReturn:
        if connect.password != PASSWORD.encode():
            return ConnectReturn.BAD_CREDENTIALS
        if connect.client_id == "disabled":
            return ConnectReturn.NOT_AUTHORIZED
        device = Device(
            connection, self.identities.get(connect.client_id, connect.client_id)
        )
        self.devices.append(device)
        self.logged_in.set()
        return device

    def refused(self, peer: str, connect: Connect, code: ConnectReturn) -> None:
        self.refusals.append((connect.client_id, code))


type Endpoint = tuple[MqttServer, Authenticator]


@pytest.fixture
async def endpoint(
    socket_enabled: None,
) -> AsyncIterator[Endpoint]:
    auth = Authenticator()
    server = MqttServer(auth, max_packet=4096)
    await server.start("127.0.0.1", 0)
    yield server, auth
    await server.stop()


async def _raw(server: MqttServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def _login(
    server: MqttServer, client_id: str = "dev", password: str = PASSWORD
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await _raw(server)
    writer.write(
        encode_connect(
            Connect(client_id=client_id, username="u", password=password.encode())
        )
    )
    return reader, writer, await reader.readexactly(4)


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Return True once the server closed the connection."""
    async with asyncio.timeout(5):
        while await reader.read(4096):
            pass
    return True


async def test_aiomqtt_publishes_and_receives(
    endpoint: Endpoint,
) -> None:
    """aiomqtt logs in, publishes at QoS 0 and 1, and gets what we send."""
    server, auth = endpoint
    async with aiomqtt.Client(
        "127.0.0.1",
        server.port,
        identifier="dev",
        username="aa:bb",
        password=PASSWORD,
        keepalive=30,
    ) as client:
        await auth.logged_in.wait()
        (device,) = auth.devices
        await client.publish("up", b'{"type":"hello"}', qos=0)
        await client.publish("up", b"qos1", qos=1)  # returns once PUBACKed
        assert await device.messages.get() == ("up", b'{"type":"hello"}')
        assert await device.messages.get() == ("up", b"qos1")
        # Never subscribed: the message reaches the connection anyway.
        device.connection.publish("down", b'{"type":"alert"}')
        async with asyncio.timeout(5):
            message = await anext(aiter(client.messages))
        assert message.payload == b'{"type":"alert"}'
        assert str(message.topic) == "down"
    await asyncio.wait_for(device.closed.wait(), 5)
    assert server.connections == 0


async def test_aiomqtt_subscribe_is_refused(
    endpoint: Endpoint,
) -> None:
    server, _auth = endpoint
    async with aiomqtt.Client(
        "127.0.0.1", server.port, identifier="dev", password=PASSWORD, username="u"
    ) as client:
        granted = await client.subscribe("xiaozhi/#")
        assert [getattr(code, "value", code) for code in granted] == [0x80]
        await client.unsubscribe("xiaozhi/#")  # answered, nothing to undo


async def test_aiomqtt_refused_login(
    endpoint: Endpoint,
) -> None:
    server, auth = endpoint
    with pytest.raises(aiomqtt.MqttCodeError) as err:
        async with aiomqtt.Client(
            "127.0.0.1", server.port, identifier="x", username="u", password="wrong"
        ):
            pass  # pragma: no cover
    assert "Bad user name or password" in str(err.value) or "4" in str(err.value)
    assert auth.refusals == [("x", ConnectReturn.BAD_CREDENTIALS)]
    assert not auth.devices


async def test_paho_client_round_trip(
    endpoint: Endpoint,
) -> None:
    """paho-mqtt, Home Assistant's MQTT client, in its own thread."""
    server, auth = endpoint
    connected = threading.Event()
    acked = threading.Event()
    received: list[bytes] = []
    got = threading.Event()
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="paho")
    client.username_pw_set("aa:bb", PASSWORD)
    codes: list[Any] = []

    def on_connect(
        _client: Any, _data: Any, _flags: Any, reason: Any, _props: Any
    ) -> None:
        codes.append(reason)
        connected.set()

    def on_message(_client: Any, _data: Any, message: Any) -> None:
        received.append(message.payload)
        got.set()

    client.on_connect = on_connect
    client.on_publish = lambda *_args: acked.set()
    client.on_message = on_message
    client.connect("127.0.0.1", server.port, keepalive=5)
    client.loop_start()
    try:
        assert await asyncio.to_thread(connected.wait, 5)
        assert not codes[0].is_failure
        await auth.logged_in.wait()
        (device,) = auth.devices
        client.publish("up", b"from paho", qos=1)
        assert await asyncio.to_thread(acked.wait, 5)
        assert await device.messages.get() == ("up", b"from paho")
        device.connection.publish("down", b"to paho")
        assert await asyncio.to_thread(got.wait, 5)
        assert received == [b"to paho"]
    finally:
        client.disconnect()
        client.loop_stop()
    await asyncio.wait_for(device.closed.wait(), 5)


async def test_raw_protocol_rules(endpoint: Endpoint) -> None:
    server, auth = endpoint
    # Anything before CONNECT closes the connection.
    reader, writer = await _raw(server)
    writer.write(PINGREQ)
    assert await _closed(reader)
    writer.close()

    # A second CONNECT closes it; PINGREQ is answered on the way.
    reader, writer, connack = await _login(server)
    assert connack == encode_connack(ConnectReturn.ACCEPTED)
    writer.write(PINGREQ)
    assert await reader.readexactly(2) == PINGRESP
    writer.write(encode_connect(Connect(client_id="dev", password=b"x")))
    assert await _closed(reader)
    await auth.devices[0].closed.wait()
    writer.close()

    # An unsupported protocol level gets 0x01 and nothing is asked.
    reader, writer = await _raw(server)
    writer.write(encode_connect(Connect(client_id="v5", protocol_level=5)))
    assert await reader.readexactly(4) == encode_connack(
        ConnectReturn.UNACCEPTABLE_PROTOCOL
    )
    assert await _closed(reader)
    writer.close()

    # QoS 2 is not taken; DISCONNECT closes cleanly.
    reader, writer, _ = await _login(server)
    writer.write(encode_publish("up", b"x", qos=2, packet_id=1))
    assert await _closed(reader)
    writer.close()
    reader, writer, _ = await _login(server)
    writer.write(DISCONNECT)
    assert await _closed(reader)
    writer.close()


async def test_refusals_change_nothing(
    endpoint: Endpoint,
) -> None:
    """A wrong login with a device's client id does not touch the device."""
    server, auth = endpoint
    _reader, writer, _ = await _login(server, "dev")
    (device,) = auth.devices
    bad_reader, bad_writer, connack = await _login(server, "dev", "wrong")
    assert connack == encode_connack(ConnectReturn.BAD_CREDENTIALS)
    assert await _closed(bad_reader)
    bad_writer.close()
    _, _, connack = await _login(server, "disabled")
    assert connack == encode_connack(ConnectReturn.NOT_AUTHORIZED)
    writer.write(encode_publish("up", b"still here"))
    assert await device.messages.get() == ("up", b"still here")
    assert not device.closed.is_set()
    assert [code for _id, code in auth.refusals] == [
        ConnectReturn.BAD_CREDENTIALS,
        ConnectReturn.NOT_AUTHORIZED,
    ]
    writer.close()


async def test_takeover_closes_the_old_connection(
    endpoint: Endpoint,
) -> None:
    server, auth = endpoint
    old_reader, old_writer, _ = await _login(server, "dev")
    _reader2, writer, _ = await _login(server, "dev")
    assert await _closed(old_reader)
    await auth.devices[0].closed.wait()
    assert not auth.devices[1].closed.is_set()
    auth.devices[1].connection.close()
    await auth.devices[1].closed.wait()
    old_writer.close()
    writer.close()


async def test_takeover_follows_who_logged_in_not_the_client_id(
    endpoint: Endpoint,
) -> None:
    """The authenticator says who a login is; its client id proves nothing."""
    server, auth = endpoint
    auth.identities.update({"dev": "kitchen", "other": "kitchen"})
    old_reader, old_writer, _ = await _login(server, "dev")
    _reader, writer, _ = await _login(server, "other")
    assert await _closed(old_reader)
    _reader3, writer3, _ = await _login(server, "third")
    assert not auth.devices[1].closed.is_set()
    for w in (old_writer, writer, writer3):
        w.close()


async def test_empty_client_id_is_rejected(endpoint: Endpoint) -> None:
    server, auth = endpoint
    reader, writer, connack = await _login(server, "")
    assert connack == encode_connack(ConnectReturn.IDENTIFIER_REJECTED)
    assert await _closed(reader)
    assert not auth.devices
    writer.close()


async def test_only_a_small_connect_before_login(socket_enabled: None) -> None:
    """A big packet is refused until the login; then the full limit applies."""
    auth = Authenticator()
    server = MqttServer(auth, max_packet=100_000)
    await server.start("127.0.0.1", 0)
    try:
        reader, writer = await _raw(server)
        writer.write(bytes([0x10, 0x88, 0x27]))  # a CONNECT of 5000 bytes
        assert await _closed(reader)
        writer.close()
        _reader, writer, _ = await _login(server)
        writer.write(encode_publish("up", b"x" * 5000))
        (device,) = auth.devices
        assert await device.messages.get() == ("up", b"x" * 5000)
        writer.close()
    finally:
        await server.stop()


def test_reader_cuts_packets_only_when_asked() -> None:
    """A connection closed by its first packet decodes none of the rest."""
    reader = _reader()
    packets = reader.feed(PINGRESP * 1000)
    assert next(packets) == Empty(PacketType.PINGRESP)
    assert reader.buffered == 2 * 999


async def test_waiting_logins_are_capped_per_address(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections that never log in cannot crowd out a device."""
    server, auth = endpoint
    monkeypatch.setattr(mqtt_server, "MAX_PENDING_PER_ADDRESS", 2)
    _waiting_reader, waiting = await _raw(server)
    # A device logs in: once in, it no longer counts as waiting.
    _r, device, connack = await _login(server, "dev")
    assert connack == encode_connack(ConnectReturn.ACCEPTED)
    late_reader, late = await _raw(server)  # the second one waiting
    refused_reader, refused = await _raw(server)  # one too many
    assert await _closed(refused_reader)
    late.write(
        encode_connect(
            Connect(client_id="late", username="u", password=PASSWORD.encode())
        )
    )
    assert await late_reader.readexactly(4) == encode_connack(ConnectReturn.ACCEPTED)
    assert [d.identity for d in auth.devices] == ["dev", "late"]
    for writer in (waiting, device, late, refused):
        writer.close()


async def test_a_flood_from_16_addresses_never_locks_out_a_quiet_one(
    endpoint: Endpoint,
) -> None:
    """16 addresses fill every waiting slot; a device elsewhere logs in at once.

    Each flooding address opens as many idle connections as it may; once all
    slots are taken, each newcomer pushes out the oldest connection of the
    busiest address. The device on a quiet address gets in on its first try.
    """
    server, auth = endpoint
    assert server.port is not None
    flood: list[asyncio.StreamWriter] = []
    per_address = mqtt_server.MAX_PENDING // 16 + 8  # more than a fair share
    for host in range(2, 18):
        for _ in range(per_address):
            _reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, local_addr=(f"127.0.0.{host}", 0)
            )
            flood.append(writer)
    # The endpoint takes connections in the order they came: the flood's first.
    started = asyncio.get_running_loop().time()
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, local_addr=("127.0.0.200", 0)
    )
    writer.write(
        encode_connect(
            Connect(client_id="dev", username="u", password=PASSWORD.encode())
        )
    )
    assert await reader.readexactly(4) == encode_connack(ConnectReturn.ACCEPTED)
    took = asyncio.get_running_loop().time() - started
    assert [device.identity for device in auth.devices] == ["dev"]
    assert took < 1.0
    # The device took the slot of the busiest address's oldest connection.
    assert server.connections == mqtt_server.MAX_PENDING
    for each in [*flood, writer]:
        each.close()


async def test_banned_address_is_closed_before_it_speaks(
    endpoint: Endpoint,
) -> None:
    server, auth = endpoint
    auth.banned.add("127.0.0.1")
    reader, writer = await _raw(server)
    assert await _closed(reader)
    writer.close()
    assert not auth.refusals


async def test_oversized_packet_closes(
    endpoint: Endpoint,
) -> None:
    server, auth = endpoint
    reader, writer, _ = await _login(server)
    writer.write(encode_publish("up", b"x" * 5000))
    assert await _closed(reader)
    await auth.devices[0].closed.wait()
    writer.close()


async def test_silent_clients_are_dropped(
    socket_enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep-alive times 1.5, and a connection that never logs in, are swept."""
    monkeypatch.setattr(mqtt_server, "SWEEP_INTERVAL", 0.02)
    monkeypatch.setattr(mqtt_server, "CONNECT_TIMEOUT", 0.1)
    auth = Authenticator()
    server = MqttServer(auth)
    await server.start("127.0.0.1", 0)
    try:
        silent_reader, silent_writer = await _raw(server)
        reader, writer = await _raw(server)
        writer.write(
            encode_connect(
                Connect(
                    client_id="k", username="u", password=PASSWORD.encode(), keepalive=1
                )
            )
        )
        assert await reader.readexactly(4) == encode_connack(0)
        assert await _closed(silent_reader)  # never sent CONNECT
        assert await _closed(reader)  # silent for 1.5 s
        await auth.devices[0].closed.wait()
        silent_writer.close()
        writer.close()
    finally:
        await server.stop()


async def test_a_client_that_does_not_read_is_dropped(
    endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, auth = endpoint
    monkeypatch.setattr(mqtt_server, "MAX_WRITE_BUFFER", 1000)
    _reader, writer, _ = await _login(server)
    (device,) = auth.devices
    with contextlib.suppress(ConnectionError):
        for _ in range(10_000):
            device.connection.publish("down", b"x" * 1000)
    await asyncio.wait_for(device.closed.wait(), 5)
    with pytest.raises(ConnectionError):
        device.connection.publish("down", b"late")
    writer.close()


class _PeerThatNeverReads(asyncio.Transport):
    """A transport whose graceful close never completes: nothing drains."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._protocol = protocol
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("10.0.0.9", 40000) if name in ("peername", "sockname") else default

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 1000  # what waits for the peer, forever

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True
        self._protocol.connection_lost(None)


async def test_a_close_that_never_drains_is_aborted(
    socket_enabled: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Taken over or expired, a peer that stopped reading is still let go."""
    monkeypatch.setattr(mqtt_server, "SWEEP_INTERVAL", 0.02)
    auth = Authenticator()
    server = MqttServer(auth)
    await server.start("127.0.0.1", 0)
    try:
        connection = MqttConnection(server)
        connection.connection_made(_PeerThatNeverReads(connection))
        connection.data_received(
            encode_connect(
                Connect(client_id="dev", username="u", password=PASSWORD.encode())
            )
        )
        (device,) = auth.devices
        connection.close()
        assert server.connections == 1  # the close waits for the peer
        await asyncio.wait_for(device.closed.wait(), 5)
        assert server.connections == 0
    finally:
        await server.stop()


async def test_connection_limit(socket_enabled: None) -> None:
    auth = Authenticator()
    server = MqttServer(auth, max_connections=1)
    await server.start("127.0.0.1", 0)
    try:
        _reader, writer, _ = await _login(server)
        reader2, writer2 = await _raw(server)
        assert await _closed(reader2)
        writer.close()
        writer2.close()
    finally:
        await server.stop()


async def test_port_in_use_raises(socket_enabled: None) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = MqttServer(Authenticator())
        with pytest.raises(OSError, match="in use"):
            await server.start("127.0.0.1", taken.getsockname()[1])
    assert server.port is None
