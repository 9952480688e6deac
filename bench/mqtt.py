"""MQTT + UDP at scale: the endpoint's own memory, and idle devices.

- ``endpoint``: the MQTT endpoint alone (no Home Assistant) holding ``n``
  logged-in, idle connections, against a bare asyncio TCP server holding the
  same clients (the baseline, same run): resident and Python-allocated bytes
  per connection.
- ``idle``: ``n`` paired devices connected over MQTT to Home Assistant and
  idle, the keep-alive flowing (Home Assistant reads the status every
  ``keepalive`` seconds, the devices ping at half their MQTT keep-alive):
  event-loop lag against the loop before they connected, resident memory per
  device (entities included), the traffic per device, and requests lost.

The devices are fast clients in a child process that answer MCP requests
with the firmware's canned replies (``bench/device.py``), over a minimal MQTT
client written here (this module imports no Home Assistant code in the
child).
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
import struct
import time
import tracemalloc
from typing import Any

from .device import DeviceScript, FastDevice
from .fleet import ChildFleet, raise_file_limit, run_in_fresh_process

CONCURRENCY = 64
KEEPALIVE_S = 60  # the devices' MQTT keep-alive in this run (pings every 30 s)


# ------------------------------------------------------------------ clients


def _remaining(length: int) -> bytes:
    out = bytearray()
    while True:
        digit, length = length & 0x7F, length >> 7
        out.append(digit | (0x80 if length else 0))
        if not length:
            return bytes(out)


def _string(value: bytes) -> bytes:
    return struct.pack(">H", len(value)) + value


def connect_packet(
    client_id: str, username: str, password: str, keepalive: int
) -> bytes:
    """Return the CONNECT esp-mqtt sends: MQTT 3.1.1, clean session."""
    body = (
        _string(b"MQTT")
        + bytes([4, 0xC2])
        + struct.pack(">H", keepalive)
        + _string(client_id.encode())
        + _string(username.encode())
        + _string(password.encode())
    )
    return bytes([0x10]) + _remaining(len(body)) + body


def publish_packet(topic: str, payload: bytes) -> bytes:
    """Return a QoS 0 PUBLISH."""
    body = _string(topic.encode()) + payload
    return bytes([0x30]) + _remaining(len(body)) + body


PINGREQ = bytes([0xC0, 0x00])


class MqttFastDevice(asyncio.Protocol):
    """A device on MQTT that answers every request at once."""

    def __init__(self, script: DeviceScript, mac: str, token: str) -> None:
        """Prepare; :meth:`connect` dials."""
        self.answers = FastDevice(script, mac, token)
        self.answers._prefix = '{"session_id":"","type":"mcp","payload":'  # noqa: SLF001
        self.mac, self.token = mac, token
        self.topic = f"xiaozhi/{mac.replace(':', '')}/up"
        self.bytes_in = self.bytes_out = 0
        self.connack: asyncio.Future[int] | None = None
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._pinger: asyncio.TimerHandle | None = None

    async def connect(self, host: str, port: int) -> None:
        """Dial, log in, and start pinging."""
        loop = asyncio.get_running_loop()
        self.connack = loop.create_future()
        await loop.create_connection(lambda: self, host, port)
        self._send(
            connect_packet(self.answers.client_id, self.mac, self.token, KEEPALIVE_S)
        )
        code = await asyncio.wait_for(self.connack, 30)
        if code:
            raise ConnectionError(f"CONNACK {code}")
        self._pinger = loop.call_later(KEEPALIVE_S / 2, self._ping)

    def _ping(self) -> None:
        self._send(PINGREQ)
        self._pinger = asyncio.get_running_loop().call_later(
            KEEPALIVE_S / 2, self._ping
        )

    def _send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
            self.bytes_out += len(data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        assert isinstance(transport, asyncio.Transport)  # noqa: S101
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.transport = None
        if self._pinger is not None:
            self._pinger.cancel()

    def data_received(self, data: bytes) -> None:  # noqa: D102
        self.bytes_in += len(data)
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 2:
            length, shift, pos = 0, 0, 1
            while True:
                if pos >= len(buffer):
                    return
                digit = buffer[pos]
                length += (digit & 0x7F) << shift
                pos += 1
                if not digit & 0x80:
                    break
                shift += 7
            if len(buffer) < pos + length:
                return
            kind, body = buffer[0] >> 4, bytes(buffer[pos : pos + length])
            del buffer[: pos + length]
            if kind == 2 and self.connack is not None and not self.connack.done():
                self.connack.set_result(body[1])
            elif kind == 3:
                (topic_length,) = struct.unpack_from(">H", body)
                reply = self.answers._on_text(body[2 + topic_length :].decode())  # noqa: SLF001
                if reply is not None:
                    self._send(publish_packet(self.topic, reply.encode()))
                    self.answers.replies += 1

    def close(self) -> None:
        """Disconnect."""
        if self.transport is not None:
            self.transport.close()


class MqttFleet:
    """MQTT devices on this process's loop."""

    def __init__(self, script: DeviceScript) -> None:
        """Start empty."""
        self.script = script
        self.devices: list[MqttFastDevice] = []

    async def connect(
        self, host: str, port: int, specs: Sequence[tuple[str, str]]
    ) -> dict[str, Any]:
        """Connect a device per (MAC, token)."""
        slots = asyncio.Semaphore(CONCURRENCY)
        devices = [MqttFastDevice(self.script, mac, token) for mac, token in specs]

        async def dial(device: MqttFastDevice) -> None:
            async with slots:
                await device.connect(host, port)

        started = time.perf_counter()
        results = await asyncio.gather(
            *(dial(device) for device in devices), return_exceptions=True
        )
        self.devices += devices
        errors = [repr(r) for r in results if isinstance(r, BaseException)]
        return {
            "seconds": time.perf_counter() - started,
            "failed": len(errors),
            "errors": errors[:3],
        }

    async def stats(self) -> dict[str, Any]:
        """Return requests, replies and bytes over all devices."""
        return {
            "requests": sum(d.answers.requests for d in self.devices),
            "replies": sum(d.answers.replies for d in self.devices),
            "bytes_in": sum(d.bytes_in for d in self.devices),
            "bytes_out": sum(d.bytes_out for d in self.devices),
        }

    async def reset_counts(self) -> dict[str, Any]:
        """Zero the counters."""
        for device in self.devices:
            device.answers.requests = device.answers.replies = 0
            device.bytes_in = device.bytes_out = 0
        return {}

    async def disconnect(self) -> dict[str, Any]:
        """Close every connection."""
        for device in self.devices:
            device.close()
        self.devices.clear()
        await asyncio.sleep(0.1)
        return {}

    async def close(self) -> None:
        """Disconnect everything (the child process stops)."""
        await self.disconnect()


