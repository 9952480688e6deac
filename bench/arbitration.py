"""Wake word arbitration: what picking one box costs, and whether it picks well.

XiaoZhi boxes of one Home Assistant area that start a conversation within
``ARBITRATION_WINDOW`` of each other are a round: one answers, the others go
back to idle, and the winner's microphone is held until it is picked.

- ``start``: three boxes of one area over WebSocket, on Home Assistant's loop
  (as the voice latency runs). The two far ones wake first, the nearest
  :data:`LATER` seconds later, within the window. Measured: from the nearest
  box sending ``listen start`` to speech-to-text's first audio, p50 and p99,
  against the same box alone in another area (not arbitrated), interleaved
  in rounds. With a wake word (pre-roll and ``listen detect``: the clearest
  wins once every box of the area has started and been rated), the same
  with one far box silent (the window decides), and without ``detect`` (a
  board without the audio front end, or a button: it wins at once).
- ``burst``: ``groups`` areas of three boxes each wake at once over MQTT +
  UDP. The boxes run in :data:`BURST_PROCESSES` child processes, each waking
  its areas one after the other as fast as it can, the nearest box of an
  area a little after the others. Measured: Home Assistant's event-loop lag
  meanwhile, the areas whose nearest box answered, the stood-down boxes back
  to idle within a second, and frames lost for the winners: every microphone
  frame a winner sent after ``listen start`` must reach speech-to-text, and
  its tone must be heard as long as it was said. Beside them: the winners'
  start (from the first ``listen start`` of the area, on the boxes' clock)
  and the datagrams the kernel dropped at Home Assistant's UDP socket.

Each box says a tone of its own frequency, then a short quiet, then lets go
(``listen stop``): speech-to-text reads a known stream to its end, and tells
the boxes apart by their tone. The speech engines and the agent are the test
suite's fakes; only speech-to-text is watched (:class:`Listener`).
"""

import asyncio
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass, field
import functools
import math
import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path
import tempfile
from typing import Any, Final

import aiohttp
from homeassistant.components import stt
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import Event, callback
from homeassistant.helpers import area_registry as ar, device_registry as dr
import numpy as np

from custom_components.xiaozhi.const import EVENT_XIAOZHI
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.voice.arbiter import ARBITRATION_WINDOW
from simulator import SimulatedDevice, device as simulator_device
from simulator.voice import (
    dominant_frequency,
    loudness_at,
    silence,
    tone,
    wake_preroll,
)

from .harness import Home, home_assistant, runtime, wait_connected
from .scale import Ticker
from .stats import percentile
from .voice import _device_config, _ended, _setup_voice

WAKE_PHRASE: Final = "你好小智"
FRAME_S: Final = 0.06
FRAME_BYTES: Final = 1920  # 60 ms of 16 kHz 16-bit mono PCM
MIC_RATE: Final = 16000
# What each box says: a tone longer than the window (so that a frame lost
# while held shortens it), then a quiet shorter than the pipeline's end of
# speech (0.7 s), then it lets go.
SPOKEN_S: Final = 0.6
QUIET_S: Final = 0.24
SPOKEN_FRAMES: Final = math.ceil((SPOKEN_S + QUIET_S) / FRAME_S - 1e-9)
# Metres from whoever said the wake word: the nearest, then two farther.
DISTANCES: Final = (0.5, 2.0, 4.0)
# The nearest box starts this long after the far ones (``start``).
LATER: Final = 0.1
# In the burst, the nearest box of an area starts this long after the others.
NEAR_LATER: Final = 0.02
# Processes the burst's boxes run in: together they wake the boxes faster.
BURST_PROCESSES: Final = 2
IDLE_WITHIN: Final = 1.0  # a stood-down box is idle again this soon
REPLY_S: Final = 0.2
SETTLE: Final = 0.25  # after (re)connecting, before a round
POLL: Final = 0.01
HEAR_OUT_TIMEOUT: Final = 10.0
FREQUENCY_TOLERANCE: Final = 4.0  # Hz: which box's tone speech-to-text heard
MAX_HEARD_S: Final = 20.0


