"""Scale: many devices on one Home Assistant, with keep-alive flowing.

Each size runs in a fresh worker process (memory figures do not inherit a
previous size's heap) with its own Home Assistant, one config entry per
device and the keep-alive interval shortened to ``keepalive`` seconds. The
devices run in a child process of their own by default (``--devices
process``), so Home Assistant's event loop and memory are measured alone;
``--devices inline`` puts them on Home Assistant's loop instead (client and
server then share one loop and one CPU, and the RSS includes the clients).

Per size:

1. the entries are set up (one extra entry first loads the platforms' code);
   resident memory (``VmRSS``) per paired, unconnected entry;
2. loop lag with every device paired and none connected (the baseline): a
   ticker asks to wake every 10 ms and records how late it wakes;
3. memory: every device connects for the first time (its entities are
   created); ``VmRSS`` growth per device. ``tracemalloc`` changes how memory
   is allocated, so the Python-allocated bytes of the same step (by
   allocating package) come from a second, otherwise identical worker;
4. connect rate: every device drops and dials again, up to
   ``CONNECT_CONCURRENCY`` at a time, timed until every session is ready;
   the same fleet dialling a bare aiohttp server is the baseline;
5. loop lag while every device is connected and keep-alives flow for
   ``window`` seconds, with the garbage collections meanwhile;
6. a burst of one concurrent ``async_call_tool`` per device;
7. lost replies: every request Home Assistant sent (keep-alives and the
   burst) against how each ended; the devices count what they received and
   answered.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
import contextlib
from dataclasses import asdict, dataclass
import gc
import time
import tracemalloc
from typing import Any
from unittest.mock import patch

from homeassistant.config_entries import ConfigEntry

from custom_components.xiaozhi.protocol import McpClient, McpError, XiaozhiError
from custom_components.xiaozhi.protocol.firmware import VOLUME_TOOL
from custom_components.xiaozhi.runtime import XiaozhiRuntime

from .device import DeviceScript, RawServer
from .fleet import (
    CONNECT_CONCURRENCY,
    Fleet,
    FleetProcess,
    raise_file_limit,
    run_in_fresh_process,
)
from .harness import (
    Home,
    home_assistant,
    rss_bytes,
    run,
    runtime,
    settle_memory,
)
from .stats import ratio, summary_ms

TICK = 0.010
MODE_MAIN = "main"
MODE_TRACEMALLOC = "tracemalloc"
MODE_BOTH = "both"
WAIT_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class ScaleParams:
    """How one size is run."""

    keepalive: float
    window: float
    idle_window: float
    devices: str = "process"
    concurrency: int = CONNECT_CONCURRENCY
    # tracemalloc in a process of its own (exact RSS); False saves a process
    # start (smoke runs) at the price of RSS figures disturbed by tracemalloc.
    separate_tracemalloc: bool = True


class RequestCounter:
    """Count every request Home Assistant sends and how each one ends."""

    def __init__(self) -> None:
        """Start at zero."""
        self.sent = 0
        self.answered = 0
        self.failed = 0
        self.cancelled = 0
        self.errors: list[str] = []
        self.idle = asyncio.Event()
        # Requests under way, whenever they were sent: a reset does not touch
        # it (what was sent before the reset ends after it).
        self.in_flight = 0

    def reset(self) -> None:
        """Start counting again."""
        self.sent = self.answered = self.failed = self.cancelled = 0
        self.errors.clear()

    def as_dict(self) -> dict[str, Any]:
        """Return the counts."""
        return {
            "sent": self.sent,
            "answered": self.answered,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "in_flight": self.in_flight,
            "errors": self.errors[:3],
        }

    def wrap(
        self, original: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """Return ``McpClient.request`` with counting around it."""

        async def request(
            client: McpClient, method: str, params: Any, timeout: float
        ) -> Any:
            self.sent += 1
            self.in_flight += 1
            self.idle.clear()
            try:
                result = await original(client, method, params, timeout)
            except McpError:
                self.answered += 1
                raise
            except XiaozhiError as err:
                self.failed += 1
                self.errors.append(f"{method}: {err!r}")
                raise
            except BaseException:
                self.cancelled += 1
                raise
            else:
                self.answered += 1
            finally:
                self.in_flight -= 1
                if not self.in_flight:
                    self.idle.set()
            return result

        return request


class Ticker:
    """Wake every ``interval`` seconds and record how late each wake-up is."""

    def __init__(self, interval: float = TICK) -> None:
        """Prepare; :meth:`start` begins ticking."""
        self.interval = interval
        self.lateness: list[float] = []
        # Garbage collections meanwhile: (generation, seconds), the usual
        # cause of the longest stalls.
        self.collections: list[tuple[int, float]] = []
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin ticking on the running loop."""
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> list[float]:
        """Stop and return the lateness samples in seconds."""
        gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.lateness

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            elapsed = time.perf_counter() - self._gc_started
            self.collections.append((info["generation"], elapsed))

    def gc_summary(self) -> dict[str, Any]:
        """Return how many collections ran, the longest and the total, in ms."""
        pauses = [elapsed for _generation, elapsed in self.collections]
        return {
            "count": len(pauses),
            "full": sum(1 for generation, _ in self.collections if generation == 2),
            "max_ms": round(max(pauses, default=0.0) * 1000, 3),
            "total_ms": round(sum(pauses) * 1000, 3),
        }

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.interval
            await asyncio.sleep(self.interval)
            self.lateness.append(max(0.0, loop.time() - due))


