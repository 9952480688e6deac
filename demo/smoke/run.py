"""The smoke run: its steps, their timings, the log check and the summary."""

import argparse
import asyncio
from collections.abc import AsyncIterator, Sequence
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
import logging
from pathlib import Path
import shutil
import signal
import socket
import time
from typing import Any, Final

import aiohttp

from simulator import DeviceConfig, DeviceError, SimulatedDevice
from simulator.cli import client_id_for

from .. import DOMAIN, ROOT, DemoError, base_url, ota_url, say
from ..client import HomeAssistantClient, connected_entity, onboarding_done_steps
from ..main import setup_device_logging
from ..process import HomeAssistantProcess
from ..voice import ENGINES, WAKE_WORD, DemoVoice, pipeline_settings
from . import SmokeError
from .config import free_port, prepare_config_dir
from .log import failures, integration_warnings
from .releases import ReleaseServer
from .venv import (
    SMOKE_DIR,
    available_releases,
    ensure_venv,
    http_store_version,
    pick_release,
)

# The devices: a board with a release zip in the local release list, on an
# older firmware than that release.
BOARD: Final = "esp-box-3"
CHIP: Final = "esp32s3"
INSTALLED_FIRMWARE: Final = "2.0.4"
WEBSOCKET_MAC: Final = "02:00:5a:53:00:01"
MQTT_MAC: Final = "02:00:5a:53:00:02"
# What the person says (the stand-in speech-to-text answers it once it hears
# speech); Home Assistant's own agent knows the answer offline.
QUESTION: Final = "what time is it"
# The barge-in: a pipeline with the demo engines' own agent (which answers
# ANSWER after the delay it is given), selected on the device; the agent
# thinks about the first question for AGENT_SLOW seconds, and the device's
# button interrupts it. The device must hear "tts stop" within STOP_WITHIN
# seconds, listen again by itself, and have its second question answered.
AGENT_PIPELINE: Final = "XiaoZhi smoke: demo agent"
FIRST_QUESTION: Final = "tell me a very long story"
SECOND_QUESTION: Final = "just say something short"
ANSWER: Final = "This is the demo agent's answer."
AGENT_SLOW: Final = 20.0
STOP_WITHIN: Final = 0.5
# What Home Assistant 2026.11 says when a turn of the conversation still runs.
BUSY_MARKS: Final = ("intent-busy", "ConversationBusyError", "busy with another")
DEFAULT_TIMEOUT: Final = 120.0
REPLY_TIMEOUT: Final = 60.0
OWNER: Final = {"name": "Smoke", "username": "smoke", "password": "smoke-test"}
KEEP_RUNS: Final = 5


# ------------------------------------------------------------------ steps


@dataclass(slots=True)
class StepResult:
    """How a step went."""

    name: str
    seconds: float = 0.0
    outcome: str = ""
    error: str | None = None


class Steps:
    """Times steps and records how each went."""

    def __init__(self) -> None:
        """Start with no step."""
        self.results: list[StepResult] = []

    @property
    def failed(self) -> bool:
        """Return True once a step failed."""
        return any(result.error is not None for result in self.results)

    @contextlib.asynccontextmanager
    async def step(self, name: str) -> AsyncIterator[StepResult]:
        """Time a step; record an error (and raise it) if it fails."""
        result = StepResult(name)
        self.results.append(result)
        say(f"==> {name}")
        started = time.monotonic()
        try:
            yield result
        except asyncio.CancelledError:
            result.error = "interrupted"
            raise
        except TimeoutError as err:
            result.error = f"timed out {err}".strip()
            raise
        except Exception as err:
            result.error = str(err) or type(err).__name__
            raise
        finally:
            result.seconds = time.monotonic() - started
            if result.error is None:
                say(f"    {result.outcome or 'done'} ({result.seconds:.1f} s)")
            else:
                say(f"    FAILED ({result.seconds:.1f} s): {result.error}")


