"""Many fast devices on one aiohttp client session, here or in a child process.

:class:`Fleet` runs the devices on the caller's event loop.
:class:`FleetProcess` runs the same code in a child process, so the devices'
own work does not run on Home Assistant's loop nor count in its memory; the
parent drives it over a pipe. Both offer the same coroutines.

This module does not import Home Assistant.
"""

import asyncio
from collections.abc import Sequence
import multiprocessing
from multiprocessing.connection import Connection
import resource
import time
from typing import Any

import aiohttp

from .device import DeviceScript, FastDevice

type DeviceSpec = tuple[str, str]  # (MAC, token)

# Devices dialling at the same time; the rest wait for a free slot, as
# firmware retrying with back-off would spread out.
CONNECT_CONCURRENCY = 64


class Fleet:
    """Devices on this process's event loop."""

    def __init__(self, script: DeviceScript) -> None:
        """Prepare an empty fleet; sessions open on first use."""
        self.script = script
        self.devices: list[FastDevice] = []
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, force_close=True)
            )
        return self._http

    async def connect(
        self, url: str, specs: Sequence[DeviceSpec], concurrency: int
    ) -> dict[str, Any]:
        """Connect a device per spec; return how long it took and failures."""
        http = self._session()
        slots = asyncio.Semaphore(concurrency)
        devices = [FastDevice(self.script, mac, token) for mac, token in specs]

        async def dial(device: FastDevice) -> None:
            async with slots:
                await device.connect(http, url)

        start = time.perf_counter()
        results = await asyncio.gather(
            *(dial(device) for device in devices), return_exceptions=True
        )
        elapsed = time.perf_counter() - start
        failures = [repr(r) for r in results if isinstance(r, BaseException)]
        self.devices.extend(
            d for d, r in zip(devices, results, strict=True) if r is None
        )
        return {"seconds": elapsed, "failed": len(failures), "errors": failures[:3]}

    async def disconnect(self) -> dict[str, Any]:
        """Close every device's link."""
        devices, self.devices = self.devices, []
        await asyncio.gather(*(device.close() for device in devices))
        return {"closed": len(devices)}

    async def stats(self) -> dict[str, Any]:
        """Return requests received and replies sent, over all devices."""
        return {
            "devices": len(self.devices),
            "connected": sum(1 for device in self.devices if device.connected),
            "requests": sum(device.requests for device in self.devices),
            "replies": sum(device.replies for device in self.devices),
        }

    async def reset_counts(self) -> dict[str, Any]:
        """Zero the request and reply counters."""
        for device in self.devices:
            device.requests = 0
            device.replies = 0
        return {}

    async def close(self) -> None:
        """Disconnect everything and close the client session."""
        await self.disconnect()
        if self._http is not None:
            await self._http.close()
            self._http = None


def _child_main(conn: Connection, script: DeviceScript, file_limit: int) -> None:
    """Serve fleet commands from the parent until told to stop."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < file_limit:
        resource.setrlimit(
            resource.RLIMIT_NOFILE,
            (
                file_limit if hard == resource.RLIM_INFINITY else min(file_limit, hard),
                hard,
            ),
        )
    asyncio.run(_child_loop(conn, script))


async def _child_loop(conn: Connection, script: DeviceScript) -> None:
    loop = asyncio.get_running_loop()
    fleet = Fleet(script)
    try:
        while True:
            command, args = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                break
            method = getattr(fleet, command)
            try:
                result = await method(*args)
            except Exception as err:  # noqa: BLE001 - reported to the parent
                conn.send(("error", repr(err)))
            else:
                conn.send(("ok", result))
    finally:
        await fleet.close()
        conn.send(("ok", None))


class FleetProcess:
    """The same devices in a child process of their own."""

    def __init__(self, script: DeviceScript, file_limit: int) -> None:
        """Start the child process."""
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_child_main, args=(child, script, file_limit), daemon=True
        )
        self._process.start()
        child.close()

    async def _call(self, command: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        self._conn.send((command, args))
        status, result = await loop.run_in_executor(None, self._conn.recv)
        if status != "ok":
            raise RuntimeError(f"device process failed: {result}")
        return result

    async def connect(
        self, url: str, specs: Sequence[DeviceSpec], concurrency: int
    ) -> dict[str, Any]:
        """Connect a device per spec in the child process."""
        result: dict[str, Any] = await self._call(
            "connect", url, list(specs), concurrency
        )
        return result

    async def disconnect(self) -> dict[str, Any]:
        """Close every device's link."""
        result: dict[str, Any] = await self._call("disconnect")
        return result

    async def stats(self) -> dict[str, Any]:
        """Return requests received and replies sent, over all devices."""
        result: dict[str, Any] = await self._call("stats")
        return result

    async def reset_counts(self) -> dict[str, Any]:
        """Zero the request and reply counters."""
        result: dict[str, Any] = await self._call("reset_counts")
        return result

    async def close(self) -> None:
        """Stop the child process."""
        if self._process.is_alive():
            await self._call("stop")
        await asyncio.get_running_loop().run_in_executor(None, self._process.join, 10)
        self._conn.close()
