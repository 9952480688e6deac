"""The simulated devices of the demo, the room they stand in, the console."""

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
import hashlib
from typing import Any, Final

from simulator import (
    DeviceConfig,
    SimulatedDevice,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
)
from simulator.cli import client_id_for, increment_mac
from simulator.voice import loudness_at

from . import PASSWORD, USERNAME, ota_url
from .files import DemoPaths
from .voice import DemoVoice, Reply

MAX_EXTRA_DEVICES: Final = 4


def device_configs(port: int, extra: int = 0) -> list[DeviceConfig]:
    """Return the demo devices; all know only the OTA address.

    The first speaks only WebSocket, the second takes MQTT + UDP when the OTA
    answer offers it (the firmware's choice). ``extra`` more boxes, with
    shipped firmware and the built-in tools only, make a fuller room.
    """
    if not 0 <= extra <= MAX_EXTRA_DEVICES:
        raise ValueError(f"extra devices: 0 to {MAX_EXTRA_DEVICES}")
    timing: dict[str, Any] = {
        "ota_url": ota_url(port),
        "reconnect_delay": 5.0,
        "retry_delay": 2.0,
        "max_backoff": 15.0,
        "activation_poll_interval": 1.0,
        "activation_retry_delay": 2.0,
        "ota_retry_delay": 2.0,
    }
    plain_mac = "02:00:5a:48:00:01"
    rich_mac = "02:00:5a:48:00:02"
    return [
        # A client that speaks only WebSocket (as py-xiaozhi does by default):
        # it connects when it is used.
        DeviceConfig(
            mac=plain_mac,
            client_id=client_id_for(plain_mac),
            board="bread-compact-wifi",
            screen=True,
            camera=False,
            battery=False,
            websocket_only=True,
            **timing,
        ),
        # Firmware as shipped: MQTT + UDP when Home Assistant offers it, so it
        # stays reachable between conversations, and new enough to play
        # sounds while idle (notify): its media player plays at any time.
        DeviceConfig(
            mac=rich_mac,
            client_id=client_id_for(rich_mac),
            firmware="2.5.0",
            board="esp32-s3-camera-box",
            screen=True,
            camera=True,
            battery=True,
            extra_tools=[
                rgb_light_tool(),
                no_arg_tool(),
                bool_tool(),
                *many_tools(40),
            ],
            **timing,
        ),
        *(
            DeviceConfig(
                mac=(mac := increment_mac(rich_mac, number)),
                client_id=client_id_for(mac),
                firmware="2.5.0",
                board="esp-box-3",
                **timing,
            )
            for number in range(1, extra + 1)
        ),
    ]


def country_from_locale(environ: Mapping[str, str]) -> str:
    """Return the country of the user's locale (``zh_CN.UTF-8`` -> ``CN``).

    Falls back to ``US`` when the locale names no country.
    """
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(name, "")
        language, _, rest = value.partition("_")
        country = rest[:2]
        if language and len(country) == 2 and country.isalpha():
            return country.upper()
    return "US"


@dataclass(slots=True)
class DeviceReport:
    """What the summary says about a device."""

    mac: str
    board: str
    title: str = ""
    entity_id: str = ""
    paired_now: bool = False
    transport: str = ""
    area: str = ""


def summary_lines(
    url: str,
    paths: DemoPaths,
    devices: Sequence[DeviceReport],
    *,
    once: bool,
) -> list[str]:
    """Return what is printed once every device is connected."""
    lines = [
        "",
        "XiaoZhi demo is ready.",
        "",
        f"  Home Assistant  {url}",
        f"  Login           {USERNAME} / {PASSWORD}",
        f"  Access token    {paths.token} (long-lived)",
        f"  Logs            {paths.log}",
        f"                  {paths.devices_log}",
        "  Devices         (Settings > Devices & services > XiaoZhi)",
    ]
    lines.extend(
        f"    {device.title or device.board} ({device.mac}): "
        f"{'paired now, ' if device.paired_now else ''}connected"
        f"{f' over {device.transport}' if device.transport else ''}"
        f"{f', in {device.area}' if device.area else ''}"
        for device in devices
    )
    lines.append("")
    lines.append("Stopping (--once)." if once else "Press Ctrl-C to stop.")
    return lines


# ------------------------------------------------------------------ room

ROOM_NAME: Final = "Living room"
# Where device N stands at first, in metres from the person speaking: the
# nearest is not the first device.
DEFAULT_DISTANCES: Final = (2.5, 1.0, 4.0, 1.8, 3.2, 0.6)
MAX_DISTANCE: Final = 30.0
SPEED_OF_SOUND: Final = 343.0  # m/s
MAX_DETECTION_JITTER: Final = 0.12  # s a wake word engine may take on top
SETTLE: Final = 2.5  # s after a wake word until the outcome is reported


def default_distance(number: int) -> float:
    """Return where device ``number`` (from 1) stands until it is placed."""
    return DEFAULT_DISTANCES[(number - 1) % len(DEFAULT_DISTANCES)]


