"""Soak: whether Home Assistant's memory settles under long mixed voice work.

Three phases on one Home Assistant, with the devices in a child process so
that only Home Assistant's own memory is measured:

- ``voice``: spoken conversations through the product's real audio path
  (Opus from the device, the pipeline with the test suite's fake engines,
  the reply resampled, encoded and paced back), each over a new WebSocket
  link as the firmware makes them;
- ``tools``: tool calls to connected devices;
- ``reconnects``: connect and disconnect cycles.

After every tenth of a phase the garbage is collected and the resident
memory, Python's allocated blocks, the asyncio tasks and the open file
descriptors are sampled. The figures: memory at each phase's end, the growth
over the last half of all samples (it plateaus when that is small), and
tasks and descriptors left once every device has gone, against the count
before the first.

Home Assistant itself keeps every text-to-speech result stream and chat
session of the last five minutes (its TTS memory cache and
``CONVERSATION_TIMEOUT``), so memory grows with each conversation during the
voice phase, all of which fits in that window; the Python blocks allocated
per conversation say how much. The later phases show whether anything of
ours keeps growing.
"""

import asyncio
from collections.abc import Callable
import gc
import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path
import sys
import tempfile
from typing import Any

import aiohttp

from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import SimulatedDevice
from simulator.voice import silence, tone

from .harness import Home, device_mac, device_token, home_assistant, rss_bytes, runtime
from .voice import _device_config, _ended, _setup_voice

SPEECH = tone(440, 0.3) + silence(0.7)
VOLUME_TOOL = "self.audio_speaker.set_volume"


def _child_main(conn: Connection, specs: list[tuple[str, str]], url: str) -> None:
    asyncio.run(_child_loop(conn, specs, url))


