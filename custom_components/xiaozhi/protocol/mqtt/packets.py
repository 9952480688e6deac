"""MQTT 3.1.1 packets: pure encoding and decoding, no I/O.

Written from the OASIS MQTT 3.1.1 specification for the subset xiaozhi
devices use (they CONNECT, PUBLISH at QoS 0 and PING; the server PUBLISHes
to their connection). Every packet type is decoded, so the same reader serves
the device endpoint and the simulator's client; which packets a side accepts
is its own business. Anything that breaks the specification raises
:class:`MqttError`: the connection must be closed.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
import struct
from typing import Final

from ..errors import ProtocolError

MAX_REMAINING_LENGTH: Final = 268_435_455  # four length bytes
_U16: Final = struct.Struct(">H")


class MqttError(ProtocolError):
    """The peer broke the MQTT specification: close its connection."""


class PacketTooLargeError(MqttError):
    """A packet is larger than the reader accepts."""


class PacketType(IntEnum):
    """Control packet types (section 2.2.1)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14


class ConnectReturn(IntEnum):
    """CONNACK return codes (section 3.2.2.3)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_CREDENTIALS = 4
    NOT_AUTHORIZED = 5


SUBACK_FAILURE: Final = 0x80

# Fixed header flags each type must carry (section 2.2.2); PUBLISH has its own.
_REQUIRED_FLAGS: Final = {
    PacketType.PUBREL: 0b0010,
    PacketType.SUBSCRIBE: 0b0010,
    PacketType.UNSUBSCRIBE: 0b0010,
}
# Protocol name -> level: MQTT 3.1.1, and MQTT 3.1 that older clients speak.
PROTOCOLS: Final = {"MQTT": 4, "MQIsdp": 3}


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    """A CONNECT packet (section 3.1)."""

    protocol_name: str = "MQTT"
    protocol_level: int = 4
    client_id: str
    clean_session: bool = True
    keepalive: int = 60
    username: str | None = None
    password: bytes | None = None
    will_topic: str | None = None
    will_message: bytes | None = None
    will_qos: int = 0
    will_retain: bool = False

    @property
    def supported(self) -> bool:
        """Return True for a protocol name and level this codec speaks."""
        return PROTOCOLS.get(self.protocol_name) == self.protocol_level

    def __repr__(self) -> str:
        """Show everything but the password."""
        return (
            f"Connect(client_id={self.client_id!r}, username={self.username!r}, "
            f"keepalive={self.keepalive}, clean_session={self.clean_session}, "
            f"protocol={self.protocol_name!r}/{self.protocol_level})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnAck:
    """A CONNACK packet (section 3.2)."""

    session_present: bool = False
    code: int = ConnectReturn.ACCEPTED


@dataclass(frozen=True, slots=True, kw_only=True)
class Publish:
    """A PUBLISH packet (section 3.3)."""

    topic: str
    payload: bytes
    qos: int = 0
    packet_id: int | None = None
    retain: bool = False
    dup: bool = False


@dataclass(frozen=True, slots=True)
class PacketIdOnly:
    """PUBACK, PUBREC, PUBREL, PUBCOMP or UNSUBACK: a type and a packet id."""

    type: PacketType
    packet_id: int


@dataclass(frozen=True, slots=True)
class Subscribe:
    """A SUBSCRIBE packet (section 3.8): topic filters and requested QoS."""

    packet_id: int
    filters: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class SubAck:
    """A SUBACK packet (section 3.9)."""

    packet_id: int
    codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """An UNSUBSCRIBE packet (section 3.10)."""

    packet_id: int
    filters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Empty:
    """PINGREQ, PINGRESP or DISCONNECT: a type and nothing else."""

    type: PacketType


type Packet = (
    Connect
    | ConnAck
    | Publish
    | PacketIdOnly
    | Subscribe
    | SubAck
    | Unsubscribe
    | Empty
)


# --------------------------------------------------------------------- reading


class _Body:
    """A cursor over one packet's variable header and payload."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.left < 1:
            raise MqttError("packet ends early")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def u16(self) -> int:
        if self.left < 2:
            raise MqttError("packet ends early")
        (value,) = _U16.unpack_from(self.data, self.pos)
        self.pos += 2
        return int(value)

    def binary(self) -> bytes:
        length = self.u16()
        if self.left < length:
            raise MqttError("packet ends early")
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value

    def string(self) -> str:
        """Read a UTF-8 string (section 1.5.3): valid, without U+0000."""
        raw = self.binary()
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MqttError("string is not valid UTF-8") from None
        if "\x00" in value:
            raise MqttError("string contains U+0000")
        return value

    def packet_id(self) -> int:
        value = self.u16()
        if value == 0:
            raise MqttError("packet identifier 0")
        return value

    def rest(self) -> bytes:
        value = self.data[self.pos :]
        self.pos = len(self.data)
        return value

    def end(self) -> None:
        if self.left:
            raise MqttError(f"{self.left} unexpected bytes at the end of a packet")


