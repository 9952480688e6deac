"""A device-facing MQTT 3.1.1 endpoint: the subset xiaozhi firmware speaks.

Not a broker. Each device publishes to its own topic and never subscribes;
the endpoint hands what it publishes to that device's handler and delivers
the server's messages to its connection directly (the firmware ignores the
topic). So:

- the login (CONNECT) is checked by :meth:`MqttAuthenticator.authenticate`
  before anything changes; a refusal gets CONNACK 0x04/0x05 and the socket is
  closed, and nothing of the refused client is kept;
- PUBLISH is taken at QoS 0 and 1 (PUBACK) and sent at QoS 0;
- SUBSCRIBE is answered with failure (0x80): nothing is routed by topic;
- PINGREQ gets PINGRESP, DISCONNECT closes;
- a client silent for 1.5 times its keep-alive is dropped;
- a second login of the same client (as the authenticator identifies it)
  takes over and closes the first;
- packets are bounded in size, and so is what waits to be written; before
  its login a connection may send one small CONNECT and nothing else, and
  connections that have not logged in yet are capped per address and in
  total, so a flood cannot take the process's file descriptors or memory.

No Home Assistant import: the integration binds it to its devices.
"""

import asyncio
from collections import Counter
import logging
import time
from typing import Final, Protocol, override

from .packets import (
    PINGRESP,
    SUBACK_FAILURE,
    Connect,
    ConnectReturn,
    Empty,
    MqttError,
    Packet,
    PacketIdOnly,
    PacketReader,
    PacketType,
    Publish,
    Subscribe,
    Unsubscribe,
    encode_connack,
    encode_packet_id,
    encode_publish,
    encode_suback,
)

_LOGGER = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 10.0  # seconds from accept to CONNECT
SWEEP_INTERVAL: Final = 5.0  # how often silent clients are looked for
KEEPALIVE_GRACE: Final = 1.5  # MQTT-3.1.2-24: one and a half keep-alives
MAX_IDLE: Final = 3600.0  # a client without keep-alive (0) still goes
MAX_WRITE_BUFFER: Final = 256 * 1024  # a peer that does not read is dropped
MAX_CONNECT_PACKET: Final = 4096  # the firmware's CONNECT is under 300 bytes
# Connections that have not logged in yet. A device makes one at a time, but
# a NAT can put a house's devices behind one address and they all dial when
# Home Assistant comes back.
MAX_PENDING_PER_ADDRESS: Final = 128
MAX_PENDING: Final = 512
# Home Assistant raises its soft file limit to 2048; leave it room.
MAX_CONNECTIONS: Final = 1024
FULL_WARNING_INTERVAL: Final = 60.0


class MqttClient(Protocol):
    """What serves one accepted connection (a device)."""

    @property
    def identity(self) -> str:
        """Return who logged in: a second login of the same one takes over."""

    def mqtt_message(self, topic: str, payload: bytes) -> None:
        """Take a message the client published."""

    def mqtt_closed(self) -> None:
        """Learn that the connection ended, whatever ended it."""


class MqttAuthenticator(Protocol):
    """Decides who may connect; the endpoint keeps no credentials."""

    def allowed(self, peer: str) -> bool:
        """Return False for an address that is refused before it speaks (a ban)."""

    def authenticate(
        self, connection: MqttConnection, connect: Connect
    ) -> MqttClient | ConnectReturn:
        """Return the client's handler, or the CONNACK code refusing it."""

    def refused(self, peer: str, connect: Connect, code: ConnectReturn) -> None:
        """Learn about a refused login (to count it towards a ban)."""