def detection_delay(distance: float, mac: str, wake: int) -> float:
    """Return how long after the words a device detects wake word ``wake``.

    The sound's travel time, plus what its wake word engine takes: 0 to
    120 ms, the same for the same device and wake word on every run, but
    different from one wake word to the next, so the nearest device is not
    always the first.
    """
    digest = hashlib.sha256(f"{mac}/{wake}".encode()).digest()
    jitter = int.from_bytes(digest[:4]) / 2**32 * MAX_DETECTION_JITTER
    return max(distance, 0.0) / SPEED_OF_SOUND + jitter


@dataclass(slots=True)
class Room:
    """The room all the demo devices stand in, each some metres from the speaker.

    In Home Assistant the devices are in the area of the same name: a wake
    word they all hear is answered by one of them.
    """

    name: str = ROOM_NAME
    placed: dict[int, float] = field(default_factory=dict)
    wakes: int = 0

    def distance(self, number: int) -> float:
        """Return how far device ``number`` stands from the speaker (metres)."""
        return self.placed.get(number, default_distance(number))

    def place(self, number: int, metres: float) -> None:
        """Move device ``number`` to ``metres`` from the speaker."""
        if not 0 < metres <= MAX_DISTANCE:
            raise ValueError(f"a distance from 0 to {MAX_DISTANCE:g} m")
        self.placed[number] = metres


@dataclass(frozen=True, slots=True)
class Hearing:
    """How one device heard a wake word."""

    number: int
    device: SimulatedDevice
    distance: float
    loudness: float
    delay: float


def hearings(devices: Sequence[SimulatedDevice], room: Room) -> list[Hearing]:
    """Return how each device hears the next wake word, the first one first."""
    heard = []
    for number, device in enumerate(devices, 1):
        distance = room.distance(number)
        heard.append(
            Hearing(
                number=number,
                device=device,
                distance=distance,
                loudness=loudness_at(distance),
                delay=detection_delay(distance, device.config.mac, room.wakes),
            )
        )
    return sorted(heard, key=lambda hearing: hearing.delay)


async def _hear(hearing: Hearing, phrase: str) -> None:
    """Detect the wake word once its delay has passed; dial if needed; wake."""
    await asyncio.sleep(hearing.delay)
    await hearing.device.wake(phrase, loudness=hearing.loudness)


def outcome_lines(
    heard: Sequence[Hearing],
    phrase: str,
    failed: Mapping[int, Exception] | None = None,
) -> str:
    """Return what to print once the devices have settled after a wake word.

    ``failed``: device number -> why it could not send its wake word.
    """
    failed = failed or {}
    lines = [
        f"  {hearing.number}  {hearing.device.config.board} at "
        f"{hearing.distance:g} m heard {phrase!r} at {hearing.loudness:.0f} dBFS "
        f"after {hearing.delay * 1000:.0f} ms: "
        + (
            f"could not send it ({failed[hearing.number]})"
            if hearing.number in failed
            else f"now {hearing.device.state.activity}"
        )
        for hearing in heard
    ]
    answered = [
        f"{hearing.device.config.board} ({hearing.number})"
        for hearing in heard
        if hearing.number not in failed
        and hearing.device.state.activity in ("listening", "speaking")
    ]
    if not answered:
        lines.append("No device answered")
    elif len(answered) == 1:
        lines.append(f"{answered[0]} answered")
    else:
        lines.append(f"{len(answered)} devices answered: {', '.join(answered)}")
    return "\n".join(lines)


async def wake_room(
    devices: Sequence[SimulatedDevice],
    room: Room,
    phrase: str = "",
    settle: float = SETTLE,
) -> str:
    """Make every device in the room hear one wake word; return the outcome.

    Each device hears it as loud as its distance allows, a little later than
    the words (sound travel, and its wake word engine), and sends it with its
    pre-roll as the firmware does.
    """
    phrase = phrase or DEFAULT_WAKE_WORD
    room.wakes += 1
    heard = hearings(devices, room)
    results = await asyncio.gather(
        *(_hear(hearing, phrase) for hearing in heard), return_exceptions=True
    )
    failed: dict[int, Exception] = {}
    for hearing, result in zip(heard, results, strict=True):
        if isinstance(result, Exception):
            failed[hearing.number] = result
        elif isinstance(result, BaseException):
            raise result
    await asyncio.sleep(settle)
    return outcome_lines(heard, phrase, failed)


# ------------------------------------------------------------------ console

CONSOLE_HELP = """\
Commands (N is the device number shown by "devices"):
  devices              list the devices and where they stand in the room
  say N TEXT           the device hears its wake word, then TEXT (spoken by
                       espeak-ng); its reply is printed and saved as a WAV
  say N FILE.wav [TEXT]  the same with a recording (TEXT: what it says, for
                       the demo's stand-in speech-to-text; else the file name)
  wake N [PHRASE]      the device hears its wake word: it connects if needed,
                       sends the audio from before it, says "listen detect"
                       and starts listening (auto mode)
  wake all [PHRASE]    every device in the room hears one wake word, as loud
                       as its distance allows: one of them answers
  place N METRES       move the device that far from the person speaking
  listen N             start listening as push-to-talk does (manual mode)
  stop N               stop listening
  abort N              abort, as a button press while it speaks
  play N FILE|URL      play a sound file or a stream on the device's media
                       player; what it played is saved as a WAV when it ends
  stop-media N         stop what the device's media player plays
  help                 this text"""