# ------------------------------------------------------------------ endpoint


class _Accept:
    """Lets every client in; nothing happens with what they send."""

    def allowed(self, peer: str) -> bool:
        return True

    def authenticate(self, connection: Any, connect: Any) -> Any:
        return _Client(connect.client_id)

    def refused(self, peer: str, connect: Any, code: Any) -> None:
        pass  # pragma: no cover


class _Client:
    """One accepted connection; nothing happens with what it sends."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    def mqtt_message(self, topic: str, payload: bytes) -> None:
        pass

    def mqtt_closed(self) -> None:
        pass


class _Bare(asyncio.Protocol):
    """The baseline: a TCP connection that is accepted and read, nothing more."""

    connections: list[asyncio.BaseTransport] = []  # noqa: RUF012

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.append(transport)
        # As the endpoint does after CONNECT: answer with a CONNACK.
        assert isinstance(transport, asyncio.Transport)  # noqa: S101
        self._transport = transport
        self._sent = False

    def data_received(self, data: bytes) -> None:
        if not self._sent:
            self._sent = True
            self._transport.write(bytes([0x20, 0x02, 0x00, 0x00]))


async def _hold(
    n: int, script: DeviceScript, file_limit: int, *, bare: bool, traced: bool
) -> float:
    """Return bytes per connection held by a server with ``n`` idle clients."""
    from custom_components.xiaozhi.protocol.mqtt.server import (  # noqa: PLC0415
        MqttServer,
    )

    from .harness import rss_bytes, settle_memory  # noqa: PLC0415

    loop = asyncio.get_running_loop()
    server: Any
    if bare:
        server = await loop.create_server(_Bare, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
    else:
        server = MqttServer(_Accept())
        await server.start("127.0.0.1", 0)
        port = server.port
    fleet = ChildFleet(script, file_limit, MqttFleet)
    try:
        settle_memory()
        if traced:
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
        else:
            before = rss_bytes()
        specs = [(f"02:00:00:00:{i >> 8:02x}:{i & 0xFF:02x}", "t") for i in range(n)]
        result = await fleet.call("connect", "127.0.0.1", port, specs)
        if result["failed"]:
            raise RuntimeError(f"clients failed: {result['errors']}")
        await asyncio.sleep(0.5)
        settle_memory()
        after = tracemalloc.get_traced_memory()[0] if traced else rss_bytes()
        if traced:
            tracemalloc.stop()
        return (after - before) / n
    finally:
        await fleet.close()
        if bare:
            server.close()
            _Bare.connections.clear()
        else:
            await server.stop()


def _hold_here(n: int, script: DeviceScript, bare: bool, traced: bool) -> float:
    file_limit = raise_file_limit(2 * n + 256)
    return asyncio.run(_hold(n, script, file_limit, bare=bare, traced=traced))


def _fresh(n: int, script: DeviceScript, *, bare: bool, traced: bool) -> float:
    return float(
        run_in_fresh_process(_hold_here, n, script, bare, traced, what="endpoint run")
    )


def endpoint_memory(n: int, script: DeviceScript) -> dict[str, Any]:
    """Bytes per idle connection: the endpoint against a bare TCP server."""
    figures = {
        name: _fresh(n, script, bare=bare, traced=traced) / 1024
        for name, bare, traced in (
            ("rss_kb", False, False),
            ("bare_rss_kb", True, False),
            ("python_kb", False, True),
            ("bare_python_kb", True, True),
        )
    }
    return {
        "connections": n,
        **{key: round(value, 2) for key, value in figures.items()},
    }


# ------------------------------------------------------------------ idle devices


@dataclass(frozen=True, slots=True)
class IdleParams:
    """How the idle run goes."""

    keepalive: float
    window: float
    idle_window: float


async def _idle(n: int, params: IdleParams, script: DeviceScript) -> dict[str, Any]:
    from custom_components.xiaozhi.domain_data import DATA_KEY  # noqa: PLC0415

    from .harness import rss_bytes, runtime, settle_memory  # noqa: PLC0415
    from .scale import Presence, counted_home, lag_during  # noqa: PLC0415
    from .stats import ratio, summary_ms  # noqa: PLC0415

    file_limit = raise_file_limit(4 * n + 1024)
    async with counted_home(params.keepalive) as (home, counter):
        hass = home.hass
        endpoints = hass.data[DATA_KEY].endpoints
        await home.add_devices(1)  # loads the platforms' code
        entries = await home.add_devices(n)
        devices = [runtime(entry) for entry in entries]
        presence = Presence(devices)
        fleet = ChildFleet(script, file_limit, MqttFleet)
        try:
            await hass.async_block_till_done()
            idle = await lag_during(params.idle_window)
            await fleet.call("stats")  # the child is up
            settle_memory()
            rss_before = rss_bytes()
            specs = [(e.data["mac"], e.data["token"]) for e in entries]
            started = time.perf_counter()
            result = await fleet.call(
                "connect", "127.0.0.1", endpoints.mqtt.port, specs
            )
            if result["failed"]:
                raise RuntimeError(f"devices failed: {result['errors']}")
            await presence.wait_for(n)
            connect_seconds = time.perf_counter() - started
            await hass.async_block_till_done()
            settle_memory()
            rss_after = rss_bytes()
            endpoint_connections = endpoints.mqtt.connections

            await fleet.call("reset_counts")
            counter.reset()
            busy = await lag_during(params.window)
            # Stop the keep-alives (a request under way is cancelled, not
            # lost), let the devices' last replies arrive, then count.
            for device in devices:
                if device.session is not None:
                    device.session.set_keepalive(None)
            async with asyncio.timeout(60):
                while counter.in_flight:
                    await counter.idle.wait()
            await asyncio.sleep(0.2)
            ha_counts = counter.as_dict()
            device_counts = await fleet.call("stats")
            still_ready = len(presence.ready)
        finally:
            presence.close()
            await fleet.close()
    lost = (
        ha_counts["failed"]
        + ha_counts["in_flight"]
        + (device_counts["requests"] - device_counts["replies"])
    )
    idle_lag, busy_lag = summary_ms(idle.lateness), summary_ms(busy.lateness)
    per_device_minute = 60 / params.window / n
    return {
        "devices": n,
        "keepalive_s": params.keepalive,
        "mqtt_keepalive_s": KEEPALIVE_S,
        "window_s": params.window,
        "idle_lag": idle_lag,
        "lag": busy_lag,
        "lag_p99_ratio": ratio(busy_lag["p99_ms"], idle_lag["p99_ms"]),
        "rss_per_device_kb": round((rss_after - rss_before) / n / 1024, 1),
        "connect_s": round(connect_seconds, 3),
        "endpoint_connections": endpoint_connections,
        "still_connected": still_ready,
        "traffic_bytes_per_device_minute": {
            "to_device": round(device_counts["bytes_in"] * per_device_minute),
            "from_device": round(device_counts["bytes_out"] * per_device_minute),
        },
        "requests": ha_counts,
        "device_counts": device_counts,
        "lost_replies": lost,
    }


def _idle_here(n: int, params: IdleParams, script: DeviceScript) -> dict[str, Any]:
    from .harness import run  # noqa: PLC0415

    return run(lambda: _idle(n, params, script))


def idle_devices(n: int, params: IdleParams, script: DeviceScript) -> dict[str, Any]:
    """Run the idle measurement in a fresh process (clean memory figures)."""
    data: dict[str, Any] = run_in_fresh_process(
        _idle_here, n, params, script, what="idle MQTT run"
    )
    return data


def measure(n: int, params: IdleParams, script: DeviceScript) -> dict[str, Any]:
    """Run both measurements."""
    return {
        "endpoint": endpoint_memory(n, script),
        "idle": idle_devices(n, params, script),
    }
