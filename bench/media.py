"""Media: what playing on the device's speaker costs.

- ``cpu``: transcoding (PyAV decode, resample, Opus encode, Ogg mux) per
  second of a 44.1 kHz stereo MP3, as a share of one core, on this process's
  CPU clock; beside it, decoding alone (the floor any player pays).
- ``first_page``: ``media_player.play_media`` on an idle MQTT + UDP device
  with ``notify`` until its first Ogg bytes arrive, p50 and p99; beside it,
  the same device fetching a ready Ogg file from a plain HTTP server (the
  baseline). The device's own 0.48 s chime is left out (``notify_cue=0``).
- ``many``: 10 devices (in a child process) each play a 10 s song at once:
  Home Assistant's event-loop lag p99, and the frames the devices ran dry
  (underruns) or lost.
- ``long``: one device plays an endless stream for ``stream_s``; Home
  Assistant's memory at the start and the end (no growth with length).
"""

import asyncio
import io
import multiprocessing
from multiprocessing.connection import Connection
import time
from typing import Any

import aiohttp
from aiohttp import web
import av

from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.protocol.audio.live import LiveTranscoder
from custom_components.xiaozhi.protocol.audio.ogg import OggOpusWriter, encode_ogg_opus
from simulator import DeviceConfig, SimulatedDevice
from simulator.notify import NotifyPlayback
from simulator.voice import mp3_bytes, tone

from .harness import (
    Home,
    device_mac,
    device_token,
    home_assistant,
    rss_bytes,
    runtime,
    settle_memory,
    wait_connected,
)
from .scale import Ticker
from .stats import percentile
from .voice import _device_config

RATE = 24000


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "max": max(samples),
    }


async def cpu(seconds: float) -> dict[str, Any]:
    """Return the CPU share of one core per stream: transcoding, and decoding."""
    song = mp3_bytes(440, seconds)
    position = 0

    async def read(size: int) -> bytes:
        nonlocal position
        data = song[position : position + size]
        position += len(data)
        return data

    start = time.process_time()
    transcoder = LiveTranscoder(read, OggOpusWriter(), RATE)
    transcoder.start()
    async for _chunk in transcoder.chunks():
        pass
    await transcoder.aclose()
    transcode = (time.process_time() - start) / seconds

    start = time.process_time()
    with av.open(io.BytesIO(song)) as container:
        for _frame in container.decode(audio=0):
            pass
    decode = (time.process_time() - start) / seconds
    return {
        "audio_s": seconds,
        "transcode_share": transcode,
        "decode_only_share": decode,
    }


class Sources:
    """A local media server: songs, an endless stream, a ready Ogg file."""

    def __init__(self, song_seconds: float) -> None:
        """Prepare the bodies."""
        self.song = mp3_bytes(440, song_seconds)
        self.loop_piece = mp3_bytes(660, 1.0)
        self.ogg = encode_ogg_opus(tone(440, 2.0, rate=RATE), RATE)
        self._runner: web.AppRunner | None = None
        self.base = ""

    async def start(self) -> None:
        """Serve on a free loopback port."""
        app = web.Application()
        app.router.add_get("/song.mp3", self._song)
        app.router.add_get("/radio.mp3", self._radio)
        app.router.add_get("/ready.ogg", self._ready)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()

    async def _song(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.song, content_type="audio/mpeg")

    async def _ready(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.ogg, content_type="audio/ogg")

    async def _radio(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            while True:
                await response.write(self.loop_piece)
        except ConnectionError:
            pass
        return response


async def _play(home: Home, entity_id: str, url: str) -> None:
    await home.hass.services.async_call(
        "media_player",
        "play_media",
        {
            "entity_id": entity_id,
            "media_content_id": url,
            "media_content_type": "music",
        },
        blocking=True,
    )


def _speaker_config(mac: str, token: str, url: str, port: int) -> DeviceConfig:
    """Return a device on MQTT + UDP whose firmware plays notify (no chime)."""
    return _device_config(
        mac,
        token,
        url,
        port,
        firmware="2.5.0",
        notify=True,
        notify_cue=0.0,
        decode_queue=20,
    )


def _player_of(home: Home, mac: str) -> str:
    from homeassistant.helpers import entity_registry as er  # noqa: PLC0415

    entity_id = er.async_get(home.hass).async_get_entity_id(
        "media_player", "xiaozhi", f"{mac}-media_player"
    )
    assert entity_id is not None  # noqa: S101
    return entity_id


async def _speaker(
    home: Home, http: aiohttp.ClientSession
) -> tuple[SimulatedDevice, str]:
    (entry,) = await home.add_devices(1)
    port = home.hass.data[DATA_KEY].endpoints.mqtt.port
    mac = runtime(entry).entry_data.mac
    device = SimulatedDevice(
        _speaker_config(mac, entry.data["token"], home.ws_url, port), http=http
    )
    await device.connect()
    await wait_connected(runtime(entry))
    runtime(entry).entry_data.async_learn_notify(True)
    return device, _player_of(home, mac)


async def first_page(home: Home, sources: Sources, plays: int) -> dict[str, Any]:
    """Time from play_media to the device's first Ogg bytes; and the baseline."""
    ours: list[float] = []
    baseline: list[float] = []
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as http:
        device, entity_id = await _speaker(home, http)
        try:
            for _ in range(plays):
                before = len(device.notify_sounds)
                start = loop.time()
                await _play(home, entity_id, f"{sources.base}/song.mp3")
                record = device.notify_sounds[before]
                await device.wait_for(lambda r=record: r.first_bytes_at is not None)
                assert record.first_bytes_at is not None  # noqa: S101
                ours.append(record.first_bytes_at - start)
                await home.hass.services.async_call(
                    "media_player",
                    "media_stop",
                    {"entity_id": entity_id},
                    blocking=True,
                )
                await device.wait_for(lambda r=record: r.finished_at is not None)
                # The baseline: the same player fetching a ready file.
                plain = NotifyPlayback(url="", subtitles=[])
                start = loop.time()
                fetch = asyncio.create_task(
                    _fetch_plain(device, f"{sources.base}/ready.ogg", plain)
                )
                await device.wait_for(lambda p=plain: p.first_bytes_at is not None)
                baseline.append((plain.first_bytes_at or start) - start)
                fetch.cancel()
        finally:
            await device.stop()
    return {
        "plays": plays,
        "play_media_to_first_page_ms": _summary([x * 1000 for x in ours]),
        "baseline_plain_fetch_ms": _summary([x * 1000 for x in baseline]),
    }


async def _fetch_plain(
    device: SimulatedDevice, url: str, record: NotifyPlayback
) -> None:
    from simulator.notify import play_notify  # noqa: PLC0415

    async with aiohttp.ClientSession() as http:
        await play_notify(http, url, record, queue_size=20, changed=device.touch)


# --------------------------------------------------------------- many at once


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
            SimulatedDevice(_speaker_config(mac, token, url, port), http=http)
            for mac, token in specs
        ]
        try:
            await asyncio.gather(*(device.connect() for device in devices))
            conn.send("ready")
            await loop.run_in_executor(None, conn.recv)  # "wait"
            await asyncio.gather(
                *(
                    device.wait_for(
                        lambda d=device: (
                            bool(d.notify_sounds)
                            and d.notify_sounds[-1].finished_at is not None
                        ),
                        timeout=120,
                    )
                    for device in devices
                )
            )
            conn.send(
                [
                    {
                        "packets": d.notify_sounds[-1].packets,
                        "underruns": d.notify_sounds[-1].underruns,
                        "complete": d.notify_sounds[-1].complete,
                        "max_queue": d.notify_sounds[-1].max_queue,
                    }
                    for d in devices
                ]
            )
            await loop.run_in_executor(None, conn.recv)  # "stop"
        finally:
            for device in devices:
                await device.stop()
            conn.send(None)


