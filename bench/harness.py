"""A real Home Assistant in this process, serving the integration on loopback.

Home Assistant is built with the test machinery of
``pytest-homeassistant-custom-component`` (registries in memory, a throw-away
configuration directory), then its own HTTP server is started on a free
loopback port: devices reach the integration exactly as on an installation,
through aiohttp, the HTTP middlewares and ``DeviceWebSocketView``.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
import gc
import logging
from pathlib import Path
import shutil
import socket
import tempfile
from typing import Any

from homeassistant import loader, runner
from homeassistant.config_entries import SOURCE_SYSTEM, ConfigEntry, ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
from homeassistant.helpers import entity_registry as er, frame
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_test_home_assistant,
)

from custom_components.xiaozhi.const import (
    CONF_BOARD,
    CONF_CLIENT_ID,
    CONF_FIRMWARE,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    URL_WEBSOCKET,
)
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from custom_components.xiaozhi.settings import SERVER_UNIQUE_ID
from simulator.cli import client_id_for

from .slow import SlowCallbacks

BOARD = "xiaozhi-sim"
FIRMWARE = "2.0.4"

# Wrappers the test machinery puts around these methods to let tests pass
# mocks; a benchmark wants Home Assistant's own code paths.
_TEST_WRAPPERS = (
    "async_add_job",
    "async_add_executor_job",
    "async_create_task_internal",
)


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_bytes() -> int:
    """Return this process's resident set size (VmRSS) in bytes."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def settle_memory() -> None:
    """Collect garbage so memory figures compare like with like."""
    gc.collect()
    gc.collect()


def run(main: Callable[[], Coroutine[Any, Any, Any]], *, timed: bool = True) -> Any:
    """Run ``main`` on an event loop configured as Home Assistant's runner does.

    ``timed``: every callback is timed meanwhile, and a dict result gets the
    slow ones (``slow_callbacks``, :mod:`bench.slow`). A run that traces
    memory is not: tracing slows every callback, and the records would be
    counted as the devices' memory.
    """
    loop = runner.create_event_loop()
    watch = SlowCallbacks() if timed else None
    try:
        asyncio.set_event_loop(loop)
        if watch is not None:
            watch.install()
        try:
            result = loop.run_until_complete(main())
        finally:
            if watch is not None:
                watch.uninstall()
        if watch is not None and isinstance(result, dict):
            result["slow_callbacks"] = watch.summary()
        return result
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def device_mac(index: int) -> str:
    """Return a distinct MAC address for device number ``index``."""
    raw = f"{0x02AA00000000 + index:012x}"
    return ":".join(raw[i : i + 2] for i in range(0, 12, 2))


def device_token(index: int) -> str:
    """Return the WebSocket token of device number ``index``."""
    return f"bench-token-{index:06d}-0123456789abcdef0123456789"


@dataclass(slots=True)
class Home:
    """A running Home Assistant with the integration and its HTTP server."""

    hass: HomeAssistant
    port: int
    entries: list[ConfigEntry] = field(default_factory=list)
    _next_index: int = 0

    @property
    def ws_url(self) -> str:
        """Return the URL devices dial."""
        return f"ws://127.0.0.1:{self.port}{URL_WEBSOCKET}"

    async def add_devices(self, count: int) -> list[ConfigEntry]:
        """Pair ``count`` new devices: one loaded config entry each."""
        added: list[ConfigEntry] = []
        for _ in range(count):
            index = self._next_index
            self._next_index += 1
            mac = device_mac(index)
            entry = MockConfigEntry(
                domain=DOMAIN,
                unique_id=mac,
                title=f"XiaoZhi bench {index}",
                data={
                    CONF_MAC: mac,
                    CONF_CLIENT_ID: client_id_for(mac),
                    CONF_TOKEN: device_token(index),
                    CONF_BOARD: BOARD,
                    CONF_FIRMWARE: FIRMWARE,
                },
            )
            entry.add_to_hass(self.hass)
            added.append(entry)
        results = await asyncio.gather(
            *(self.hass.config_entries.async_setup(e.entry_id) for e in added)
        )
        if not all(results):
            raise RuntimeError("a config entry did not set up")
        await self.hass.async_block_till_done()
        self.entries.extend(added)
        return added

    async def remove_device(self, entry: ConfigEntry) -> None:
        """Remove a device's entry and, with it, its entities."""
        await self.hass.config_entries.async_remove(entry.entry_id)
        await self.hass.async_block_till_done()
        self.entries.remove(entry)


