"""Firmware updates: ten devices updating at once.

A local release server holds a release whose zip carries a 3 MB application
image (what a xiaozhi build weighs). Devices on MQTT + UDP, in a child
process, download what ``self.upgrade_firmware`` names, check it and
reboot into it; Home Assistant checks the image, serves it and waits for
each device to come back with the new version. Reported: Home Assistant's
event-loop lag p99 meanwhile, the throughput of the downloads (loopback:
the figure is Home Assistant's own cost, not Wi-Fi's), and the time from
``update.install`` to the confirmed version.
"""

import asyncio
import multiprocessing
from multiprocessing.connection import Connection
import time
from typing import Any

import aiohttp
from aiohttp import web
from homeassistant.helpers import entity_registry as er

from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.protocol.ota_image import DeviceHardware, Partition
from custom_components.xiaozhi.settings import CONF_FIRMWARE_RELEASES_URL
from simulator import SimulatedDevice
from simulator.firmware_image import app_image, merged_binary, release_zip

from .harness import (
    Home,
    device_mac,
    device_token,
    home_assistant,
    runtime,
    wait_connected,
)
from .scale import Ticker
from .stats import percentile
from .voice import _device_config

BOARD = "xiaozhi-sim"
NEW = "9.0.0"
IMAGE_BYTES = 3 * 1024 * 1024


async def _release_server(image: bytes) -> tuple[web.AppRunner, str]:
    archive = release_zip(merged_binary(image))
    name = f"v{NEW}_{BOARD}.zip"

    async def listing(request: web.Request) -> web.Response:
        url = str(request.url.with_path(f"/download/{name}"))
        return web.json_response(
            [
                {
                    "tag_name": f"v{NEW}",
                    "name": NEW,
                    "body": "",
                    "html_url": None,
                    "draft": False,
                    "prerelease": False,
                    "assets": [
                        {
                            "name": name,
                            "size": len(archive),
                            "browser_download_url": url,
                        }
                    ],
                }
            ]
        )

    async def download(_request: web.Request) -> web.Response:
        return web.Response(body=archive)

    app = web.Application()
    app.router.add_get("/releases", listing)
    app.router.add_get("/download/{name}", download)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/releases"


def _child_main(
    conn: Connection, specs: list[tuple[str, str]], url: str, port: int
) -> None:
    asyncio.run(_child_loop(conn, specs, url, port))


async def _child_loop(
    conn: Connection, specs: list[tuple[str, str]], url: str, port: int
) -> None:
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        devices = [
            SimulatedDevice(
                _device_config(
                    mac, token, url, port, firmware="2.5.0", reboot_delay=0.1
                ),
                http=http,
            )
            for mac, token in specs
        ]
        try:
            await asyncio.gather(*(device.connect() for device in devices))
            conn.send("ready")
            await loop.run_in_executor(None, conn.recv)  # "stop"
            conn.send([device.upgrades for device in devices])
        finally:
            for device in devices:
                await device.stop()
            conn.send(None)


async def measure(home: Home, count: int) -> dict[str, Any]:
    """Update ``count`` devices at once; lag, throughput and time to confirm."""
    image = app_image(version=NEW, payload=IMAGE_BYTES)
    runner, releases_url = await _release_server(image)
    hass = home.hass
    server = hass.config_entries.async_entry_for_domain_unique_id("xiaozhi", "server")
    assert server is not None  # noqa: S101
    hass.config_entries.async_update_entry(
        server, options={**server.options, CONF_FIRMWARE_RELEASES_URL: releases_url}
    )
    entries = await home.add_devices(count)
    port = hass.data[DATA_KEY].endpoints.mqtt.port
    first = len(home.entries) - count
    specs = [(device_mac(first + i), device_token(first + i)) for i in range(count)]
    context = multiprocessing.get_context("spawn")
    conn, child = context.Pipe()
    process = context.Process(
        target=_child_main, args=(child, specs, home.ws_url, port), daemon=True
    )
    process.start()
    child.close()
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, conn.recv) == "ready"  # noqa: S101
    hardware = DeviceHardware(
        chip="esp32s3",
        board=BOARD,
        manufacturer=None,
        slots=(Partition("ota_0", 0, 0x10, 0x20000, 0x3F0000),),
    )
    registry = er.async_get(hass)
    entity_ids = []
    for entry in entries:
        await wait_connected(runtime(entry))
        runtime(entry).entry_data.async_set_hardware(hardware)
        entity_id = registry.async_get_entity_id(
            "update", "xiaozhi", f"{runtime(entry).entry_data.mac}-firmware"
        )
        assert entity_id is not None  # noqa: S101
        entity_ids.append(entity_id)
    await hass.data[DATA_KEY].releases.async_refresh()
    await asyncio.gather(
        *(
            hass.services.async_call(
                "homeassistant", "update_entity", {"entity_id": e}, blocking=True
            )
            for e in entity_ids
        )
    )

    async def install(entity_id: str) -> float:
        started = time.perf_counter()
        await hass.services.async_call(
            "update", "install", {"entity_id": entity_id}, blocking=True
        )
        return time.perf_counter() - started

    ticker = Ticker()
    ticker.start()
    started = time.perf_counter()
    try:
        durations = await asyncio.gather(*(install(e) for e in entity_ids))
    finally:
        elapsed = time.perf_counter() - started
        lags = await ticker.stop()
        conn.send("stop")
        upgrades = await loop.run_in_executor(None, conn.recv)
        await loop.run_in_executor(None, conn.recv)
        await loop.run_in_executor(None, process.join, 10)
        await runner.cleanup()
    flashed = sum(1 for device in upgrades for version, _ in device if version == NEW)
    return {
        "devices": count,
        "image_mb": len(image) / 2**20,
        "flashed": flashed,
        "lag_ms": {
            "p50": percentile([lag * 1000 for lag in lags], 0.5),
            "p99": percentile([lag * 1000 for lag in lags], 0.99),
        },
        "throughput_mb_s": count * len(image) / 2**20 / elapsed,
        "install_to_confirmed_s": {
            "p50": percentile(list(durations), 0.5),
            "max": max(durations),
        },
    }


async def run(count: int) -> dict[str, Any]:
    """Run the measurement on a Home Assistant of its own."""
    async with home_assistant() as home:
        return await measure(home, count)