def _speech(frequency: float) -> bytes:
    """Return what a box hears after its wake word: its tone, then quiet."""
    return tone(frequency, SPOKEN_S) + silence(QUIET_S)


def loud_seconds(pcm: bytes) -> float:
    """Return how long 16-bit PCM is louder than silence (10 ms resolution)."""
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
    block = MIC_RATE // 100
    count = samples.size // block
    if not count:
        return 0.0
    blocks = samples[: count * block].astype(np.float64).reshape(count, block)
    rms = np.sqrt(np.mean(blocks**2, axis=1))
    return float(np.count_nonzero(rms > 300)) / 100


def _summary(samples: Sequence[float]) -> dict[str, float]:
    """Return n, p50, p99 and max of millisecond samples."""
    return {
        "n": len(samples),
        "p50": percentile(samples, 0.5),
        "p99": percentile(samples, 0.99),
        "max": max(samples, default=math.nan),
    }


# ------------------------------------------------------------ speech-to-text


@dataclass(slots=True)
class Stream:
    """One audio stream speech-to-text was given, as it came."""

    opened_at: float
    first_audio_at: float | None = None
    ended_at: float | None = None
    pcm: bytearray = field(default_factory=bytearray)

    @property
    def frames(self) -> float:
        """Return how many 60 ms microphone frames the stream held."""
        return len(self.pcm) / FRAME_BYTES

    def voice_of(self, voices: Mapping[int, float]) -> int | None:
        """Return which box's tone this is (``voices``: box -> Hz), if any."""
        heard = dominant_frequency(bytes(self.pcm), MIC_RATE)
        box, frequency = min(voices.items(), key=lambda item: abs(item[1] - heard))
        return box if abs(frequency - heard) <= FREQUENCY_TOLERANCE else None


class Listener:
    """Speech-to-text that reads every stream to its end and keeps it.

    It wraps the fake engine: the pipeline calls it as it would the engine.
    Unlike the engine it never stops on its own, so that a stream's length
    is what the device was heard saying, and it keeps each stream apart
    (the engine keeps the last one only).
    """

    def __init__(self, engine: Any, text: str = "turn on the lights") -> None:
        """Answer ``text`` for ``engine`` from now on."""
        self.streams: list[Stream] = []
        self._text = text
        engine.async_process_audio_stream = self._process

    async def _process(
        self, metadata: stt.SpeechMetadata, stream: AsyncIterable[bytes]
    ) -> stt.SpeechResult:
        del metadata
        loop = asyncio.get_running_loop()
        heard = Stream(opened_at=loop.time())
        self.streams.append(heard)
        async for chunk in stream:
            if chunk and heard.first_audio_at is None:
                heard.first_audio_at = loop.time()
            heard.pcm += chunk
            if len(heard.pcm) >= MAX_HEARD_S * MIC_RATE * 2:
                break
        heard.ended_at = loop.time()
        return stt.SpeechResult(self._text, stt.SpeechResultState.SUCCESS)


def _frames(answers: Sequence[tuple[int, Stream | None]]) -> dict[str, Any]:
    """Compare what winners sent after ``listen start`` with what was heard.

    ``answers``: (frames sent, the stream speech-to-text got, if any). A
    stream is a fraction of a frame short of what was sent (the decoder's
    start-up delay, and the pipeline's 10 ms chunking of the end): it is
    rounded to whole frames, so one frame lost or added counts one.
    """
    heard = [round(s.frames) if s else 0 for _, s in answers]
    sent = [count for count, _ in answers]
    loud = [loud_seconds(bytes(s.pcm)) if s else 0.0 for _, s in answers]
    return {
        "winners": len(answers),
        "sent": sum(sent),
        "heard": sum(heard),
        "lost": sum(max(0, a - b) for a, b in zip(sent, heard, strict=True)),
        "extra": sum(max(0, b - a) for a, b in zip(sent, heard, strict=True)),
        "winners_losing": sum(1 for a, b in zip(sent, heard, strict=True) if b < a),
        "winners_with_extra": sum(1 for a, b in zip(sent, heard, strict=True) if b > a),
        # A frame lost from the tone shortens it by a whole frame.
        "tone_whole": sum(1 for value in loud if abs(value - SPOKEN_S) <= FRAME_S / 2),
        "loud_s": [round(value, 2) for value in loud],
    }