def runtime(entry: ConfigEntry) -> XiaozhiRuntime:
    """Return the integration's runtime object of an entry."""
    device: XiaozhiRuntime = entry.runtime_data
    return device


def expected_entities(hass: HomeAssistant, entry: ConfigEntry) -> tuple[int, int]:
    """Return (registered, enabled) entity counts of an entry."""
    entries = er.async_entries_for_config_entry(er.async_get(hass), entry.entry_id)
    enabled = sum(1 for item in entries if item.disabled_by is None)
    return len(entries), enabled


def entities_complete(
    hass: HomeAssistant, entry: ConfigEntry, registered: int, enabled: int
) -> bool:
    """Return True when the entry has its entities registered and with states."""
    entries = er.async_entries_for_config_entry(er.async_get(hass), entry.entry_id)
    if len(entries) < registered:
        return False
    with_state = sum(
        1
        for item in entries
        if item.disabled_by is None and hass.states.get(item.entity_id) is not None
    )
    return with_state >= enabled


@asynccontextmanager
async def home_assistant() -> AsyncIterator[Home]:
    """Run Home Assistant with the integration; yield it once it serves HTTP.

    Use it once per event loop (see :func:`run`): on the way out it shuts the
    loop's executor down, so that storage writes land before the throw-away
    configuration directory is removed.
    """
    logging.getLogger("homeassistant").setLevel(logging.ERROR)
    # The ffmpeg integration (a dependency of the voice pipeline) looks for the
    # binary at setup; the integration never runs it (PyAV converts audio).
    logging.getLogger("haffmpeg").setLevel(logging.CRITICAL)
    logging.getLogger("custom_components.xiaozhi").setLevel(logging.ERROR)
    config_dir = tempfile.mkdtemp(prefix="xiaozhi-bench-")
    try:
        async with async_test_home_assistant(config_dir=config_dir) as hass:
            for name in _TEST_WRAPPERS:
                hass.__dict__.pop(name, None)
            hass.data.pop(loader.DATA_CUSTOM_COMPONENTS, None)
            frame.async_setup(hass)
            port = free_port()
            await async_process_ha_core_config(
                hass, {"internal_url": f"http://127.0.0.1:{port}"}
            )
            http_conf = {"server_host": ["127.0.0.1"], "server_port": port}
            if not await async_setup_component(hass, "http", {"http": http_conf}):
                raise RuntimeError("http did not set up")
            # The voice stack needs Home Assistant's own integration, as a
            # real installation always has.
            if not await async_setup_component(hass, "homeassistant", {}):
                raise RuntimeError("homeassistant did not set up")
            # The server entry, with the MQTT + UDP endpoint on free ports.
            result = await hass.config_entries.flow.async_init(
                DOMAIN,
                context={"source": SOURCE_SYSTEM},
                data={"transport": "auto", "mqtt_port": 0, "udp_port": 0},
            )
            if result.get("type") != "create_entry":
                raise RuntimeError("the integration did not set up")
            await hass.http.start()
            await hass.async_block_till_done()
            home = Home(hass, port)
            try:
                yield home
            finally:
                loaded = [
                    entry
                    for entry in hass.config_entries.async_entries(DOMAIN)
                    if entry.state is ConfigEntryState.LOADED
                    and entry.unique_id != SERVER_UNIQUE_ID
                ]
                await asyncio.gather(
                    *(hass.config_entries.async_unload(e.entry_id) for e in loaded)
                )
                await hass.async_stop(force=True)
                # Storage writes finish in the executor; let them land first.
                await hass.loop.shutdown_default_executor()
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)


async def wait_connected(device: XiaozhiRuntime, timeout: float = 30.0) -> None:
    """Wait until the device's session finished its handshake."""
    changed = asyncio.Event()
    remove = device.entry_data.async_subscribe_state(changed.set)
    try:
        async with asyncio.timeout(timeout):
            while not device.connected:
                await changed.wait()
                changed.clear()
    finally:
        remove()