async def _child_loop(conn: Connection, specs: list[tuple[str, str]], url: str) -> None:
    """Run the devices; do what Home Assistant's side asks, then say done."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        devices: list[SimulatedDevice] = []
        turn = 0

        def fresh() -> None:
            # New simulated devices: their own records grow with every turn.
            devices[:] = [
                SimulatedDevice(
                    _device_config(mac, token, url, None, mic_speed=8.0), http=http
                )
                for mac, token in specs
            ]

        async def converse(device: SimulatedDevice, turns: int) -> None:
            nonlocal turn
            for _ in range(turns):
                turn += 1
                ended = _ended(device)
                # A new phrase each time: Home Assistant drops a repeated one.
                await device.wake(f"wake {turn}", SPEECH, preroll=0.1)
                await device.wait_for(lambda n=ended: _ended(device) > n, timeout=60)

        fresh()
        while (command := await loop.run_in_executor(None, conn.recv)) != "stop":
            kind, count = command
            if kind == "voice":
                await asyncio.gather(*(converse(d, count) for d in devices))
            elif kind == "connect":
                await asyncio.gather(*(d.connect() for d in devices))
            elif kind == "disconnect":
                await asyncio.gather(*(d.stop() for d in devices))
                fresh()
            elif kind == "cycle":
                for _ in range(count):
                    await asyncio.gather(*(d.connect() for d in devices))
                    await asyncio.gather(*(d.stop() for d in devices))
                    fresh()
            conn.send("done")
        for device in devices:
            await device.stop()
        conn.send("stopped")


def _fds() -> int:
    return sum(1 for _fd in Path("/proc/self/fd").iterdir())


class _Samples:
    """Memory, tasks and descriptors, sampled after garbage collection."""

    def __init__(self, voice: Any) -> None:
        self.rows: list[dict[str, Any]] = []
        self._voice = voice

    async def take(self, phase: str, done: int) -> None:
        # The fake engines keep what they were given, for the tests.
        for kept in (
            self._voice.agent.inputs,
            self._voice.stt.answered_at,
            self._voice.tts.first_chunk_at,
            self._voice.tts.messages,
        ):
            kept.clear()
        await asyncio.sleep(0)
        gc.collect()
        self.rows.append(
            {
                "phase": phase,
                "done": done,
                "rss_mb": rss_bytes() / 1e6,
                "blocks": sys.getallocatedblocks(),
                "tasks": len(asyncio.all_tasks()),
                "fds": _fds(),
            }
        )


async def _ask(conn: Connection, command: Any) -> None:
    loop = asyncio.get_running_loop()
    conn.send(command)
    await loop.run_in_executor(None, conn.recv)


async def _until(home: Home, predicate: Callable[[XiaozhiRuntime], bool]) -> None:
    """Wait until ``predicate`` holds for every device, woken by their state."""
    changed = asyncio.Event()
    devices = [runtime(entry) for entry in home.entries]
    removers = [d.entry_data.async_subscribe_state(changed.set) for d in devices]
    try:
        async with asyncio.timeout(30):
            while not all(predicate(device) for device in devices):
                await changed.wait()
                changed.clear()
    finally:
        for remove in removers:
            remove()


async def _settled(home: Home) -> None:
    """Wait until every link is gone and Home Assistant is idle."""
    await _until(home, lambda device: device.session is None)
    await home.hass.async_block_till_done()


async def _soak(
    home: Home, voice: Any, *, devices: int, turns: int, calls: int, cycles: int
) -> dict[str, Any]:
    voice.tts.seconds = 0.3
    voice.agent.reply = "Done."
    await home.add_devices(devices)
    specs = [(device_mac(i), device_token(i)) for i in range(devices)]
    context = multiprocessing.get_context("spawn")
    conn, child = context.Pipe()
    process = context.Process(
        target=_child_main, args=(child, specs, home.ws_url), daemon=True
    )
    process.start()
    child.close()
    samples = _Samples(voice)
    try:
        # One conversation each, so that first-use caches are filled.
        await _ask(conn, ("voice", 1))
        await _settled(home)
        await samples.take("start", 0)
        baseline = samples.rows[-1]

        per_device = max(1, turns // devices // 10)
        for step in range(1, 11):
            await _ask(conn, ("voice", per_device))
            await _settled(home)
            await samples.take("voice", step * per_device * devices)

        await _ask(conn, ("connect", 0))
        await _until(home, lambda device: device.connected)
        per_step = max(1, calls // 10)
        for step in range(1, 11):
            await asyncio.gather(
                *(
                    runtime(home.entries[i % devices]).commands.async_call_tool(
                        VOLUME_TOOL, {"volume": i % 100}, check=False
                    )
                    for i in range(per_step)
                )
            )
            await samples.take("tools", step * per_step)
        await _ask(conn, ("disconnect", 0))
        await _settled(home)

        per_cycle = max(1, cycles // devices // 10)
        for step in range(1, 11):
            await _ask(conn, ("cycle", per_cycle))
            await _settled(home)
            await samples.take("reconnects", step * per_cycle * devices)
    finally:
        conn.send("stop")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await asyncio.get_running_loop().run_in_executor(None, process.join, 10)
    rows = samples.rows
    half = rows[len(rows) // 2]
    end = rows[-1]
    turns_done = 10 * per_device * devices
    voice_end = next(r for r in reversed(rows) if r["phase"] == "voice")
    return {
        "devices": devices,
        "turns": turns_done,
        "tool_calls": 10 * per_step,
        "reconnects": 10 * per_cycle * devices,
        "samples": rows,
        "rss_mb": {
            phase: next(r["rss_mb"] for r in reversed(rows) if r["phase"] == phase)
            for phase in ("start", "voice", "tools", "reconnects")
        },
        "growth_last_half_mb": end["rss_mb"] - half["rss_mb"],
        # Python blocks held per conversation at the voice phase's end, Home
        # Assistant's five-minute caches included.
        "blocks_per_turn": (voice_end["blocks"] - baseline["blocks"])
        / max(1, turns_done),
        "tasks_left": end["tasks"] - baseline["tasks"],
        "fds_left": end["fds"] - baseline["fds"],
    }


async def measure(
    *, devices: int, turns: int, calls: int, cycles: int
) -> dict[str, Any]:
    """Run the soak on one Home Assistant with the fake voice engines."""
    with tempfile.TemporaryDirectory(prefix="xiaozhi-bench-tts-") as cache:
        async with home_assistant() as home:
            voice = await _setup_voice(home, Path(cache))
            return await _soak(
                home, voice, devices=devices, turns=turns, calls=calls, cycles=cycles
            )