# ---------------------------------------------------------------- a box


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a box did after its wake word, as the box saw it."""

    answered: bool
    listened: float  # when it sent listen start (its own loop's time)
    idle_after: float | None = None  # seconds to idle, when stood down
    sent: int = 0  # microphone frames sent after listen start, answering
    after_stop: int = 0  # frames that left while listen stop was sent


async def _hear_out(device: SimulatedDevice, listened: float) -> Outcome:
    """Follow a box that just sent ``listen start``.

    Stood down, it goes back to idle by itself. Answering, it says its
    piece: once that is sent, half a frame later (so that no frame is on its
    way with it), it lets go.
    """
    loop = asyncio.get_running_loop()
    base = device.mic_frames_sent
    while device.mic_frames_sent - base < SPOKEN_FRAMES:
        if device.state.activity != "listening":
            return Outcome(False, listened, idle_after=loop.time() - listened)
        if loop.time() - listened > HEAR_OUT_TIMEOUT:
            raise TimeoutError(f"{device.name} neither answered nor stood down")
        await asyncio.sleep(POLL)
    await asyncio.sleep(FRAME_S / 2)
    if device.state.activity != "listening":
        return Outcome(False, listened, idle_after=loop.time() - listened)
    sent = device.mic_frames_sent - base
    await device.send_listen("stop")
    return Outcome(
        True, listened, sent=sent, after_stop=device.mic_frames_sent - base - sent
    )


async def _wake(
    device: SimulatedDevice,
    frequency: float,
    distance: float,
    *,
    delay: float = 0.0,
    detect: bool = True,
    woken: asyncio.Event | None = None,
) -> Outcome:
    """Wake a box ``delay`` s from now; follow it until its conversation ends.

    ``woken`` is set once the box has sent ``listen start`` (or failed to).
    """
    await asyncio.sleep(delay)
    ended = _ended(device)
    try:
        await device.wake(
            WAKE_PHRASE,
            _speech(frequency),
            loudness=loudness_at(distance),
            detect=detect,
        )
    finally:
        if woken is not None:
            woken.set()
    outcome = await _hear_out(device, asyncio.get_running_loop().time())
    await device.wait_for(lambda: _ended(device) > ended, timeout=30)
    return outcome


# --------------------------------------------------------------- areas


def _area(home: Home, name: str) -> str:
    """Return the id of the area called ``name``, created if need be."""
    registry = ar.async_get(home.hass)
    area = registry.async_get_area_by_name(name) or registry.async_create(name)
    return area.id


def _device_id(entry: ConfigEntry) -> str:
    device_id = runtime(entry).entry_data.device_id
    if device_id is None:
        raise RuntimeError(f"{entry.title} has no device")
    return device_id


def _place(home: Home, entry: ConfigEntry, area_id: str) -> None:
    """Put a box's device in an area."""
    dr.async_get(home.hass).async_update_device(_device_id(entry), area_id=area_id)


# --------------------------------------------------------- start delay


@dataclass(frozen=True, slots=True)
class Variant:
    """One way the nearest box starts."""

    key: str
    detect: bool
    alone: bool
    # How many far boxes of the area wake too (the rest stay silent, idle).
    others: int = len(DISTANCES) - 1


VARIANTS: Final = (
    Variant("detect", detect=True, alone=False),
    Variant("detect_alone", detect=True, alone=True),
    Variant("detect_one_silent", detect=True, alone=False, others=1),
    Variant("no_detect", detect=False, alone=False),
    Variant("no_detect_alone", detect=False, alone=True),
)


