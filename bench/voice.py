"""Voice: what a conversation costs and what the integration adds to it.

- ``codec``: CPU of the voice path (decoding the microphone; reading,
  resampling and encoding the reply) per second of audio, as a fraction of
  real time, on this process's CPU clock.
- ``latency``: conversations with one device in this process; the delay our
  code adds from speech-to-text's text to ``tts start`` on the wire, and from
  the reply's first bytes to its first Opus frame on the wire.
- ``many``: simultaneous conversations with devices in a child process (real
  time microphone and speaker, the firmware's 40-packet queue); Home
  Assistant's event-loop lag, frames the devices dropped, and how far ahead
  of playback the downlink ran.

``latency`` and ``many`` run over WebSocket, then again over MQTT + UDP
(``udp``): the same figures side by side in one run.

The speech engines and the agent are the test suite's fakes: the agent takes
150 ms, as a fast local one would, so ``tts start`` has settled before audio.
"""

import asyncio
import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path
import tempfile
import time
from typing import Any

import aiohttp

from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.protocol.audio.codec import (
    OpusDecoder,
    OpusEncoder,
    PcmConverter,
    WavReader,
)
from simulator import DeviceConfig, SimulatedDevice
from simulator.cli import client_id_for
from simulator.voice import MicEncoder, silence, tone, wav_bytes

from .harness import Home, device_mac, device_token, home_assistant, runtime
from .scale import Ticker
from .stats import percentile

AGENT_DELAY = 0.15
SPEECH = tone(440, 1.0) + silence(1.2)


def codec_cpu(seconds: float) -> dict[str, Any]:
    """Return CPU per second of audio for each direction of the voice path."""
    mic = MicEncoder()
    uplink = mic.frames(tone(300, seconds) + silence(seconds))
    reply = wav_bytes(tone(880, seconds, 22050), 22050)

    start = time.thread_time()
    decoder = OpusDecoder()
    for packet in uplink:
        decoder.decode(packet)
    decode = (time.thread_time() - start) / (2 * seconds)

    start = time.thread_time()
    reader = WavReader()
    converter: PcmConverter | None = None
    encoder = OpusEncoder()
    for offset in range(0, len(reply), 4096):
        samples = reader.feed(reply[offset : offset + 4096])
        if samples is None or reader.format is None:
            continue
        if converter is None:
            converter = PcmConverter(reader.format.sample_rate, 1, 24000)
        encoder.encode(converter.convert(samples))
    encoder.flush()
    encode = (time.thread_time() - start) / seconds
    return {
        "audio_s": seconds,
        "uplink_decode": decode,
        "downlink_resample_encode": encode,
        "conversation": decode + encode,
    }


def _summary(samples: list[float]) -> dict[str, float]:
    """Return p50, p99 and max of millisecond samples."""
    return {
        "n": len(samples),
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "max": max(samples, default=float("nan")),
    }


async def _setup_voice(home: Home, cache: Path) -> Any:
    """Set the fake engines up and give them the preferred pipeline."""
    from tests.voice.engines import (  # noqa: PLC0415 - bench-only import
        async_setup_engines,
        tts_cache_in,
    )

    with tts_cache_in(cache):
        voice = await async_setup_engines(home.hass)
    await voice.use_engines()
    await voice.use_agent()
    voice.agent.delay = AGENT_DELAY
    return voice


def _device_config(
    mac: str, token: str, ws_url: str, mqtt_port: int | None, **extra: Any
) -> DeviceConfig:
    """Return a device on WebSocket, or on MQTT + UDP when ``mqtt_port`` is set."""
    if mqtt_port is None:
        return DeviceConfig(
            mac=mac, client_id=client_id_for(mac), ws_url=ws_url, token=token, **extra
        )
    return DeviceConfig(
        mac=mac,
        client_id=client_id_for(mac),
        mqtt={
            "endpoint": f"127.0.0.1:{mqtt_port}",
            "client_id": client_id_for(mac),
            "username": mac,
            "password": token,
            "keepalive": 240,
            "publish_topic": f"xiaozhi/{mac.replace(':', '')}/up",
        },
        **extra,
    )


def _ended(device: SimulatedDevice) -> int:
    """Return how many conversations ended: links closed, or goodbyes (MQTT)."""
    return device.goodbyes_received if device.uses_mqtt else len(device.close_reasons)


def _after(device: SimulatedDevice, since: float, what: str) -> float:
    """Return when the device first received ``what`` after ``since``."""
    return next(when for when, kind in device.timeline if when > since and kind == what)