DEFAULT_WAKE_WORD = "你好小智"
DEVICE_COMMANDS: Final = (
    "say",
    "wake",
    "place",
    "listen",
    "stop",
    "abort",
    "play",
    "stop-media",
)


@dataclass(frozen=True, slots=True)
class Command:
    """A console command: what to do, to which device, with what text."""

    name: str
    index: int | None = None
    text: str = ""
    whole_room: bool = False


def parse_command(line: str, device_count: int) -> Command:
    """Read a console line; raise ValueError with a message for a bad one."""
    words = line.strip().split(maxsplit=2)
    if not words:
        return Command("")
    name = words[0].lower()
    if name in ("help", "devices"):
        return Command(name)
    if name not in DEVICE_COMMANDS:
        raise ValueError(f"unknown command {name!r}; type help")
    text = words[2].strip() if len(words) > 2 else ""
    if name == "wake" and len(words) > 1 and words[1].lower() == "all":
        return Command(name, text=text, whole_room=True)
    if len(words) < 2 or not words[1].isdigit():
        raise ValueError(f"{name} needs a device number; type devices")
    index = int(words[1])
    if not 1 <= index <= device_count:
        raise ValueError(f"no device {index}; there are {device_count}")
    if name == "say" and not text:
        raise ValueError("say needs what to say: say 1 what time is it")
    if name == "play" and not text:
        raise ValueError("play needs a file or URL: play 2 song.mp3")
    if name == "place":
        try:
            metres = float(text.removesuffix("m").strip())
        except ValueError:
            raise ValueError("place needs a distance in metres: place 1 2.5") from None
        if not 0 < metres <= MAX_DISTANCE:
            raise ValueError(f"place needs a distance from 0 to {MAX_DISTANCE:g} m")
        text = f"{metres:g}"
    return Command(name, index, text)


def reply_lines(board: str, reply: Reply) -> str:
    """Return what to print about a device's reply."""
    said = " ".join(reply.sentences) or "nothing"
    if reply.path is None:
        return f"{board} said {said!r} (no audio came back)"
    return (
        f"{board} said {said!r} ({reply.seconds:.1f} s of audio, saved to {reply.path})"
    )


def device_lines(devices: Sequence[SimulatedDevice], room: Room | None) -> str:
    """Return the ``devices`` listing."""
    return "\n".join(
        f"  {number}  {device.config.board} ({device.config.mac}) "
        f"{'connected' if device.connected else 'not connected'}"
        f"{' over MQTT + UDP' if device.uses_mqtt else ''}, "
        f"{device.state.activity}"
        f"{f', {room.distance(number):g} m away' if room is not None else ''}"
        for number, device in enumerate(devices, 1)
    )


async def execute(
    command: Command,
    devices: Sequence[SimulatedDevice],
    voice: DemoVoice | None = None,
    room: Room | None = None,
) -> str:
    """Make a device act; return what to print."""
    if command.name == "help":
        return CONSOLE_HELP
    if command.name == "devices":
        return device_lines(devices, room)
    room = room if room is not None else Room()
    if command.whole_room:
        return await wake_room(devices, room, command.text)
    if command.index is None:
        return ""
    device = devices[command.index - 1]
    if command.name == "place":
        room.place(command.index, float(command.text))
        distance = room.distance(command.index)
        return (
            f"{device.config.board} stands {distance:g} m from the person speaking: "
            f"it hears a wake word at {loudness_at(distance):.0f} dBFS"
        )
    if command.name in ("play", "stop-media"):
        # Home Assistant reaches the device as it is: nothing dials first.
        if voice is None:
            return "Voice is not set up"
        if command.name == "play":
            return await voice.media.play(device, command.index, command.text)
        return await voice.media.stop(device)
    if not device.connected:
        # A real device dials Home Assistant when it is woken.
        await device.connect()
    match command.name:
        case "say":
            if voice is None:
                return "Voice is not set up"
            reply = await voice.converse(device, command.index, command.text)
            return reply_lines(device.config.board, reply)
        case "wake":
            phrase = command.text or DEFAULT_WAKE_WORD
            loudness = loudness_at(room.distance(command.index))
            await device.wake(phrase, loudness=loudness)
            return f"{device.config.board} heard {phrase!r} and listens"
        case "listen":
            await device.send_listen("start", "manual")
            return f"{device.config.board} listens"
        case "stop":
            await device.send_listen("stop")
            return f"{device.config.board} stopped listening"
        case _:
            await device.send_abort()
            return f"{device.config.board} aborted"