@dataclass(slots=True)
class Box:
    """A box on Home Assistant's loop: its entry, its simulator, its place."""

    entry: ConfigEntry
    device: SimulatedDevice
    distance: float
    frequency: float


async def _ready(boxes: Sequence[Box]) -> None:
    """Dial the boxes whose link closed (WebSocket); wait until all are up."""
    for box in boxes:
        if not box.device.connected:
            await box.device.connect()
    for box in boxes:
        await wait_connected(runtime(box.entry))
    await asyncio.sleep(SETTLE)


@dataclass(frozen=True, slots=True)
class Round:
    """One round of ``start``, as measured."""

    delay: float  # the nearest box's listen start to the first audio heard
    past_window: float  # the first audio heard after the window closed
    later: float  # the nearest box's listen start after the round's first
    right: bool  # the nearest box answered, and it alone
    answer: tuple[int, Stream | None]  # frames it sent, what was heard


async def _start_round(
    boxes: Sequence[Box], variant: Variant, listener: Listener
) -> Round:
    """Run one round of a variant."""
    near, *others = boxes
    heard_before = len(listener.streams)
    waking = [
        _wake(
            near.device,
            near.frequency,
            near.distance,
            delay=0.0 if variant.alone else LATER,
            detect=variant.detect,
        )
    ]
    if not variant.alone:
        waking += [
            _wake(b.device, b.frequency, b.distance) for b in others[: variant.others]
        ]
    outcome, *others_did = await asyncio.gather(*waking)
    streams = listener.streams[heard_before:]
    voices = {index: box.frequency for index, box in enumerate(boxes)}
    right = (
        outcome.answered
        and len(streams) == 1
        and streams[0].voice_of(voices) == 0
        and streams[0].first_audio_at is not None
    )
    stream = streams[0] if right else None
    opened = min(o.listened for o in (outcome, *others_did))
    if stream is None or stream.first_audio_at is None:
        return Round(math.nan, math.nan, math.nan, right, (outcome.sent, stream))
    return Round(
        stream.first_audio_at - outcome.listened,
        stream.first_audio_at - opened - ARBITRATION_WINDOW,
        outcome.listened - opened,
        right,
        (outcome.sent, stream),
    )


async def start_delay(home: Home, listener: Listener, rounds: int) -> dict[str, Any]:
    """Time from the nearest box's listen start to the pipeline's first audio."""
    entries = await home.add_devices(len(DISTANCES))
    together, apart = _area(home, "Living room"), _area(home, "Study")
    for entry in entries:
        _place(home, entry, together)
    delays: dict[str, list[float]] = {variant.key: [] for variant in VARIANTS}
    past_window: list[float] = []
    later: list[float] = []
    arbitrated = right = 0
    answers: list[tuple[int, Stream | None]] = []
    async with aiohttp.ClientSession() as http:
        boxes = [
            Box(
                entry,
                SimulatedDevice(
                    _device_config(
                        runtime(entry).entry_data.mac,
                        entry.data["token"],
                        home.ws_url,
                        None,
                    ),
                    http=http,
                ),
                distance,
                600.0 + 100 * index,
            )
            for index, (entry, distance) in enumerate(
                zip(entries, DISTANCES, strict=True)
            )
        ]
        near = boxes[0]
        try:
            # A round first: what is loaded once is not measured.
            for variant in VARIANTS[:2]:
                _place(home, near.entry, apart if variant.alone else together)
                await _ready(boxes)
                await _start_round(boxes, variant, listener)
            for _ in range(rounds):
                for variant in VARIANTS:
                    _place(home, near.entry, apart if variant.alone else together)
                    await _ready(boxes)
                    measured = await _start_round(boxes, variant, listener)
                    answers.append(measured.answer)
                    if not math.isnan(measured.delay):
                        delays[variant.key].append(measured.delay * 1000)
                    if variant.key == "detect" and measured.right:
                        past_window.append(measured.past_window * 1000)
                        later.append(measured.later * 1000)
                    if not variant.alone:
                        arbitrated += 1
                        right += measured.right
        finally:
            for box in boxes:
                await box.device.stop()
    summaries = {key: _summary(samples) for key, samples in delays.items()}
    return {
        "rounds": rounds,
        "transport": "websocket",
        "later_ms": LATER * 1000,
        "nearest_after_first_ms": _summary(later),
        "delay_ms": summaries,
        "added_ms": {
            key: {
                stat: summaries[key][stat] - summaries[f"{alone}_alone"][stat]
                for stat in ("p50", "p99")
            }
            for key, alone in (
                ("detect", "detect"),
                ("detect_one_silent", "detect"),
                ("no_detect", "no_detect"),
            )
        },
        "past_window_ms": _summary(past_window),
        "arbitrated": arbitrated,
        "nearest_answered": right,
        "frames": _frames(answers),
    }