async def _latency(
    home: Home, voice: Any, turns: int, mqtt_port: int | None
) -> dict[str, Any]:
    """Run conversations one after the other; collect our code's delays.

    Measured from outside, on the one event loop: when the speech-to-text
    engine answered and text-to-speech handed out its first bytes, and when
    the device received ``tts start`` and the first audio frame.
    """
    voice.tts.seconds = 0.5
    (entry,) = await home.add_devices(1)
    mac = runtime(entry).entry_data.mac
    token = entry.data["token"]
    text_to_start: list[float] = []
    bytes_to_frame: list[float] = []
    async with aiohttp.ClientSession() as http:
        device = SimulatedDevice(
            _device_config(mac, token, home.ws_url, mqtt_port, mic_speed=8.0),
            http=http,
        )
        try:
            for index in range(turns):
                # A new sentence each time: TTS caches what it has said.
                voice.agent.reply = f"Done, number {index}, {mqtt_port}."
                ended = _ended(device)
                await device.wake(f"wake {index}", SPEECH, preroll=0.1)
                await device.wait_for(lambda n=ended: _ended(device) > n, timeout=30)
                heard = voice.stt.answered_at[-1]
                first_bytes = voice.tts.first_chunk_at[-1]
                text_to_start.append(_after(device, heard, "tts:start") - heard)
                bytes_to_frame.append(
                    _after(device, first_bytes, "audio") - first_bytes
                )
        finally:
            await device.stop()
    return {
        "turns": turns,
        "text_to_tts_start_ms": _summary([x * 1000 for x in text_to_start]),
        "tts_bytes_to_first_frame_ms": _summary([x * 1000 for x in bytes_to_frame]),
    }


# --------------------------------------------------------------- many at once


def _child_main(
    conn: Connection, specs: list[tuple[str, str]], url: str, mqtt_port: int | None
) -> None:
    asyncio.run(_child_loop(conn, specs, url, mqtt_port))


async def _child_loop(
    conn: Connection, specs: list[tuple[str, str]], url: str, mqtt_port: int | None
) -> None:
    """Run the devices; on ``converse``, wake them all and report what played."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        devices = [
            SimulatedDevice(
                _device_config(mac, token, url, mqtt_port, retry_delay=0.5),
                http=http,
            )
            for mac, token in specs
        ]
        try:
            while True:
                command = await loop.run_in_executor(None, conn.recv)
                if command == "stop":
                    break

                async def converse(device: SimulatedDevice, index: int) -> None:
                    ended = _ended(device)
                    await device.wake(f"wake {index}", SPEECH)
                    await device.wait_for(lambda: _ended(device) > ended, timeout=60)

                await asyncio.gather(
                    *(converse(device, i) for i, device in enumerate(devices))
                )
                records = [device.speaker.record for device in devices]
                conn.send(
                    [
                        {
                            "received": record.received,
                            "played": record.played,
                            "dropped_queue_full": record.dropped_queue_full,
                            "dropped_not_speaking": record.dropped_not_speaking,
                            "max_queue": record.max_queue,
                            "queue_depths": record.queue_depths,
                        }
                        for record in records
                    ]
                )
        finally:
            for device in devices:
                await device.stop()
            conn.send(None)


async def _many(
    home: Home, voice: Any, count: int, mqtt_port: int | None
) -> dict[str, Any]:
    """Converse with ``count`` devices at once; measure lag, drops and lead."""
    voice.tts.seconds = 3.0
    voice.agent.reply = f"All of you, done ({mqtt_port})."
    await home.add_devices(count)
    first = len(home.entries) - count
    specs = [(device_mac(first + i), device_token(first + i)) for i in range(count)]
    context = multiprocessing.get_context("spawn")
    conn, child = context.Pipe()
    process = context.Process(
        target=_child_main, args=(child, specs, home.ws_url, mqtt_port), daemon=True
    )
    process.start()
    child.close()
    loop = asyncio.get_running_loop()
    ticker = Ticker()
    ticker.start()
    try:
        conn.send("converse")
        devices = await loop.run_in_executor(None, conn.recv)
    finally:
        lags = await ticker.stop()
        conn.send("stop")
        await loop.run_in_executor(None, conn.recv)
        await loop.run_in_executor(None, process.join, 10)
    # How far ahead of playback the downlink ran, as the devices held it.
    frame_ms = 60
    leads = [depth * frame_ms for d in devices for depth in d["queue_depths"]]
    return {
        "conversations": count,
        "reply_s": voice.tts.seconds,
        "lag_ms": _summary([lag * 1000 for lag in lags]),
        "dropped": sum(
            d["dropped_queue_full"] + d["dropped_not_speaking"] for d in devices
        ),
        "played_frames": sum(d["played"] for d in devices),
        "max_device_queue": max(d["max_queue"] for d in devices),
        "lead_ms": _summary(leads),
    }


async def measure(
    *, codec_seconds: float, turns: int, conversations: int
) -> dict[str, Any]:
    """Run the three voice measurements on one Home Assistant."""
    # Measured on a thread of its own: the loop is not held meanwhile.
    codec = await asyncio.to_thread(codec_cpu, codec_seconds)
    results: dict[str, Any] = {"codec": codec}
    with tempfile.TemporaryDirectory(prefix="xiaozhi-bench-tts-") as cache:
        async with home_assistant() as home:
            voice = await _setup_voice(home, Path(cache))
            results["latency"] = await _latency(home, voice, turns, None)
            results["many"] = await _many(home, voice, conversations, None)
            port = home.hass.data[DATA_KEY].endpoints.mqtt.port
            results["udp"] = {
                "latency": await _latency(home, voice, turns, port),
                "many": await _many(home, voice, conversations, port),
            }
    return results