def summary(version: str, results: Sequence[StepResult], total: float) -> list[str]:
    """Return the summary lines of a run."""
    lines = ["", f"Smoke run against Home Assistant {version}:"]
    for result in results:
        mark = "ok  " if result.error is None else "FAIL"
        text = result.outcome if result.error is None else result.error
        first = text.splitlines()[0] if text else ""
        lines.append(f"  {mark} {result.seconds:6.1f} s  {result.name}: {first}")
    failed = any(result.error is not None for result in results)
    lines.append(f"  {'FAILED' if failed else 'PASSED'} in {total:.1f} s")
    return lines


# ------------------------------------------------------------------ the run


def device_config(mac: str, port: int) -> DeviceConfig:
    """Return a device that knows only the OTA address, with quick retries."""
    return DeviceConfig(
        mac=mac,
        client_id=client_id_for(mac),
        board=BOARD,
        chip=CHIP,
        firmware=INSTALLED_FIRMWARE,
        language="en-US",
        ota_url=ota_url(port),
        retry_delay=1.0,
        max_backoff=5.0,
        activation_poll_interval=0.5,
        activation_retry_delay=1.0,
        ota_retry_delay=1.0,
    )


def tts_stops(device: SimulatedDevice) -> int:
    """Return how many ``tts stop`` messages the device has had."""
    return sum(1 for _at, what in device.timeline if what == "tts:stop")


