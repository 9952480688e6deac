"""Handshake: from a device dialling in to all of its entities in Home Assistant.

Every round pairs a new device (a fresh config entry, so no entity exists
yet), then times, from the moment the fast device starts its WebSocket
upgrade:

``hello``     the upgrade and the hello exchange are done;
``answered``  the device sent its last reply (``initialize``, every
              ``tools/list`` page, the status);
``entities``  the entity registry holds every entity the first round created
              for its device, and every enabled one has a state.

The fast device answers every request at once, yet each answer still costs a
round trip on loopback; ``net`` subtracts the requests it answered times the
raw aiohttp round trip measured in the same rounds, leaving Home Assistant's
own share. The entry is removed between rounds (not timed).
"""

import asyncio
import time
from typing import Any

import aiohttp
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import EVENT_STATE_CHANGED
from homeassistant.core import Event, HomeAssistant, callback
from homeassistant.helpers import entity_registry as er

from .device import DeviceScript, FastDevice, RawServer
from .harness import Home, expected_entities, runtime, wait_connected
from .stats import NS_PER_MS, percentile, summary_us

RAW_SAMPLES_PER_ROUND = 20
TIMEOUT = 30.0


class EntityWatch:
    """Note the moment an entry has all its entities registered, with states."""

    def __init__(
        self, hass: HomeAssistant, entry: ConfigEntry, registered: int, enabled: int
    ) -> None:
        """Start watching state and registry changes of ``entry``."""
        self.hass = hass
        self.entry_id = entry.entry_id
        self.registered = registered
        self.enabled = enabled
        self.registry = er.async_get(hass)
        self.done_ns = 0
        self.finished: asyncio.Future[None] = hass.loop.create_future()
        self.with_state: set[str] = {
            item.entity_id
            for item in er.async_entries_for_config_entry(self.registry, self.entry_id)
            if hass.states.get(item.entity_id) is not None
        }
        self._unsubscribe = [
            hass.bus.async_listen(EVENT_STATE_CHANGED, self._on_state),
            hass.bus.async_listen(er.EVENT_ENTITY_REGISTRY_UPDATED, self._on_registry),
        ]

    def close(self) -> None:
        """Stop watching."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    @callback
    def _on_state(self, event: Event[Any]) -> None:
        entity_id = event.data["entity_id"]
        item = self.registry.async_get(entity_id)
        if (
            item is not None
            and item.config_entry_id == self.entry_id
            and event.data["new_state"] is not None
        ):
            self.with_state.add(entity_id)
            self._check()

    @callback
    def _on_registry(self, event: Event[Any]) -> None:
        del event
        self._check()

    def _check(self) -> None:
        if self.finished.done() or len(self.with_state) < self.enabled:
            return
        entries = er.async_entries_for_config_entry(self.registry, self.entry_id)
        if len(entries) >= self.registered:
            self.done_ns = time.perf_counter_ns()
            self.finished.set_result(None)


async def _one_round(
    home: Home,
    script: DeviceScript,
    http: aiohttp.ClientSession,
    expected: tuple[int, int] | None,
) -> tuple[dict[str, int], tuple[int, int]]:
    """Pair, connect and time one device; return timings and entity counts."""
    hass = home.hass
    (entry,) = await home.add_devices(1)
    device = FastDevice(script, entry.data["mac"], entry.data["token"])
    watch = EntityWatch(hass, entry, *(expected or (0, 0)))
    try:
        start = time.perf_counter_ns()
        await device.connect(http, home.ws_url)
        hello = time.perf_counter_ns()
        if expected is None:
            # Calibration: wait for the device, then for everything it causes.
            await wait_connected(runtime(entry))
            await hass.async_block_till_done()
            watch.done_ns = time.perf_counter_ns()
        else:
            async with asyncio.timeout(TIMEOUT):
                await watch.finished
        await hass.async_block_till_done()
        counts = expected_entities(hass, entry)
        timings = {
            "hello": hello - start,
            "answered": device.last_reply_ns - start,
            "entities": watch.done_ns - start,
            "requests": device.requests,
        }
    finally:
        watch.close()
        await device.close()
    await home.remove_device(entry)
    return timings, counts


async def measure(
    home: Home, script: DeviceScript, *, iterations: int, warmup: int
) -> dict[str, Any]:
    """Time ``iterations`` handshakes after ``warmup`` ones; return summaries."""
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    raw = RawServer()
    await raw.start()
    raw_device = FastDevice(script, "02:00:00:00:00:00", "raw")
    await raw_device.connect(http, raw.url)
    raw_link = await raw.accept()
    raw.hold_links = False
    raw_connect_ns: list[int] = []
    rounds: list[dict[str, int]] = []
    raw_ns: list[int] = []
    expected: tuple[int, int] | None = None
    try:
        for index in range(max(1, warmup) + iterations):
            timings, counts = await _one_round(home, script, http, expected)
            if expected is None:
                expected = counts
            elif counts != expected:
                raise RuntimeError(f"entity counts {counts} differ from {expected}")
            raw_ns.extend(
                [
                    await raw.round_trip(raw_link, volume)
                    for volume in range(RAW_SAMPLES_PER_ROUND)
                ]
            )
            probe = FastDevice(script, "02:00:00:00:00:01", "raw")
            start = time.perf_counter_ns()
            await probe.connect(http, raw.url)
            raw_connect_ns.append(time.perf_counter_ns() - start)
            await probe.close()
            if index >= max(1, warmup):
                rounds.append(timings)
    finally:
        await raw.stop()
        await raw_device.close()
        await http.close()
    if expected is None:
        raise RuntimeError("no handshake round ran")
    raw_p50 = percentile(raw_ns, 0.5)
    requests = rounds[0]["requests"] if rounds else 0
    entities_ns = [r["entities"] for r in rounds]
    net_ns = [r["entities"] - r["requests"] * raw_p50 for r in rounds]
    entities = summary_us(entities_ns)
    net = summary_us([int(value) for value in net_ns])
    return {
        "iterations": iterations,
        "tools": len(script.tool_names),
        "tools_list_pages": script.page_count,
        "entities_registered": expected[0],
        "entities_enabled": expected[1],
        "device_requests": requests,
        "raw_rtt": summary_us(raw_ns),
        "raw_connect": summary_us(raw_connect_ns[-iterations:]),
        "hello": summary_us([r["hello"] for r in rounds]),
        "answered": summary_us([r["answered"] for r in rounds]),
        "entities": entities,
        "net": net,
        "net_p50_ms": round(net["p50_us"] / 1000, 3),
        "net_p99_ms": round(net["p99_us"] / 1000, 3),
        "gross_p50_ms": round(percentile(entities_ns, 0.5) / NS_PER_MS, 3),
    }