async def lag_during(seconds: float) -> Ticker:
    """Tick for ``seconds``; return the stopped ticker with its samples."""
    ticker = Ticker()
    ticker.start()
    await asyncio.sleep(seconds)
    await ticker.stop()
    return ticker


class Presence:
    """Follow which devices have a ready session."""

    def __init__(self, devices: Sequence[XiaozhiRuntime]) -> None:
        """Listen to every device."""
        self.devices = list(devices)
        self.ready: set[str] = {d.entry_data.mac for d in self.devices if d.connected}
        self._changed = asyncio.Event()
        self._remove = [
            d.entry_data.async_subscribe_state(self._listener(d)) for d in self.devices
        ]

    def _listener(self, device: XiaozhiRuntime) -> Callable[[], None]:
        def update() -> None:
            if device.connected:
                self.ready.add(device.entry_data.mac)
            else:
                self.ready.discard(device.entry_data.mac)
            self._changed.set()

        return update

    async def wait_for(self, count: int) -> None:
        """Wait until exactly ``count`` devices are ready."""
        async with asyncio.timeout(WAIT_TIMEOUT):
            while len(self.ready) != count:
                await self._changed.wait()
                self._changed.clear()

    def close(self) -> None:
        """Stop listening."""
        for remove in self._remove:
            remove()


async def _connect_timed(
    fleet: Fleet | FleetProcess,
    presence: Presence,
    home: Home,
    entries: Sequence[ConfigEntry],
    concurrency: int,
) -> float:
    specs = [(e.data["mac"], e.data["token"]) for e in entries]
    start = time.perf_counter()
    result = await fleet.connect(home.ws_url, specs, concurrency)
    if result["failed"]:
        raise RuntimeError(f"{result['failed']} devices failed: {result['errors']}")
    await presence.wait_for(len(entries))
    return time.perf_counter() - start


@contextlib.asynccontextmanager
async def counted_home(
    keepalive: float,
) -> AsyncIterator[tuple[Home, RequestCounter]]:
    """Run Home Assistant, its keep-alive every ``keepalive`` s, requests counted."""
    counter = RequestCounter()
    with (
        patch("custom_components.xiaozhi.runtime.KEEPALIVE_INTERVAL", keepalive),
        patch.object(McpClient, "request", counter.wrap(McpClient.request)),
    ):
        async with home_assistant() as home:
            yield home, counter