class Smoke:
    """One Home Assistant, the release source and the devices of a run."""

    def __init__(
        self, python: Path, run_dir: Path, version: str, args: argparse.Namespace
    ) -> None:
        """Prepare; nothing runs before the steps do."""
        self.python = python
        self.version = version
        self.timeout: float = args.timeout
        self.debug: bool = args.debug
        self.run_dir = run_dir
        self.config = run_dir / "config"
        self.port = free_port()
        self.ha = HomeAssistantProcess(self.config, run_dir / "output.log", str(python))
        self.session = aiohttp.ClientSession()
        self.client = HomeAssistantClient(self.session, self.port)
        self.voice = DemoVoice(self.client, run_dir / "replies")
        self.releases = ReleaseServer(BOARD, CHIP)
        self.devices: list[SimulatedDevice] = []
        self.server_entry_id = ""
        # Home Assistant reached RUNNING (before, a SIGTERM simply ends it).
        self.started = False
        self.mqtt_port = free_port()
        self.udp_port = free_port(socket.SOCK_DGRAM)

    @property
    def log(self) -> Path:
        """Return Home Assistant's own log file."""
        return self.config / "home-assistant.log"

    async def run(self, steps: Steps) -> None:
        """Run every step; raise on the first that fails."""
        async with steps.step("Start Home Assistant") as step:
            await self.start_home_assistant()
            step.outcome = f"{self.version} running on {base_url(self.port)}"
        async with steps.step("Voice pipeline (demo engines)") as step:
            await self.voice.ensure_pipeline(self.timeout)
            step.outcome = "preferred pipeline with the demo speech engines"
        async with steps.step("XiaoZhi server (config flow)") as step:
            step.outcome = await self.set_up_server()
        async with steps.step("Pair a device over WebSocket") as step:
            websocket = await self.pair(WEBSOCKET_MAC, mqtt=False)
            step.outcome = f"{websocket.config.mac} connected over WebSocket"
        async with steps.step("Spoken exchange over WebSocket") as step:
            step.outcome = await self.exchange(websocket)
        async with steps.step("Barge-in while the agent answers (WebSocket)") as step:
            step.outcome = await self.barge_in(websocket)
        async with steps.step("Firmware update check") as step:
            step.outcome = await self.update_check(websocket)
        async with steps.step("Transport: MQTT + UDP (options flow)") as step:
            step.outcome = await self.set_transport("auto")
        async with steps.step("Pair a device over MQTT + UDP") as step:
            mqtt = await self.pair(MQTT_MAC, mqtt=True)
            step.outcome = f"{mqtt.config.mac} connected over MQTT + UDP"
        async with steps.step("Spoken exchange over MQTT + UDP") as step:
            step.outcome = await self.exchange(mqtt)
        async with steps.step("Barge-in while the agent answers (MQTT + UDP)") as step:
            step.outcome = await self.barge_in(mqtt)

    # ------------------------------------------------------------ start

    async def start_home_assistant(self) -> None:
        """Write the configuration, start Home Assistant, get a token."""
        store = await asyncio.to_thread(http_store_version, self.python)
        prepare_config_dir(self.config, self.port, store, debug=self.debug)
        await self.releases.start()
        await self.ha.start()
        client = self.client
        async with asyncio.timeout(self.timeout):
            await self.ha.async_wait_http(self.session, base_url(self.port))
            client.token = await self._owner_token()
            await client.ws_connect(client.token)
            while True:
                self.ha.check()
                config = await client.ws("get_config")
                if config.get("state") == "RUNNING":
                    break
                await asyncio.sleep(0.5)
        self.started = True
        if config.get("version") != self.version:
            raise SmokeError(f"Home Assistant {config.get('version')} is running")
        # Devices are told to connect to the local network URL.
        await client.ws("config/core/update", internal_url=base_url(self.port))

    async def _owner_token(self) -> str:
        """Onboard the owner through the API; return a long-lived token.

        Only the owner step: the core configuration step would add
        integrations that need the internet (weather, radio, Google's
        text-to-speech).
        """
        client = self.client
        status = await client.request("GET", "/api/onboarding", ok=(200, 404))
        if "user" in onboarding_done_steps(status):
            raise SmokeError("The new configuration already has an owner")
        answer = await client.request(
            "POST",
            "/api/onboarding/users",
            json_body={"client_id": client.client_id, "language": "en", **OWNER},
        )
        tokens = await client.exchange_code(answer["auth_code"])
        await client.ws_connect(tokens["access_token"])
        token = await client.ws(
            "auth/long_lived_access_token", client_name="scripts/smoke", lifespan=1
        )
        await client.ws_close()
        if not isinstance(token, str):
            raise SmokeError(f"No long-lived access token in {token!r}")
        return token

    # ------------------------------------------------------------ server

    async def _flow(self, path: str, handler: str, values: dict[str, Any]) -> Any:
        """Start a flow, check its first form, submit ``values``; return the end."""
        client = self.client
        form = await client.request("POST", path, json_body={"handler": handler})
        if form.get("type") != "form":
            raise SmokeError(f"{handler}: expected a form, got {form}")
        result = await client.request(
            "POST", f"{path}/{form['flow_id']}", json_body=values
        )
        if result.get("type") != "create_entry":
            raise SmokeError(
                f"{handler}: step {form.get('step_id')} answered {result.get('type')}"
                f" (errors: {result.get('errors')}, reason: {result.get('reason')})"
            )
        return result

    def _server_options(self, transport: str) -> dict[str, Any]:
        return {
            "transport": transport,
            "mqtt_port": self.mqtt_port,
            "udp_port": self.udp_port,
            "firmware_releases_url": self.releases.list_url,
            "firmware_prereleases": False,
            "wake_arbitration": True,
        }

    async def set_up_server(self) -> str:
        """Add the integration (the server entry), WebSocket only at first."""
        result = await self._flow(
            "/api/config/config_entries/flow",
            DOMAIN,
            {
                "transport": "websocket",
                "mqtt_port": self.mqtt_port,
                "udp_port": self.udp_port,
            },
        )
        self.server_entry_id = str(result["result"]["entry_id"])
        # The release source is a setting of the server entry's options.
        await self._flow(
            "/api/config/config_entries/options/flow",
            self.server_entry_id,
            self._server_options("websocket"),
        )
        return (
            f"{result['title']}: WebSocket only (MQTT on {self.mqtt_port}/tcp and "
            f"{self.udp_port}/udp once asked), releases from {self.releases.url}"
        )

    async def set_transport(self, transport: str) -> str:
        """Change the server's transport through its options flow."""
        await self._flow(
            "/api/config/config_entries/options/flow",
            self.server_entry_id,
            self._server_options(transport),
        )
        return f"transport set to {transport!r}"

    # ------------------------------------------------------------ devices

    async def pair(self, mac: str, *, mqtt: bool) -> SimulatedDevice:
        """Start a device, type its code in "Add integration", wait until connected."""
        device = SimulatedDevice(device_config(mac, self.port))
        self.devices.append(device)
        device.start()
        async with asyncio.timeout(self.timeout):
            code = await device.wait_activation_code(timeout=self.timeout)
            say(f"    {mac} shows the code {code}")
            result = await self._flow(
                "/api/config/config_entries/flow", DOMAIN, {"code": code}
            )
            say(f"    paired {result['title']}")
            await device.wait_for(lambda: device.connected, timeout=self.timeout)
            entity_id = await self._connected_sensor(mac)
        if device.uses_mqtt is not mqtt:
            used = "MQTT + UDP" if device.uses_mqtt else "WebSocket"
            raise SmokeError(f"{mac} connected over {used}")
        say(f"    {entity_id} is on")
        return device

    async def _connected_sensor(self, mac: str) -> str:
        """Wait until the device's "connected" binary sensor is on."""
        client = self.client
        while True:
            self.ha.check()
            entities = await client.ws("config/entity_registry/list")
            if (entity := connected_entity(entities, mac)) is not None:
                entity_id = str(entity["entity_id"])
                state = await client.request(
                    "GET", f"/api/states/{entity_id}", ok=(200, 404)
                )
                if isinstance(state, dict) and state.get("state") == "on":
                    return entity_id
            await asyncio.sleep(0.5)

    async def exchange(self, device: SimulatedDevice) -> str:
        """Wake the device, ask the question, wait until the reply has played."""
        await self.client.request(
            "POST",
            f"/api/services/{ENGINES}/set_transcript",
            json_body={"text": QUESTION},
        )
        speech = await self.voice.speech(QUESTION)
        record = device.speaker.record
        received, played = record.received, len(record.played_pcm)
        heard, said = len(device.stt_texts), len(device.tts_sentences)
        udp_before = device.udp_record.accepted
        stops = tts_stops(device)
        await device.wake(WAKE_WORD, speech)
        try:
            # Done once Home Assistant said "tts stop" and the speaker has
            # played what it had.
            await device.wait_for(
                lambda: tts_stops(device) > stops and device.speaker.idle,
                timeout=REPLY_TIMEOUT,
            )
        except TimeoutError:
            raise SmokeError(
                f"No reply played within {REPLY_TIMEOUT:.0f} s (the device was shown "
                f"{device.stt_texts[heard:]!r} and told "
                f"{device.tts_sentences[said:]!r}, and received "
                f"{record.received - received} audio frames)"
            ) from None
        frames = record.received - received
        seconds = (len(record.played_pcm) - played) / 2 / device.speaker.rate
        transcript = device.stt_texts[heard:]
        if QUESTION not in transcript:
            raise SmokeError(f"The device was shown {transcript!r}, not {QUESTION!r}")
        if frames <= 0 or seconds <= 0:
            raise SmokeError(f"{frames} frames, {seconds:.2f} s of reply audio")
        if device.uses_mqtt and device.udp_record.accepted <= udp_before:
            raise SmokeError("The reply did not come over UDP")
        reply = " ".join(device.tts_sentences[said:]) or "(no text)"
        return f"{reply!r}: {frames} frames, {seconds:.1f} s of audio played"

    # ------------------------------------------------------------ barge-in

    async def barge_in(self, device: SimulatedDevice) -> str:
        """Interrupt the agent with the button; the next question is answered.

        The integration sends ``tts start`` as the agent starts thinking, so
        the device is Speaking while the agent thinks; its button then sends
        ``abort``. The integration must say ``tts stop`` at once and cancel
        the run with its agent: Home Assistant 2026.11 allows one active turn
        per conversation, and the device's next ``listen start`` (after
        ``tts stop``, in auto mode) is a new turn of the same conversation.
        """
        agent = self.voice.engines["conversation"]
        await self._select_pipeline(device, await self._agent_pipeline(agent))
        before = await self._agent_state(agent)
        first, second = await asyncio.gather(
            self.voice.speech(FIRST_QUESTION), self.voice.speech(SECOND_QUESTION)
        )
        await self._engines("set_agent_delay", seconds=AGENT_SLOW)
        await self._engines("set_transcript", text=FIRST_QUESTION)
        received, heard, said = (
            len(device.received),
            len(device.stt_texts),
            len(device.tts_sentences),
        )
        await device.wake(WAKE_WORD, first)
        starts = device.listen_starts

        # Speaking (tts start came as the agent started), the agent thinking.
        async with asyncio.timeout(REPLY_TIMEOUT):
            while True:
                self.ha.check()
                state = await self._agent_state(agent)
                if (
                    device.state.activity == "speaking"
                    and state.get("thinking")
                    and state.get("question") == FIRST_QUESTION
                ):
                    conversation_id = state.get("conversation_id")
                    break
                await asyncio.sleep(0.1)
        stops = tts_stops(device)
        loop = asyncio.get_running_loop()
        pressed = loop.time()
        await device.press_button()
        try:
            await device.wait_for(lambda: tts_stops(device) > stops, timeout=10)
        except TimeoutError:
            raise SmokeError("No tts stop within 10 s of the button's abort") from None
        stopped = next(
            at for at, what in device.timeline if what == "tts:stop" and at >= pressed
        )
        latency = stopped - pressed
        if latency > STOP_WITHIN:
            raise SmokeError(
                f"tts stop came {latency:.2f} s after the button's abort "
                f"(at most {STOP_WITHIN} s)"
            )

        # The agent is quick now; the device listens again by itself.
        await self._engines("set_agent_delay", seconds=0)
        await self._engines("set_transcript", text=SECOND_QUESTION)
        try:
            await device.wait_for(
                lambda: (
                    device.listen_starts > starts
                    and device.state.activity == "listening"
                ),
                timeout=10,
            )
        except TimeoutError:
            raise SmokeError(
                f"The device did not listen again after tts stop (it is "
                f"{device.state.activity})"
            ) from None
        record = device.speaker.record
        frames = record.received
        played = len(record.played_pcm)
        stops = tts_stops(device)
        device.say(second)
        try:
            await device.wait_for(
                lambda: tts_stops(device) > stops and device.speaker.idle,
                timeout=REPLY_TIMEOUT,
            )
        except TimeoutError:
            raise SmokeError(
                f"No second reply within {REPLY_TIMEOUT:.0f} s (the device was "
                f"shown {device.stt_texts[heard:]!r} and told "
                f"{device.tts_sentences[said:]!r})"
            ) from None
        frames = record.received - frames
        seconds = (len(record.played_pcm) - played) / 2 / device.speaker.rate
        after = await self._agent_state(agent)
        self._check_barge_in(device, received, heard, said, frames)
        if (
            after.get("question") != SECOND_QUESTION
            or after.get("answers", 0) != before.get("answers", 0) + 1
            or after.get("interrupted", 0) != before.get("interrupted", 0) + 1
        ):
            raise SmokeError(
                f"The agent was not interrupted once and then answered once: "
                f"{before} -> {after}"
            )
        if not conversation_id or after.get("conversation_id") != conversation_id:
            # Then nothing here tried two turns of one conversation at once.
            raise SmokeError(
                f"The second question was another conversation "
                f"({after.get('conversation_id')}, not {conversation_id})"
            )
        return (
            f"tts stop {latency * 1000:.0f} ms after the abort, the agent "
            f"cancelled; the next question of the conversation answered "
            f"{ANSWER!r}: {frames} frames, {seconds:.1f} s played"
        )

    def _check_barge_in(
        self,
        device: SimulatedDevice,
        received: int,
        heard: int,
        said: int,
        frames: int,
    ) -> None:
        """Raise unless both questions were heard and only the answer was said."""
        if device.stt_texts[heard:] != [FIRST_QUESTION, SECOND_QUESTION]:
            raise SmokeError(f"The device was shown {device.stt_texts[heard:]!r}")
        # A pipeline error (intent-busy among them) shows a sad face and a
        # sentence saying the assistant failed.
        sad = [
            frame
            for frame in device.received[received:]
            if frame.get("type") == "llm" and frame.get("emotion") == "sad"
        ]
        sentences = device.tts_sentences[said:]
        if sad or sentences != [ANSWER]:
            raise SmokeError(
                f"The device was told {sentences!r}"
                + (" with a sad face" if sad else "")
            )
        if frames <= 0:
            raise SmokeError("No audio of the second reply")
        text = self.log.read_text(encoding="utf-8", errors="replace")
        if busy := [mark for mark in BUSY_MARKS if mark in text]:
            raise SmokeError(f"Home Assistant's log says {', '.join(busy)}")

    async def _engines(self, service: str, **data: Any) -> None:
        await self.client.request(
            "POST", f"/api/services/{ENGINES}/{service}", json_body=data
        )

    async def _agent_state(self, agent: str) -> dict[str, Any]:
        state = await self.client.request("GET", f"/api/states/{agent}")
        return dict(state.get("attributes", {}))

    async def _agent_pipeline(self, agent: str) -> str:
        """Create the pipeline with the demo agent once; return its name."""
        listing = await self.client.ws("assist_pipeline/pipeline/list")
        if not any(p.get("name") == AGENT_PIPELINE for p in listing["pipelines"]):
            await self.client.ws(
                "assist_pipeline/pipeline/create",
                **pipeline_settings(
                    self.voice.engines["stt"],
                    self.voice.engines["tts"],
                    name=AGENT_PIPELINE,
                    agent=agent,
                    # Every question goes to the agent.
                    prefer_local_intents=False,
                ),
            )
        return AGENT_PIPELINE

    async def _select_pipeline(self, device: SimulatedDevice, name: str) -> None:
        """Choose the device's pipeline on its "Assistant" select."""
        unique_id = f"{device.config.mac}-pipeline"
        entities = await self.client.ws("config/entity_registry/list")
        entity_id = next(
            (
                str(entity["entity_id"])
                for entity in entities
                if entity.get("platform") == DOMAIN
                and entity.get("unique_id") == unique_id
            ),
            None,
        )
        if entity_id is None:
            raise SmokeError(f"No Assistant select ({unique_id})")
        await self.client.request(
            "POST",
            "/api/services/select/select_option",
            json_body={"entity_id": entity_id, "option": name},
        )
        state = await self.client.request("GET", f"/api/states/{entity_id}")
        if state.get("state") != name:
            raise SmokeError(f"{entity_id} is {state.get('state')!r}, not {name!r}")

    async def update_check(self, device: SimulatedDevice) -> str:
        """Ask for an update check; the entity must show the local release."""
        client = self.client
        unique_id = f"{device.config.mac}-firmware"
        entities = await client.ws("config/entity_registry/list")
        entity_id = next(
            (
                str(entity["entity_id"])
                for entity in entities
                if entity.get("platform") == DOMAIN
                and entity.get("unique_id") == unique_id
            ),
            None,
        )
        if entity_id is None:
            raise SmokeError(f"No firmware update entity ({unique_id})")
        await client.request(
            "POST",
            "/api/services/homeassistant/update_entity",
            json_body={"entity_id": entity_id},
        )
        state = await client.request("GET", f"/api/states/{entity_id}")
        attributes = state.get("attributes", {})
        installed = attributes.get("installed_version")
        latest = attributes.get("latest_version")
        if (state.get("state"), installed, latest) != (
            "on",
            INSTALLED_FIRMWARE,
            self.releases.version,
        ):
            raise SmokeError(
                f"{entity_id} is {state.get('state')!r}: installed {installed!r}, "
                f"latest {latest!r} (the release list was read "
                f"{self.releases.list_reads} times)"
            )
        return f"{entity_id}: {installed} -> {latest} offered"

    # ------------------------------------------------------------ stop

    async def shutdown(self) -> None:
        """Stop the devices, the release source and Home Assistant."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.gather(
                    *(device.stop() for device in self.devices),
                    return_exceptions=True,
                )
        with contextlib.suppress(aiohttp.ClientError, OSError):
            await self.client.ws_close()
        await self.session.close()
        await self.releases.stop()
        await self.voice.media.close()
        if self.ha.running:
            await self.ha.stop()
            if self.started and self.ha.returncode != 0:
                raise SmokeError(
                    f"Home Assistant stopped with exit code {self.ha.returncode}"
                )

    def log_problems(self) -> tuple[list[str], list[str]]:
        """Return the log's failing records and the integration's warnings."""
        if not self.ha.started and not self.log.exists():
            return [], []
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            return [f"Cannot read {self.log}: {err}"], []
        return (
            [entry.text for entry in failures(text)],
            [entry.first_line for entry in integration_warnings(text, DOMAIN)],
        )


# ------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    """Return the command line parser."""
    parser = argparse.ArgumentParser(
        prog="scripts/smoke",
        description=(
            "Start a real Home Assistant release with the XiaoZhi integration, "
            "pair simulated devices over WebSocket and over MQTT + UDP, hold a "
            "spoken exchange and a barge-in while the agent answers on each, "
            "check a firmware update; fail on any error in Home Assistant's log."
        ),
    )
    parser.add_argument(
        "--ha",
        metavar="VERSION",
        help=(
            "homeassistant release to test: 2026.11.0, or 2026.11 for the newest "
            "2026.11.x (default: the newest on PyPI)"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long each step may wait (default {DEFAULT_TIMEOUT:.0f})",
    )
    parser.add_argument(
        "--rebuild", action="store_true", help="build the venv again, even if cached"
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="log the integration's debug messages (and the devices')",
    )
    return parser


def new_run_dir(version: str) -> Path:
    """Return a fresh directory for a run; keep only the last few runs."""
    runs = SMOKE_DIR / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for old in sorted(runs.iterdir())[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
    run_dir = runs / f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{version}"
    run_dir.mkdir()
    return run_dir


async def run(
    python: Path, version: str, args: argparse.Namespace, steps: Steps
) -> int:
    """Run the steps with signal handling; return the exit code."""
    loop = asyncio.get_running_loop()
    run_dir = new_run_dir(version)
    setup_device_logging(run_dir / "devices.log")
    if args.debug:
        logging.getLogger("simulator").setLevel(logging.DEBUG)
    smoke = Smoke(python, run_dir, version, args)
    task = asyncio.current_task()
    assert task is not None  # noqa: S101 - always inside a task here
    signals = 0

    def on_signal() -> None:
        # The first stops the steps; another one kills Home Assistant.
        nonlocal signals
        signals += 1
        if signals == 1:
            task.cancel()
        else:
            smoke.ha.kill()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        try:
            await smoke.run(steps)
        except asyncio.CancelledError:
            task.uncancel()
            say("Interrupted: stopping everything")
        except SmokeError, DemoError, DeviceError, TimeoutError, aiohttp.ClientError:
            pass  # recorded by its step
        with contextlib.suppress(SmokeError, OSError, TimeoutError):
            async with steps.step("Stop devices and Home Assistant") as step:
                await smoke.shutdown()
                step.outcome = f"Home Assistant exited with code {smoke.ha.returncode}"
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if signals:
        return 130
    errors, warnings = smoke.log_problems()
    result = StepResult("Home Assistant's log", outcome="no errors")
    steps.results.append(result)
    for line in warnings:
        say(f"    warning: {line}")
    if errors:
        result.error = f"{len(errors)} errors in {smoke.log}"
        for text in errors:
            print(text, flush=True)
    elif warnings:
        result.outcome = f"no errors; {len(warnings)} warnings name {DOMAIN}"
    say(f"Files of this run: {run_dir}")
    return 1 if steps.failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Build or reuse the venv, run the smoke test, print the summary."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    steps = Steps()
    started = time.monotonic()
    version = "?"
    try:
        version = pick_release(args.ha, available_releases())
        say(f"Home Assistant {version}")
        venv_started = time.monotonic()
        python, built = ensure_venv(version, rebuild=args.rebuild)
        venv_dir = python.parent.parent.relative_to(ROOT)
        steps.results.append(
            StepResult(
                f"Venv with homeassistant=={version}",
                time.monotonic() - venv_started,
                f"{'built' if built else 'cached'} in {venv_dir}",
            )
        )
        code = asyncio.run(run(python, version, args, steps))
    except SmokeError as err:
        steps.results.append(StepResult("Venv", error=str(err)))
        say(f"Error: {err}")
        code = 1
    except KeyboardInterrupt:
        code = 130
    for line in summary(version, steps.results, time.monotonic() - started):
        print(line, flush=True)
    return code
