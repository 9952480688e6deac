"""The firmware's MQTT + UDP transport, device side (``mqtt_protocol.cc``).

- MQTT: the device connects at boot with the OTA answer's ``client_id``,
  ``username``, ``password`` and ``keepalive`` (clean session, MQTT 3.1.1),
  publishes every JSON message at QoS 0 to ``publish_topic`` and **never
  subscribes**: it takes whatever the server publishes to its connection,
  whatever the topic. The client is aiomqtt (paho-mqtt underneath).
- UDP: the server hello (``transport: "udp"``) gives ``server``, ``port``,
  ``key`` and ``nonce``. The device sends from a socket connected to that
  address, so it only hears packets from there. Packets are a 16-byte header
  (the nonce with length, timestamp and sequence written in) and the Opus
  packet encrypted with AES-128-CTR, the header being the counter block.
  Received packets are dropped when shorter than a header, of another type,
  of another length than the header says, or (firmware 2.4.0 and later) not
  above the last sequence.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
import logging
import struct
from typing import Any, Final, override

import aiomqtt
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

_LOGGER = logging.getLogger(__name__)

UDP_HEADER: Final = struct.Struct(">BBHIII")
MQTT_CONNECT_TIMEOUT: Final = 10.0  # MQTT_CONNECT_TIMEOUT_MS


def mqtt_endpoint(endpoint: str) -> tuple[str, int]:
    """Split ``host:port`` at the first colon; no port means 8883 (TLS)."""
    host, sep, port = endpoint.partition(":")
    return host, int(port) if sep else 8883


@dataclass(frozen=True, slots=True)
class UdpParams:
    """The ``udp`` object of a server hello, as the firmware checks it."""

    server: str
    port: int
    key: bytes
    nonce: bytes


def parse_udp(value: Any) -> UdpParams | None:
    """Return the UDP parameters, or None where the firmware gives up."""
    if not isinstance(value, dict):
        return None
    server, port = value.get("server"), value.get("port")
    key, nonce = value.get("key"), value.get("nonce")
    if not isinstance(server, str) or not isinstance(port, int):
        return None
    if not 0 < port < 65536 or not isinstance(key, str) or not isinstance(nonce, str):
        return None
    try:
        key_bytes, nonce_bytes = bytes.fromhex(key), bytes.fromhex(nonce)
    except ValueError:
        return None
    if len(key_bytes) != 16 or len(nonce_bytes) != 16:
        return None
    return UdpParams(server, port, key_bytes, nonce_bytes)


def _crypt(key: bytes, counter: bytes, data: bytes) -> bytes:
    encryptor = Cipher(algorithms.AES(key), modes.CTR(counter)).encryptor()
    return encryptor.update(data) + encryptor.finalize()


@dataclass(slots=True)
class UdpRecord:
    """What the device's UDP socket did."""

    sent: int = 0
    received: int = 0
    accepted: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, reason: str) -> None:
        """Count a dropped packet."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1


class DeviceUdpChannel(asyncio.DatagramProtocol):
    """The device's audio channel: a connected UDP socket and the AES keys."""

    def __init__(
        self,
        params: UdpParams,
        on_packet: Callable[[bytes, int], None],
        record: UdpRecord,
        *,
        strict_sequence: bool = True,
    ) -> None:
        """Use ``params``; hand decrypted packets to ``on_packet``."""
        self.params = params
        self._on_packet = on_packet
        self.record = record
        self.strict_sequence = strict_sequence
        self.local_sequence = 0
        self.remote_sequence = 0
        self._transport: asyncio.DatagramTransport | None = None

    async def open(self) -> None:
        """Create the socket, connected to the server's address."""
        loop = asyncio.get_running_loop()
        await loop.create_datagram_endpoint(
            lambda: self, remote_addr=(self.params.server, self.params.port)
        )

    @override
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.DatagramTransport):
            self._transport = transport

    def close(self) -> None:
        """Destroy the socket."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    @property
    def is_open(self) -> bool:
        """Return True while the socket exists."""
        return self._transport is not None

    def packet(self, payload: bytes, timestamp: int = 0) -> bytes:
        """Return the next uplink packet: the nonce with the fields written in."""
        self.local_sequence += 1
        header = bytearray(self.params.nonce)
        header[2:4] = len(payload).to_bytes(2, "big")
        header[8:12] = (timestamp & 0xFFFFFFFF).to_bytes(4, "big")
        header[12:16] = (self.local_sequence & 0xFFFFFFFF).to_bytes(4, "big")
        return bytes(header) + _crypt(self.params.key, bytes(header), payload)

    def send(self, payload: bytes, timestamp: int = 0) -> bool:
        """Send one Opus packet; False when the socket is gone."""
        if self._transport is None:
            return False
        self._transport.sendto(self.packet(payload, timestamp))
        self.record.sent += 1
        return True

    def send_raw(self, data: bytes) -> bool:
        """Send any datagram as is (tests of the server's checks)."""
        if self._transport is None:
            return False
        self._transport.sendto(data)
        return True

    @override
    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        record = self.record
        record.received += 1
        if len(data) < UDP_HEADER.size:
            record.drop("short")
            return
        kind, _flags, length, _ssrc, timestamp, sequence = UDP_HEADER.unpack_from(data)
        if kind != 0x01:
            record.drop("type")
            return
        if len(data) != UDP_HEADER.size + length:
            record.drop("length")
            return
        stale = (
            sequence <= self.remote_sequence
            if self.strict_sequence
            else sequence < self.remote_sequence
        )
        if stale:
            record.drop("sequence")
            return
        payload = _crypt(self.params.key, data[: UDP_HEADER.size], data[16:])
        self.remote_sequence = sequence
        record.accepted += 1
        self._on_packet(payload, timestamp)


class DeviceMqttLink:
    """The device's MQTT connection: publish text, take whatever arrives."""

    def __init__(
        self,
        settings: dict[str, str | int],
        on_text: Callable[[str], Any],
        on_closed: Callable[[str], None],
    ) -> None:
        """Use the ``mqtt`` settings stored from the OTA answer."""
        self.settings = settings
        self._on_text = on_text
        self._on_closed = on_closed
        self._client: aiomqtt.Client | None = None
        self._reader: asyncio.Task[None] | None = None
        self.publish_topic = str(settings.get("publish_topic", ""))
        self.closed = False

    async def connect(self) -> None:
        """Connect and wait for CONNACK (at most 10 s); raise ConnectionError."""
        endpoint = str(self.settings.get("endpoint", ""))
        if not endpoint:
            raise ConnectionError("MQTT endpoint is not specified")
        host, port = mqtt_endpoint(endpoint)
        keepalive = int(self.settings.get("keepalive", 240)) or 120
        client = aiomqtt.Client(
            host,
            port,
            identifier=str(self.settings.get("client_id", "")),
            username=str(self.settings.get("username", "")) or None,
            password=str(self.settings.get("password", "")) or None,
            keepalive=keepalive,
            clean_session=True,
            timeout=MQTT_CONNECT_TIMEOUT,
        )
        try:
            await client.__aenter__()
        except aiomqtt.MqttError as err:
            raise ConnectionError(f"MQTT connect failed: {err}") from err
        self._client = client
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        client = self._client
        reason = "server_closed"
        try:
            if client is not None:
                async for message in client.messages:
                    payload = message.payload
                    if isinstance(payload, bytes | bytearray):
                        text = bytes(payload).decode("utf-8", "replace")
                        result = self._on_text(text)
                        if asyncio.iscoroutine(result):
                            await result
        except aiomqtt.MqttError as err:
            _LOGGER.debug("MQTT connection lost: %s", err)
            reason = "error"
        except asyncio.CancelledError:
            reason = "disconnected"
            raise
        finally:
            self.closed = True
            self._on_closed(reason)

    async def publish(self, text: str) -> bool:
        """Publish at QoS 0 to ``publish_topic``; False when it cannot be sent."""
        client = self._client
        if client is None or self.closed or not self.publish_topic:
            return False
        try:
            await client.publish(self.publish_topic, text.encode(), qos=0)
        except aiomqtt.MqttError as err:
            _LOGGER.debug("MQTT publish failed: %s", err)
            return False
        return True

    async def close(self) -> None:
        """Disconnect cleanly."""
        client, self._client = self._client, None
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if client is not None:
            try:
                await client.__aexit__(None, None, None)
            except aiomqtt.MqttError as err:
                _LOGGER.debug("MQTT disconnect failed: %s", err)
        self.closed = True