class MqttConnection(asyncio.Protocol):
    """One TCP connection to the endpoint."""

    def __init__(self, server: MqttServer) -> None:
        """Belong to ``server``."""
        self._server = server
        self._reader = PacketReader(min(server.max_packet, MAX_CONNECT_PACKET))
        self._transport: asyncio.Transport | None = None
        self._client: MqttClient | None = None
        self.peer = ""
        self.local = ""
        self.client_id: str | None = None
        self.identity: str | None = None
        self.keepalive = 0
        self.accepted = self.last_seen = time.monotonic()
        self.closed = False
        self.closed_at = 0.0

    # --- asyncio.Protocol ------------------------------------------------

    @override
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.Transport):  # pragma: no cover
            raise TypeError("the MQTT endpoint serves stream transports")
        self._transport = transport
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = str(peer[0]) if peer else ""
        self.local = str(local[0]) if local else ""
        if not self._server.accept(self):
            self.close()

    @override
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.last_seen = time.monotonic()
        try:
            for packet in self._reader.feed(data):
                if self._transport is None or self._transport.is_closing():
                    return  # closed by the packet before: ignore the rest
                self._handle(packet)
        except MqttError as err:
            level = logging.DEBUG if self.client_id is None else logging.WARNING
            _LOGGER.log(level, "Closing MQTT connection from %s: %s", self.peer, err)
            self.close()

    @override
    def eof_received(self) -> bool | None:
        self.close()
        return None

    @override
    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._transport = None
        self._server.forget(self)
        client, self._client = self._client, None
        if client is not None:
            client.mqtt_closed()

    # --- packets ---------------------------------------------------------

    def _handle(self, packet: Packet) -> None:
        if self._client is None:
            if not isinstance(packet, Connect):
                raise MqttError("first packet is not CONNECT")
            self._login(packet)
            return
        match packet:
            case Publish(qos=0):
                self._client.mqtt_message(packet.topic, packet.payload)
            case Publish(qos=1, packet_id=int(packet_id)):
                self._client.mqtt_message(packet.topic, packet.payload)
                self._write(encode_packet_id(PacketType.PUBACK, packet_id))
            case Subscribe():
                # Nothing is routed by topic: the device's messages reach it
                # on this connection whatever it subscribes to.
                codes = [SUBACK_FAILURE] * len(packet.filters)
                self._write(encode_suback(packet.packet_id, codes))
            case Unsubscribe():
                self._write(encode_packet_id(PacketType.UNSUBACK, packet.packet_id))
            case Empty(type=PacketType.PINGREQ):
                self._write(PINGRESP)
            case Empty(type=PacketType.DISCONNECT):
                self.close()
            case PacketIdOnly(type=PacketType.PUBACK):
                pass  # nothing is sent at QoS 1
            case Connect():
                raise MqttError("second CONNECT")
            case _:
                raise MqttError(f"unexpected {type(packet).__name__} from a client")

    @property
    def logged_in(self) -> bool:
        """Return True once the client's login was accepted."""
        return self.identity is not None

    def _login(self, connect: Connect) -> None:
        server = self._server
        if not connect.supported:
            self._refuse(connect, ConnectReturn.UNACCEPTABLE_PROTOCOL)
            return
        if not connect.client_id:
            # Every device has its own (the OTA answer hands it out).
            self._refuse(connect, ConnectReturn.IDENTIFIER_REJECTED)
            return
        result = server.authenticator.authenticate(self, connect)
        if isinstance(result, ConnectReturn):
            self._refuse(connect, result)
            return
        self.client_id = connect.client_id
        self.identity = result.identity
        self.keepalive = connect.keepalive
        self._client = result
        self._reader.max_packet = server.max_packet
        server.register(self)
        self._write(encode_connack(ConnectReturn.ACCEPTED))

    def _refuse(self, connect: Connect, code: ConnectReturn) -> None:
        self._write(encode_connack(code))
        self.close()
        self._server.authenticator.refused(self.peer, connect, code)

    # --- sending ---------------------------------------------------------

    def _write(self, data: bytes) -> None:
        transport = self._transport
        if transport is None or self.closed:
            raise ConnectionError("MQTT connection closed")
        transport.write(data)
        if transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            _LOGGER.warning("Dropping MQTT client %s: it does not read", self.peer)
            self.abort()

    def publish(self, topic: str, payload: bytes) -> None:
        """Send a message to the client (QoS 0); ConnectionError once closed."""
        self._write(encode_publish(topic, payload))

    def close(self) -> None:
        """Close the connection once what is written has gone out."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()

    def abort(self) -> None:
        """Close the connection now, dropping what waits to be written."""
        if self._transport is not None:
            self._transport.abort()
        self.closed = True

    def expired(self, now: float) -> bool:
        """Return True when the client has been silent for too long."""
        if self._client is None:  # however slowly it trickles in bytes
            return now - self.accepted > CONNECT_TIMEOUT
        limit = KEEPALIVE_GRACE * self.keepalive if self.keepalive else MAX_IDLE
        return now - self.last_seen > limit

    def stuck(self, now: float) -> bool:
        """Return True when a close waits for a peer that does not read."""
        return self.closed and now - self.closed_at > SWEEP_INTERVAL


class MqttServer:
    """The endpoint: its sockets, its connections, the sweep of silent ones."""

    def __init__(
        self,
        authenticator: MqttAuthenticator,
        *,
        max_packet: int = 256 * 1024,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """Serve clients that ``authenticator`` lets in."""
        self.authenticator = authenticator
        self.max_packet = max_packet
        self.max_connections = max_connections
        self._connections: set[MqttConnection] = set()
        self._clients: dict[str, MqttConnection] = {}
        self._pending: Counter[str] = Counter()  # not logged in, by address
        self._warned_full_at = -FULL_WARNING_INTERVAL
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def port(self) -> int | None:
        """Return the port the endpoint listens on, once started."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connections(self) -> int:
        """Return how many connections are open."""
        return len(self._connections)

    async def start(self, host: str, port: int) -> None:
        """Listen; raises OSError when the port cannot be bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: MqttConnection(self), host, port, reuse_address=True
        )
        self._sweeper = loop.call_later(SWEEP_INTERVAL, self._sweep)

    async def stop(self) -> None:
        """Stop listening and close every connection."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def accept(self, connection: MqttConnection) -> bool:
        """Take a new connection, unless its address is refused or we are full.

        Connections that have not logged in yet are bounded per address and
        in all. When all the waiting slots are taken, the oldest waiting
        connection of the busiest address makes room: a flood from a few
        addresses never locks out a device on another one.
        """
        peer = connection.peer
        if self._pending[peer] >= MAX_PENDING_PER_ADDRESS:
            # A flood of logins that never come: not worth a warning.
            _LOGGER.debug("Refusing MQTT connection from %s: too many", peer)
            return False
        if len(self._connections) >= self.max_connections:
            self._warn_full()
            return False
        if not self.authenticator.allowed(peer):
            return False
        if self._pending.total() >= MAX_PENDING:
            self._evict_waiting()
        self._connections.add(connection)
        self._pending[peer] += 1
        return True

    def _evict_waiting(self) -> None:
        """Drop the oldest connection of the address with the most waiting.

        Among addresses with as many, the one that came last yields: a flood
        spread over many addresses evicts itself, not an older device.
        """
        most = max(self._pending.values())
        waiting = [
            each
            for each in self._connections
            if not each.logged_in and self._pending[each.peer] == most
        ]
        if not waiting:  # pragma: no cover - every waiting one is counted
            return
        busiest = max(waiting, key=lambda each: each.accepted).peer
        victim = min(
            (each for each in waiting if each.peer == busiest),
            key=lambda each: each.accepted,
            default=None,
        )
        if victim is None:  # pragma: no cover - every waiting one is counted
            return
        _LOGGER.debug("Dropping a waiting MQTT connection from %s: room", busiest)
        self.forget(victim)
        victim.abort()

    def _warn_full(self) -> None:
        now = time.monotonic()
        if now - self._warned_full_at >= FULL_WARNING_INTERVAL:
            self._warned_full_at = now
            _LOGGER.warning(
                "Refusing MQTT connections: %d are open, the most served",
                len(self._connections),
            )

    def register(self, connection: MqttConnection) -> None:
        """Make a logged-in connection the one of its client."""
        self._done_pending(connection)
        identity = connection.identity or ""
        previous = self._clients.get(identity)
        self._clients[identity] = connection
        if previous is not None and previous is not connection:
            _LOGGER.debug("MQTT client %s connected again", connection.client_id)
            previous.close()

    def forget(self, connection: MqttConnection) -> None:
        """Drop a closed connection."""
        if connection not in self._connections:
            return
        self._connections.discard(connection)
        if not connection.logged_in:
            self._done_pending(connection)
        elif self._clients.get(connection.identity or "") is connection:
            del self._clients[connection.identity or ""]

    def _done_pending(self, connection: MqttConnection) -> None:
        peer = connection.peer
        self._pending[peer] -= 1
        if self._pending[peer] <= 0:
            del self._pending[peer]

    def _sweep(self) -> None:
        now = time.monotonic()
        for connection in list(self._connections):
            if connection.stuck(now):
                connection.abort()  # its close never got its bytes out
            elif not connection.closed and connection.expired(now):
                _LOGGER.debug(
                    "Dropping silent MQTT client %s from %s",
                    connection.client_id,
                    connection.peer,
                )
                connection.close()
        self._sweeper = asyncio.get_running_loop().call_later(
            SWEEP_INTERVAL, self._sweep
        )