async def _worker(
    n: int, params: ScaleParams, script: DeviceScript, mode: str
) -> dict[str, Any]:
    file_limit = raise_file_limit(4 * n + 1024)
    async with counted_home(params.keepalive) as (home, counter):
        fleet: Fleet | FleetProcess = (
            FleetProcess(script, file_limit)
            if params.devices == "process"
            else Fleet(script)
        )
        try:
            if mode == MODE_TRACEMALLOC:
                return await _python_memory(home, n, params, fleet)
            result = await _scale(home, n, params, fleet, counter)
            if mode == MODE_BOTH:
                result |= await _python_memory(home, n, params, fleet)
            return result
        finally:
            await fleet.close()


def _package(filename: str) -> str:
    """Return who allocated: the integration, aiohttp, Home Assistant, other."""
    for marker, name in (
        ("custom_components/xiaozhi", "integration"),
        ("site-packages/aiohttp", "aiohttp"),
        ("site-packages/homeassistant", "homeassistant"),
        ("/asyncio/", "asyncio"),
    ):
        if marker in filename:
            return name
    return "other"


async def _python_memory(
    home: Home, n: int, params: ScaleParams, fleet: Fleet | FleetProcess
) -> dict[str, Any]:
    """Measure Python-allocated bytes of connecting ``n`` devices, by package."""
    entries = await home.add_devices(n)
    presence = Presence([runtime(entry) for entry in entries])
    try:
        await home.hass.async_block_till_done()
        settle_memory()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        await _connect_timed(fleet, presence, home, entries, params.concurrency)
        await home.hass.async_block_till_done()
        settle_memory()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        await fleet.disconnect()
        await presence.wait_for(0)
    finally:
        presence.close()
    by_package: dict[str, int] = {}
    for stat in after.compare_to(before, "filename"):
        name = _package(stat.traceback[0].filename)
        by_package[name] = by_package.get(name, 0) + stat.size_diff
    return {
        "python_per_device_kb": round(sum(by_package.values()) / n / 1024, 1),
        "python_by_package_kb": {
            name: round(size / n / 1024, 1)
            for name, size in sorted(by_package.items(), key=lambda kv: -kv[1])
        },
    }