# --------------------------------------------------------------- burst


@dataclass(frozen=True, slots=True)
class BoxSpec:
    """A box of the burst, for the child process."""

    mac: str
    token: str
    group: int
    distance: float
    frequency: float


def _child_main(
    conn: Connection, specs: list[BoxSpec], url: str, mqtt_port: int
) -> None:
    # Every box has a CPU of its own; here sixty share one. What a wake word
    # costs the simulator most, the pre-roll's audio, is the same for every
    # box at one distance: it is made once per level, not at every wake.
    simulator_device.wake_preroll = functools.cache(wake_preroll)  # type: ignore[attr-defined]
    asyncio.run(_child_loop(conn, specs, url, mqtt_port))


async def _wake_all(
    devices: Sequence[SimulatedDevice], specs: Sequence[BoxSpec]
) -> list[Outcome]:
    """Wake every box: area after area, as fast as this process can.

    The three boxes of an area wake together, the nearest :data:`NEAR_LATER`
    after the others, as boxes that heard one wake word do; the next area
    starts once they have all said ``listen start``.
    """
    areas: dict[int, list[int]] = {}
    for index, spec in enumerate(specs):
        areas.setdefault(spec.group, []).append(index)
    tasks: dict[int, asyncio.Task[Outcome]] = {}
    for members in areas.values():
        nearest = min(members, key=lambda i: specs[i].distance)
        woken = {index: asyncio.Event() for index in members}
        for index in members:
            spec = specs[index]
            tasks[index] = asyncio.create_task(
                _wake(
                    devices[index],
                    spec.frequency,
                    spec.distance,
                    delay=NEAR_LATER if index == nearest else 0.0,
                    woken=woken[index],
                )
            )
        for event in woken.values():
            await event.wait()
    return list(await asyncio.gather(*(tasks[i] for i in range(len(specs)))))