async def many(home: Home, sources: Sources, count: int) -> dict[str, Any]:
    """``count`` devices play a song at once: lag, and what the devices lost."""
    entries = await home.add_devices(count)
    port = home.hass.data[DATA_KEY].endpoints.mqtt.port
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
    for entry in entries:
        await wait_connected(runtime(entry))
        runtime(entry).entry_data.async_learn_notify(True)
    ticker = Ticker()
    ticker.start()
    try:
        conn.send("wait")
        await asyncio.gather(
            *(
                _play(
                    home,
                    _player_of(home, runtime(e).entry_data.mac),
                    f"{sources.base}/song.mp3",
                )
                for e in entries
            )
        )
        devices = await loop.run_in_executor(None, conn.recv)
    finally:
        lags = await ticker.stop()
        conn.send("stop")
        await loop.run_in_executor(None, conn.recv)
        await loop.run_in_executor(None, process.join, 10)
    return {
        "streams": count,
        "lag_ms": _summary([lag * 1000 for lag in lags]),
        "underruns": sum(d["underruns"] for d in devices),
        "incomplete": sum(1 for d in devices if not d["complete"]),
        "played_frames": sum(d["packets"] for d in devices),
        "max_device_queue": max(d["max_queue"] for d in devices),
    }


async def long(home: Home, sources: Sources, seconds: float) -> dict[str, Any]:
    """Play an endless stream for ``seconds``; memory at its start and end."""
    async with aiohttp.ClientSession() as http:
        device, entity_id = await _speaker(home, http)
        try:
            await _play(home, entity_id, f"{sources.base}/radio.mp3")
            record = device.notify_sounds[-1]
            await asyncio.sleep(min(10.0, seconds / 2))
            settle_memory()
            start_rss = rss_bytes()
            start_packets = record.packets
            await asyncio.sleep(seconds - min(10.0, seconds / 2))
            settle_memory()
            end_rss = rss_bytes()
            played = (record.packets - start_packets) * 0.06
            await home.hass.services.async_call(
                "media_player", "media_stop", {"entity_id": entity_id}, blocking=True
            )
        finally:
            await device.stop()
    return {
        "stream_s": seconds,
        "rss_start_mb": start_rss / 2**20,
        "rss_end_mb": end_rss / 2**20,
        "growth_mb": (end_rss - start_rss) / 2**20,
        "played_s_measured": played,
        "underruns": record.underruns,
    }


async def measure(
    *, cpu_seconds: float, plays: int, streams: int, song_s: float, stream_s: float
) -> dict[str, Any]:
    """Run the media measurements on one Home Assistant."""
    results: dict[str, Any] = {"cpu": await cpu(cpu_seconds)}
    sources = Sources(song_s)
    await sources.start()
    try:
        async with home_assistant() as home:
            results["first_page"] = await first_page(home, sources, plays)
            results["many"] = await many(home, sources, streams)
            results["long"] = await long(home, sources, stream_s)
    finally:
        await sources.stop()
    return results