async def _scale(
    home: Home,
    n: int,
    params: ScaleParams,
    fleet: Fleet | FleetProcess,
    counter: RequestCounter,
) -> dict[str, Any]:
    hass = home.hass
    # One entry first loads the platforms' code, so that is not counted below.
    await home.add_devices(1)
    settle_memory()
    rss_empty = rss_bytes()
    started = time.perf_counter()
    entries = await home.add_devices(n)
    setup_seconds = time.perf_counter() - started
    devices = [runtime(entry) for entry in entries]
    presence = Presence(devices)
    raw = RawServer()
    raw.hold_links = False
    await raw.start()
    try:
        # 1. The loop at rest, every device paired but none connected.
        await hass.async_block_till_done()
        settle_memory()
        rss_paired = rss_bytes()
        idle = await lag_during(params.idle_window)

        # 2. First connection of every device: entities are created.
        settle_memory()
        rss_before = rss_bytes()
        cold_seconds = await _connect_timed(
            fleet, presence, home, entries, params.concurrency
        )
        await hass.async_block_till_done()
        settle_memory()
        rss_after = rss_bytes()

        # 3. Connect rate, against the same fleet dialling a bare server.
        await fleet.disconnect()
        await presence.wait_for(0)
        await hass.async_block_till_done()
        raw_result = await fleet.connect(
            raw.url, [(f"raw-{i}", "raw") for i in range(n)], params.concurrency
        )
        raw_seconds = raw_result["seconds"]
        await fleet.disconnect()
        connect_seconds = await _connect_timed(
            fleet, presence, home, entries, params.concurrency
        )
        await hass.async_block_till_done()

        # 4. Keep-alives flowing.
        await fleet.reset_counts()
        counter.reset()
        busy = await lag_during(params.window)

        # 5. A burst of tool calls, one per device, all at once.
        burst_ticker = Ticker()
        burst_ticker.start()
        started = time.perf_counter()
        results = await asyncio.gather(
            *(
                device.commands.async_call_tool(VOLUME_TOOL, {"volume": i % 101})
                for i, device in enumerate(devices)
            ),
            return_exceptions=True,
        )
        burst_seconds = time.perf_counter() - started
        burst_lag = await burst_ticker.stop()
        burst_ok = sum(
            1
            for result in results
            if not isinstance(result, BaseException) and not result.is_error
        )

        # 6. Stop the keep-alives between two requests, then count.
        async with asyncio.timeout(WAIT_TIMEOUT):
            while counter.in_flight:
                await counter.idle.wait()
        for device in devices:
            if device.session is not None:
                device.session.set_keepalive(None)
        await asyncio.sleep(0.05)
        await hass.async_block_till_done()
        ha_counts = counter.as_dict()
        device_counts = await fleet.stats()
        still_ready = len(presence.ready)
        await fleet.disconnect()
        await presence.wait_for(0)
    finally:
        presence.close()
        await raw.stop()

    lost = (
        ha_counts["failed"]
        + ha_counts["in_flight"]
        + (device_counts["requests"] - device_counts["replies"])
    )
    idle_lag = summary_ms(idle.lateness)
    busy_lag = summary_ms(busy.lateness)
    return {
        "devices": n,
        "devices_in": params.devices,
        "keepalive_s": params.keepalive,
        "window_s": params.window,
        "entry_setup_s": round(setup_seconds, 3),
        "idle_lag": idle_lag,
        "lag": busy_lag,
        "lag_p99_ratio": ratio(busy_lag["p99_ms"], idle_lag["p99_ms"]),
        "gc_in_window": busy.gc_summary(),
        "burst_lag": summary_ms(burst_lag),
        "rss_per_entry_kb": round((rss_paired - rss_empty) / n / 1024, 1),
        "rss_per_device_kb": round((rss_after - rss_before) / n / 1024, 1),
        "cold_connect_s": round(cold_seconds, 3),
        "connect_s": round(connect_seconds, 3),
        "connects_per_s": round(n / connect_seconds, 1),
        "raw_connect_s": round(raw_seconds, 3),
        "raw_connects_per_s": round(n / raw_seconds, 1),
        "connect_ratio": ratio(connect_seconds, raw_seconds),
        "burst_s": round(burst_seconds, 4),
        "burst_ok": burst_ok,
        "requests": ha_counts,
        "device_counts": device_counts,
        "still_ready": still_ready,
        "lost_replies": lost,
    }


def _run_worker(
    n: int, params: ScaleParams, script: DeviceScript, mode: str
) -> dict[str, Any]:
    """Run one size in this (fresh) process."""
    return run(lambda: _worker(n, params, script, mode), timed=mode != MODE_TRACEMALLOC)


def _in_fresh_process(
    n: int, params: ScaleParams, script: DeviceScript, mode: str
) -> dict[str, Any]:
    data: dict[str, Any] = run_in_fresh_process(
        _run_worker, n, params, script, mode, what=f"scale run with {n} devices"
    )
    return data


def run_size(n: int, params: ScaleParams, script: DeviceScript) -> dict[str, Any]:
    """Run one size: timings and RSS in a fresh process, tracemalloc in another.

    ``tracemalloc`` changes how memory is allocated (and RSS with it), so the
    Python-allocated bytes come from a separate, otherwise identical run.
    """
    if params.separate_tracemalloc:
        data = _in_fresh_process(n, params, script, MODE_MAIN)
        data |= _in_fresh_process(n, params, script, MODE_TRACEMALLOC)
    else:
        data = _in_fresh_process(n, params, script, MODE_BOTH)
    data["params"] = asdict(params)
    return data