async def _child_loop(
    conn: Connection, specs: list[BoxSpec], url: str, mqtt_port: int
) -> None:
    """Connect the boxes; on ``wake``, wake them all and say what each did."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        devices = [
            SimulatedDevice(
                _device_config(spec.mac, spec.token, url, mqtt_port, retry_delay=0.5),
                http=http,
            )
            for spec in specs
        ]
        try:
            await asyncio.gather(*(device.connect() for device in devices))
            conn.send("connected")
            while await loop.run_in_executor(None, conn.recv) == "wake":
                conn.send(await _wake_all(devices, specs))
        finally:
            for device in devices:
                await device.stop()
            conn.send(None)


def _burst_specs(home: Home, entries: Sequence[ConfigEntry]) -> list[BoxSpec]:
    """Place three boxes per area; the first of each three is the nearest."""
    specs = []
    for index, entry in enumerate(entries):
        group, rank = divmod(index, len(DISTANCES))
        _place(home, entry, _area(home, f"Room {group + 1}"))
        specs.append(
            BoxSpec(
                mac=runtime(entry).entry_data.mac,
                token=entry.data["token"],
                group=group,
                distance=DISTANCES[rank],
                frequency=500.0 + 10 * index,
            )
        )
    return specs


class BoxProcesses:
    """Child processes that run the burst's boxes, an equal share each."""

    def __init__(self, specs: Sequence[BoxSpec], url: str, port: int) -> None:
        """Start the processes; each connects its boxes."""
        context = multiprocessing.get_context("spawn")
        self._shares = [
            [i for i, spec in enumerate(specs) if spec.group % BURST_PROCESSES == k]
            for k in range(BURST_PROCESSES)
        ]
        self._size = len(specs)
        self._conns: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        for share in self._shares:
            conn, child = context.Pipe()
            process = context.Process(
                target=_child_main,
                args=(child, [specs[i] for i in share], url, port),
                daemon=True,
            )
            process.start()
            child.close()
            self._conns.append(conn)
            self._processes.append(process)

    async def _receive_all(self) -> list[Any]:
        loop = asyncio.get_running_loop()
        return list(
            await asyncio.gather(
                *(loop.run_in_executor(None, conn.recv) for conn in self._conns)
            )
        )

    async def connected(self) -> None:
        """Wait until every process has connected its boxes."""
        if any(answer != "connected" for answer in await self._receive_all()):
            raise RuntimeError("the boxes did not connect")

    async def wake(self) -> list[Outcome]:
        """Wake every box; return what each did, in the order of the specs."""
        for conn in self._conns:
            conn.send("wake")
        outcomes: list[Outcome | None] = [None] * self._size
        for share, done in zip(self._shares, await self._receive_all(), strict=True):
            for index, outcome in zip(share, done, strict=True):
                outcomes[index] = outcome
        return [outcome for outcome in outcomes if outcome is not None]

    async def stop(self) -> None:
        """Stop the boxes and the processes."""
        loop = asyncio.get_running_loop()
        for conn, process in zip(self._conns, self._processes, strict=True):
            try:
                conn.send("stop")
                await loop.run_in_executor(None, conn.recv)
            except BrokenPipeError, EOFError:
                pass  # the child is gone already: its error is on stderr
            await loop.run_in_executor(None, process.join, 10)
            if process.is_alive():
                process.kill()


async def burst(home: Home, listener: Listener, groups: int) -> dict[str, Any]:
    """Wake ``groups`` areas of three boxes at once over MQTT + UDP."""
    entries = await home.add_devices(groups * len(DISTANCES))
    specs = _burst_specs(home, entries)
    box_of_device = {_device_id(entry): index for index, entry in enumerate(entries)}
    outcomes_fired: list[dict[str, Any]] = []

    @callback
    def on_event(event: Event[dict[str, Any]]) -> None:
        if event.data.get("type") in ("wake_won", "wake_stood_down"):
            outcomes_fired.append(dict(event.data))

    endpoints = home.hass.data[DATA_KEY].endpoints
    server, audio = endpoints.mqtt, endpoints.udp
    if server is None or server.port is None or audio is None or audio.port is None:
        raise RuntimeError("the MQTT + UDP endpoint is not running")
    remove = home.hass.bus.async_listen(EVENT_XIAOZHI, on_event)
    processes = BoxProcesses(specs, home.ws_url, server.port)
    heard_before = len(listener.streams)
    ticker = Ticker()
    try:
        await processes.connected()
        for entry in entries:
            await wait_connected(runtime(entry))
        await asyncio.sleep(SETTLE)
        dropped_before = udp_drops(audio.port)
        ticker.start()
        try:
            outcomes = await processes.wake()
        finally:
            lags = await ticker.stop()
        dropped_after = udp_drops(audio.port)
    finally:
        remove()
        await processes.stop()
    figures = _burst_figures(
        specs,
        outcomes,
        listener.streams[heard_before:],
        [
            (box_of_device.get(str(fired["device_id"])), fired["type"] == "wake_won")
            for fired in outcomes_fired
        ],
        lags,
    )
    figures["udp_dropped_by_kernel"] = (
        dropped_after - dropped_before
        if dropped_before is not None and dropped_after is not None
        else None
    )
    return figures


