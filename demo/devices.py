"""The simulated devices of the demo."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator import (
    DeviceConfig,
    SimulatedDevice,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
)
from simulator.cli import client_id_for

from . import PASSWORD, USERNAME, ota_url
from .files import DemoPaths
from .voice import DemoVoice, Reply


def device_configs(port: int) -> list[DeviceConfig]:
    """Return the two demo devices; both know only the OTA address.

    The first speaks only WebSocket, the second takes MQTT + UDP when the OTA
    answer offers it (the firmware's choice).
    """
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


def summary_lines(
    url: str,
    paths: DemoPaths,
    devices: Sequence[DeviceReport],
    *,
    once: bool,
) -> list[str]:
    """Return what is printed once both devices are connected."""
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
        for device in devices
    )
    lines.append("")
    lines.append("Stopping (--once)." if once else "Press Ctrl-C to stop.")
    return lines


# ------------------------------------------------------------------ console

CONSOLE_HELP = """\
Commands (N is the device number shown by "devices"):
  devices              list the devices
  say N TEXT           the device hears its wake word, then TEXT (spoken by
                       espeak-ng); its reply is printed and saved as a WAV
  say N FILE.wav [TEXT]  the same with a recording (TEXT: what it says, for
                       the demo's stand-in speech-to-text; else the file name)
  wake N [PHRASE]      the device hears its wake word: it connects if needed,
                       says "listen detect" and starts listening (auto mode)
  listen N             start listening as push-to-talk does (manual mode)
  stop N               stop listening
  abort N              abort, as a button press while it speaks
  play N FILE|URL      play a sound file or a stream on the device's media
                       player; what it played is saved as a WAV when it ends
  stop-media N         stop what the device's media player plays
  help                 this text"""

DEFAULT_WAKE_WORD = "你好小智"


@dataclass(frozen=True, slots=True)
class Command:
    """A console command: what to do, to which device, with what text."""

    name: str
    index: int | None = None
    text: str = ""


def parse_command(line: str, device_count: int) -> Command:
    """Read a console line; raise ValueError with a message for a bad one."""
    words = line.strip().split(maxsplit=2)
    if not words:
        return Command("")
    name = words[0].lower()
    if name in ("help", "devices"):
        return Command(name)
    if name not in ("say", "wake", "listen", "stop", "abort", "play", "stop-media"):
        raise ValueError(f"unknown command {name!r}; type help")
    if len(words) < 2 or not words[1].isdigit():
        raise ValueError(f"{name} needs a device number; type devices")
    index = int(words[1])
    if not 1 <= index <= device_count:
        raise ValueError(f"no device {index}; there are {device_count}")
    text = words[2].strip() if len(words) > 2 else ""
    if name == "say" and not text:
        raise ValueError("say needs what to say: say 1 what time is it")
    if name == "play" and not text:
        raise ValueError("play needs a file or URL: play 2 song.mp3")
    return Command(name, index, text)


def reply_lines(board: str, reply: Reply) -> str:
    """Return what to print about a device's reply."""
    said = " ".join(reply.sentences) or "nothing"
    if reply.path is None:
        return f"{board} said {said!r} (no audio came back)"
    return (
        f"{board} said {said!r} ({reply.seconds:.1f} s of audio, saved to {reply.path})"
    )


async def execute(
    command: Command,
    devices: Sequence[SimulatedDevice],
    voice: DemoVoice | None = None,
) -> str:
    """Make a device act; return what to print."""
    if command.name == "help":
        return CONSOLE_HELP
    if command.name == "devices":
        return "\n".join(
            f"  {number}  {device.config.board} ({device.config.mac}) "
            f"{'connected' if device.connected else 'not connected'}"
            f"{' over MQTT + UDP' if device.uses_mqtt else ''}, "
            f"{device.state.activity}"
            for number, device in enumerate(devices, 1)
        )
    if command.index is None:
        return ""
    device = devices[command.index - 1]
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
            await device.send_listen("detect", text=phrase)
            await device.send_listen("start", "auto")
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