def _connect(body: _Body) -> Connect:
    name = body.string()
    level = body.byte()
    if name not in PROTOCOLS:
        raise MqttError(f"unknown protocol name {name!r}")
    flags = body.byte()
    if flags & 0x01:
        raise MqttError("reserved CONNECT flag set")
    has_user, has_password, will = flags & 0x80, flags & 0x40, flags & 0x04
    will_qos, will_retain = (flags >> 3) & 0x03, bool(flags & 0x20)
    if not will and (will_qos or will_retain):
        raise MqttError("will QoS or retain without a will")
    if will_qos == 3:
        raise MqttError("will QoS 3")
    if has_password and not has_user:
        raise MqttError("password without user name")
    keepalive = body.u16()
    client_id = body.string()
    will_topic = will_message = None
    if will:
        will_topic = body.string()
        will_message = body.binary()
    username = body.string() if has_user else None
    password = body.binary() if has_password else None
    body.end()
    return Connect(
        protocol_name=name,
        protocol_level=level,
        client_id=client_id,
        clean_session=bool(flags & 0x02),
        keepalive=keepalive,
        username=username,
        password=password,
        will_topic=will_topic,
        will_message=will_message,
        will_qos=will_qos,
        will_retain=will_retain,
    )


def _publish(flags: int, body: _Body) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MqttError("PUBLISH with QoS 3")
    dup = bool(flags & 0x08)
    if dup and qos == 0:
        raise MqttError("DUP flag on a QoS 0 PUBLISH")
    topic = body.string()
    if not topic or "+" in topic or "#" in topic:
        raise MqttError("PUBLISH topic is empty or has wildcards")
    packet_id = body.packet_id() if qos else None
    return Publish(
        topic=topic,
        payload=body.rest(),
        qos=qos,
        packet_id=packet_id,
        retain=bool(flags & 0x01),
        dup=dup,
    )


def _subscribe(body: _Body) -> Subscribe:
    packet_id = body.packet_id()
    filters = []
    while body.left:
        topic = body.string()
        options = body.byte()
        if options & 0xFC or options == 3:
            raise MqttError("bad requested QoS in SUBSCRIBE")
        filters.append((topic, options))
    if not filters:
        raise MqttError("SUBSCRIBE without topic filters")
    return Subscribe(packet_id, tuple(filters))


def _unsubscribe(body: _Body) -> Unsubscribe:
    packet_id = body.packet_id()
    filters = []
    while body.left:
        filters.append(body.string())
    if not filters:
        raise MqttError("UNSUBSCRIBE without topic filters")
    return Unsubscribe(packet_id, tuple(filters))


def decode_packet(first: int, data: bytes) -> Packet:
    """Decode one packet from its first byte and its remaining bytes."""
    try:
        kind = PacketType(first >> 4)
    except ValueError:
        raise MqttError(f"reserved packet type {first >> 4}") from None
    flags = first & 0x0F
    if kind is not PacketType.PUBLISH and flags != _REQUIRED_FLAGS.get(kind, 0):
        raise MqttError(f"bad fixed header flags {flags:#06b} on {kind.name}")
    body = _Body(data)
    packet: Packet
    match kind:
        case PacketType.CONNECT:
            return _connect(body)
        case PacketType.CONNACK:
            acknowledge = body.byte()
            if acknowledge & 0xFE:
                raise MqttError("reserved CONNACK flags set")
            packet = ConnAck(session_present=bool(acknowledge), code=body.byte())
        case PacketType.PUBLISH:
            return _publish(flags, body)
        case (
            PacketType.PUBACK
            | PacketType.PUBREC
            | PacketType.PUBREL
            | PacketType.PUBCOMP
            | PacketType.UNSUBACK
        ):
            packet = PacketIdOnly(kind, body.packet_id())
        case PacketType.SUBSCRIBE:
            return _subscribe(body)
        case PacketType.SUBACK:
            packet_id = body.packet_id()
            packet = SubAck(packet_id, tuple(body.rest()))
        case PacketType.UNSUBSCRIBE:
            return _unsubscribe(body)
        case _:
            packet = Empty(kind)
    body.end()
    return packet