def _burst_figures(
    specs: Sequence[BoxSpec],
    outcomes: Sequence[Outcome],
    streams: Sequence[Stream],
    fired: Sequence[tuple[int | None, bool]],
    lags: Sequence[float],
) -> dict[str, Any]:
    """Sum the burst up: who answered, who stood down, what was heard."""
    groups = max(spec.group for spec in specs) + 1
    size = len(DISTANCES)
    voices = {index: spec.frequency for index, spec in enumerate(specs)}
    heard: dict[int, list[Stream]] = {}
    unknown = 0
    for stream in streams:
        box = stream.voice_of(voices)
        if box is None:
            unknown += 1
        else:
            heard.setdefault(box, []).append(stream)
    won = {box for box, winner in fired if winner and box is not None}
    right = sum(
        1
        for group in range(groups)
        if {b for b in won if b // size == group} == {group * size}
        and {b for b in heard if b // size == group} == {group * size}
        and len(heard[group * size]) == 1
        and outcomes[group * size].answered
    )
    stood = [o for o in outcomes if not o.answered]
    idle_after = [o.idle_after * 1000 for o in stood if o.idle_after is not None]
    answers = [
        (o.sent, heard[i][0] if len(heard.get(i, [])) == 1 else None)
        for i, o in enumerate(outcomes)
        if o.answered
    ]
    opened = [
        min(o.listened for o in outcomes[g * size : (g + 1) * size])
        for g in range(groups)
    ]
    spread = [
        (max(o.listened for o in outcomes[g * size : (g + 1) * size]) - opened[g])
        * 1000
        for g in range(groups)
    ]
    # Both processes read the one monotonic clock: the box's listen start and
    # speech-to-text's first audio compare.
    to_audio, past_window = [], []
    for group in range(groups):
        near = group * size
        streams_of = heard.get(near, [])
        if len(streams_of) != 1 or streams_of[0].first_audio_at is None:
            continue
        first = streams_of[0].first_audio_at
        to_audio.append((first - outcomes[near].listened) * 1000)
        past_window.append((first - opened[group] - ARBITRATION_WINDOW) * 1000)
    listened = [o.listened for o in outcomes]
    return {
        "groups": groups,
        "boxes": len(specs),
        "transport": "mqtt+udp",
        "lag_ms": _summary([lag * 1000 for lag in lags]),
        "nearest_answered": right,
        "answered": len(outcomes) - len(stood),
        "stood_down": len(stood),
        "idle_within_1s": sum(1 for ms in idle_after if ms <= IDLE_WITHIN * 1000),
        "idle_after_ms": _summary(idle_after),
        "won_events": len(won),
        "streams": len(streams),
        "streams_unknown": unknown,
        "frames": _frames(answers),
        "frames_after_stop": sum(o.after_stop for o in outcomes),
        "listen_starts_span_ms": (max(listened) - min(listened)) * 1000,
        "group_spread_ms": _summary(spread),
        "start_to_audio_ms": _summary(to_audio),
        "past_window_ms": _summary(past_window),
    }


def udp_drops(port: int) -> int | None:
    """Return the datagrams the kernel dropped at the UDP socket on ``port``.

    Its receive buffer was full: Linux counts them per socket in
    ``/proc/net/udp``. None where that table is not to be read.
    """
    total, found = 0, False
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            rows = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                total += int(fields[-1])
                found = True
    return total if found else None


# ------------------------------------------------------------ measure


async def measure(*, rounds: int, groups: int) -> dict[str, Any]:
    """Run both measurements on one Home Assistant."""
    results: dict[str, Any] = {"window_ms": ARBITRATION_WINDOW * 1000}
    with tempfile.TemporaryDirectory(prefix="xiaozhi-bench-tts-") as cache:
        async with home_assistant() as home:
            voice = await _setup_voice(home, Path(cache))
            voice.agent.delay = 0.0
            voice.agent.reply = "Done."
            voice.tts.seconds = REPLY_S
            listener = Listener(voice.stt)
            results["start"] = await start_delay(home, listener, rounds)
            results["burst"] = await burst(home, listener, groups)
    return results
