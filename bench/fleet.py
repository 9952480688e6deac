"""Many fast devices on one aiohttp client session, here or in a child process.

:class:`Fleet` runs the devices on the caller's event loop.
:class:`FleetProcess` runs the same code in a child process, so the devices'
own work does not run on Home Assistant's loop nor count in its memory; the
parent drives it over a pipe. Both offer the same coroutines.
:class:`ChildFleet` does the same for any fleet (the MQTT one), and
:func:`run_in_fresh_process` runs a whole measurement in a new process.

This module does not import Home Assistant.
"""

import asyncio
from collections.abc import Callable, Sequence
import multiprocessing
from multiprocessing.connection import Connection
import resource
import time
from typing import Any, Protocol

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


def raise_file_limit(wanted: int) -> int:
    """Raise the soft limit of open files towards ``wanted``; return the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


class CommandFleet(Protocol):
    """Devices driven by name from the parent: ``close`` ends them."""

    async def close(self) -> None:
        """Disconnect everything."""


def _child_main(
    conn: Connection,
    fleet_type: Callable[[DeviceScript], CommandFleet],
    script: DeviceScript,
    file_limit: int,
) -> None:
    """Serve fleet commands from the parent until told to stop."""
    raise_file_limit(file_limit)
    asyncio.run(_child_loop(conn, fleet_type(script)))


async def _child_loop(conn: Connection, fleet: CommandFleet) -> None:
    loop = asyncio.get_running_loop()
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


class ChildFleet:
    """A fleet (``fleet_type(script)``) in a child process, driven over a pipe."""

    def __init__(
        self,
        script: DeviceScript,
        file_limit: int,
        fleet_type: Callable[[DeviceScript], CommandFleet],
    ) -> None:
        """Start the child process."""
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_child_main,
            args=(child, fleet_type, script, file_limit),
            daemon=True,
        )
        self._process.start()
        child.close()

    async def call(self, command: str, *args: Any) -> Any:
        """Run one of the fleet's coroutines in the child; return its result."""
        loop = asyncio.get_running_loop()
        self._conn.send((command, args))
        status, result = await loop.run_in_executor(None, self._conn.recv)
        if status != "ok":
            raise RuntimeError(f"device process failed: {result}")
        return result

    async def close(self) -> None:
        """Stop the child process."""
        if self._process.is_alive():
            await self.call("stop")
        await asyncio.get_running_loop().run_in_executor(None, self._process.join, 10)
        self._conn.close()


class FleetProcess(ChildFleet):
    """The same devices as :class:`Fleet` in a child process of their own."""

    def __init__(self, script: DeviceScript, file_limit: int) -> None:
        """Start the child process."""
        super().__init__(script, file_limit, Fleet)

    async def connect(
        self, url: str, specs: Sequence[DeviceSpec], concurrency: int
    ) -> dict[str, Any]:
        """Connect a device per spec in the child process."""
        result: dict[str, Any] = await self.call(
            "connect", url, list(specs), concurrency
        )
        return result

    async def disconnect(self) -> dict[str, Any]:
        """Close every device's link."""
        result: dict[str, Any] = await self.call("disconnect")
        return result

    async def stats(self) -> dict[str, Any]:
        """Return requests received and replies sent, over all devices."""
        result: dict[str, Any] = await self.call("stats")
        return result

    async def reset_counts(self) -> dict[str, Any]:
        """Zero the request and reply counters."""
        result: dict[str, Any] = await self.call("reset_counts")
        return result


def _send_result(
    out: Connection, target: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    try:
        result = target(*args)
    except Exception as err:  # noqa: BLE001 - reported to the parent
        out.send(("error", repr(err)))
    else:
        out.send(("ok", result))
    out.close()


def run_in_fresh_process(target: Callable[..., Any], *args: Any, what: str) -> Any:
    """Return ``target(*args)`` run in a new process (memory figures of its own).

    ``target`` must be a module-level function; ``what`` names the run in the
    error raised when it fails.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_send_result, args=(sender, target, args))
    process.start()
    sender.close()
    try:
        status, result = receiver.recv()
    except EOFError:
        status, result = "error", f"it exited with code {process.exitcode}"
    process.join()
    if status != "ok":
        raise RuntimeError(f"{what} failed: {result}")
    return result