class PacketReader:
    """Cuts a byte stream into packets; holds at most one packet's bytes.

    A packet announcing more than ``max_packet`` bytes is refused as soon as
    its length is known, before its bytes arrive.
    """

    def __init__(self, max_packet: int) -> None:
        """Accept packets of up to ``max_packet`` remaining bytes."""
        self.max_packet = max_packet
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Return how many bytes wait for the rest of their packet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[Packet]:
        """Take bytes from the stream; yield the packets they complete.

        Packets are cut one at a time as they are asked for: a reader that
        stops (its connection closed) decodes nothing more.
        """
        self._buffer += data
        return self._packets()

    def _packets(self) -> Iterator[Packet]:
        buffer = self._buffer
        while len(buffer) >= 2:
            length = multiplier = 0
            pos = 1
            while True:
                if pos >= len(buffer):
                    return  # the length is not complete yet
                digit = buffer[pos]
                length += (digit & 0x7F) << multiplier
                pos += 1
                if not digit & 0x80:
                    break
                multiplier += 7
                if multiplier > 21:
                    raise MqttError("remaining length longer than four bytes")
            if length > self.max_packet:
                raise PacketTooLargeError(
                    f"packet of {length} bytes (at most {self.max_packet})"
                )
            if len(buffer) < pos + length:
                return
            first = buffer[0]
            data = bytes(buffer[pos : pos + length])
            del buffer[: pos + length]
            yield decode_packet(first, data)


# --------------------------------------------------------------------- writing


def _remaining_length(length: int) -> bytes:
    if not 0 <= length <= MAX_REMAINING_LENGTH:
        raise ValueError(f"remaining length {length} out of range")
    out = bytearray()
    while True:
        digit, length = length & 0x7F, length >> 7
        out.append(digit | (0x80 if length else 0))
        if not length:
            return bytes(out)


def _packet(first: int, body: bytes = b"") -> bytes:
    return bytes([first]) + _remaining_length(len(body)) + body


def _binary(value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise ValueError("field longer than 65535 bytes")
    return _U16.pack(len(value)) + value


def _string(value: str) -> bytes:
    return _binary(value.encode("utf-8"))


def encode_connect(connect: Connect) -> bytes:
    """Encode a CONNECT packet (the simulator's and the tests' side)."""
    flags = 0x02 if connect.clean_session else 0
    payload = _string(connect.client_id)
    if connect.will_topic is not None:
        flags |= 0x04 | (connect.will_qos << 3) | (0x20 if connect.will_retain else 0)
        payload += _string(connect.will_topic) + _binary(connect.will_message or b"")
    if connect.username is not None:
        flags |= 0x80
        payload += _string(connect.username)
    if connect.password is not None:
        flags |= 0x40
        payload += _binary(connect.password)
    header = (
        _string(connect.protocol_name)
        + bytes([connect.protocol_level, flags])
        + _U16.pack(connect.keepalive)
    )
    return _packet(PacketType.CONNECT << 4, header + payload)


def encode_connack(code: int, *, session_present: bool = False) -> bytes:
    """Encode a CONNACK packet."""
    return _packet(PacketType.CONNACK << 4, bytes([int(session_present), code]))


def encode_publish(
    topic: str,
    payload: bytes,
    *,
    qos: int = 0,
    packet_id: int | None = None,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    """Encode a PUBLISH packet."""
    first = (PacketType.PUBLISH << 4) | (qos << 1) | int(retain) | (0x08 if dup else 0)
    header = _string(topic)
    if qos:
        if not packet_id:
            raise ValueError("QoS 1 and 2 need a packet identifier")
        header += _U16.pack(packet_id)
    return _packet(first, header + payload)


def encode_packet_id(kind: PacketType, packet_id: int) -> bytes:
    """Encode PUBACK, PUBREC, PUBREL, PUBCOMP or UNSUBACK."""
    return _packet((kind << 4) | _REQUIRED_FLAGS.get(kind, 0), _U16.pack(packet_id))


def encode_subscribe(packet_id: int, filters: list[tuple[str, int]]) -> bytes:
    """Encode a SUBSCRIBE packet."""
    body = _U16.pack(packet_id) + b"".join(
        _string(topic) + bytes([qos]) for topic, qos in filters
    )
    return _packet((PacketType.SUBSCRIBE << 4) | 0b0010, body)


def encode_suback(packet_id: int, codes: list[int]) -> bytes:
    """Encode a SUBACK packet."""
    return _packet(PacketType.SUBACK << 4, _U16.pack(packet_id) + bytes(codes))


def encode_unsubscribe(packet_id: int, filters: list[str]) -> bytes:
    """Encode an UNSUBSCRIBE packet."""
    body = _U16.pack(packet_id) + b"".join(_string(topic) for topic in filters)
    return _packet((PacketType.UNSUBSCRIBE << 4) | 0b0010, body)


def encode_empty(kind: PacketType) -> bytes:
    """Encode PINGREQ, PINGRESP or DISCONNECT."""
    return _packet(kind << 4)


PINGREQ: Final = encode_empty(PacketType.PINGREQ)
PINGRESP: Final = encode_empty(PacketType.PINGRESP)
DISCONNECT: Final = encode_empty(PacketType.DISCONNECT)
