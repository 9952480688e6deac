"""The demo's run: start everything, pair the devices, wait for Ctrl-C."""

import argparse
import asyncio
from collections.abc import Mapping, Sequence
import contextlib
from datetime import UTC, datetime
import logging
import os
from pathlib import Path
import shutil
import signal
import sys
from typing import Any

import aiohttp

from simulator import DeviceError, SimulatedDevice

from . import (
    DEFAULT_PORT,
    DEFAULT_TIMEOUT,
    DEVICE_STOP_TIMEOUT,
    DOMAIN,
    HOST,
    LANGUAGE,
    ONBOARDING_STEPS,
    OWNER_NAME,
    PASSWORD,
    ROOT,
    TOKEN_LIFESPAN_DAYS,
    TOKEN_NAME,
    USERNAME,
    DemoError,
    base_url,
    ota_url,
    say,
)
from .client import (
    HomeAssistantClient,
    connected_entity,
    device_entry,
    entry_titles,
    find_area,
    find_pairing_flow,
    onboarding_done_steps,
)
from .devices import (
    MAX_EXTRA_DEVICES,
    DeviceReport,
    Room,
    country_from_locale,
    device_configs,
    execute,
    parse_command,
    summary_lines,
)
from .files import DemoPaths, port_in_use, prepare_config_dir, write_private
from .process import HomeAssistantProcess
from .voice import DemoVoice


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return port


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return number


def _extra_devices(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 <= count <= MAX_EXTRA_DEVICES:
        raise argparse.ArgumentTypeError(f"from 0 to {MAX_EXTRA_DEVICES}: {count}")
    return count


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the demo."""
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description=(
            "Run Home Assistant with the XiaoZhi integration on 127.0.0.1 and pair "
            "two simulated XiaoZhi devices with it, both in its Living room area. "
            "Log in as demo / demo."
        ),
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port of Home Assistant's web server (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--once",
        action="store_true",
        help="stop as soon as every device is connected (a non-interactive check)",
    )
    parser.add_argument(
        "--extra-devices",
        type=_extra_devices,
        default=0,
        metavar="N",
        help=(
            f"add N more devices to the room (0 to {MAX_EXTRA_DEVICES}, default 0): "
            '"wake all" makes every device hear one wake word'
        ),
    )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="delete .demo first: a new owner, token and pairing",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=(
            "how long to wait for Home Assistant to start and for the devices to "
            f"connect (default {DEFAULT_TIMEOUT:.0f})"
        ),
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    return build_parser().parse_args(argv)


class Demo:
    """Home Assistant, its owner and token, and the simulated devices."""

    def __init__(self, args: argparse.Namespace, paths: DemoPaths) -> None:
        """Prepare from the command line."""
        self.args = args
        self.paths = paths
        self.port: int = args.port
        self.timeout: float = args.timeout
        self.ha = HomeAssistantProcess(paths.config, paths.log)
        self.session = aiohttp.ClientSession()
        self.client = HomeAssistantClient(self.session, self.port)
        self.devices: list[SimulatedDevice] = []
        self.reports: list[DeviceReport] = []
        self.room = Room()
        self.voice = DemoVoice(self.client, paths.replies)

    # ---------------------------------------------------------------- start

    async def start(self) -> None:
        """Do everything up to "every device is connected", in the room's area."""
        if port_in_use(self.port):
            raise DemoError(
                f"Port {self.port} on {HOST} is in use (is another Home Assistant "
                "running?). Choose another one with --port."
            )
        if self.args.reset and self.paths.demo.exists():
            say(f"Deleting {self.paths.demo}")
            shutil.rmtree(self.paths.demo)
        prepare_config_dir(self.paths, self.port, datetime.now(UTC))
        setup_device_logging(self.paths.devices_log)

        say(
            f"Starting Home Assistant on {base_url(self.port)} "
            f"(output in {self.paths.log})"
        )
        await self.ha.start()
        client = self.client
        async with asyncio.timeout(self.timeout):
            await self.ha.async_wait_http(self.session, base_url(self.port))
        say("Home Assistant answers; logging in")
        client.token = await self._owner_token()
        await client.ws_connect(client.token)
        config = await self._wait_running()
        say("Home Assistant is running")
        await self._update_core_config(config)
        await self.voice.ensure_pipeline(self.timeout)
        if DOMAIN not in config.get("components", []):
            await self._set_up_server()
        await self._start_devices()

    async def _wait_running(self) -> dict[str, Any]:
        """Wait until Home Assistant has started; return its configuration."""
        async with asyncio.timeout(self.timeout):
            while True:
                self.ha.check()
                config = await self.client.ws("get_config")
                if config.get("state") == "RUNNING":
                    return dict(config)
                await asyncio.sleep(0.5)

    async def _update_core_config(self, config: Mapping[str, Any]) -> None:
        """Set the local network URL (and the country if none is set).

        Home Assistant tells devices where to connect with its local network
        URL. Without one it would offer the machine's network address, on which
        the demo's server (bound to 127.0.0.1) does not listen. The country is
        what the onboarding pages of the web interface would ask for.
        """
        url = base_url(self.port)
        changes: dict[str, Any] = {}
        said = []
        if config.get("internal_url") != url:
            changes["internal_url"] = url
            said.append(f"its local network URL to {url}")
        if not config.get("country"):
            changes["country"] = country_from_locale(os.environ)
            said.append(f"its country to {changes['country']}")
        if changes:
            await self.client.ws("config/core/update", **changes)
            say(f"Set {' and '.join(said)}")

    async def _set_up_server(self) -> None:
        """Add the integration once, as a person would: "Add integration > XiaoZhi".

        The first flow makes Home Assistant the devices' server, with the
        settings it suggests (MQTT + UDP on its own ports); devices that check
        in then start their own pairing flows.
        """
        flow = await self.client.request(
            "POST", "/api/config/config_entries/flow", json_body={"handler": DOMAIN}
        )
        suggested = {
            field["name"]: field["description"]["suggested_value"]
            for field in flow["data_schema"]
        }
        await self.client.request(
            "POST",
            f"/api/config/config_entries/flow/{flow['flow_id']}",
            json_body=suggested,
        )
        say("Set up the XiaoZhi server (Add integration > XiaoZhi)")

    async def _owner_token(self) -> str:
        """Onboard the owner if needed; return a valid long-lived access token."""
        client = self.client
        done = onboarding_done_steps(
            await client.request("GET", "/api/onboarding", ok=(200, 404))
        )
        tokens: dict[str, Any] | None = None
        if "user" not in done:
            answer = await client.request(
                "POST",
                "/api/onboarding/users",
                json_body={
                    "client_id": client.client_id,
                    "name": OWNER_NAME,
                    "username": USERNAME,
                    "password": PASSWORD,
                    "language": LANGUAGE,
                },
            )
            tokens = await client.exchange_code(answer["auth_code"])
            say(f"Created the owner {USERNAME} / {PASSWORD}")
        remaining = [step for step in ONBOARDING_STEPS[1:] if step not in done]
        if remaining:
            if tokens is None:
                tokens = await client.login(USERNAME, PASSWORD)
            access = tokens["access_token"]
            for step in remaining:
                body = None
                if step == "integration":
                    body = {
                        "client_id": client.client_id,
                        "redirect_uri": client.redirect_uri,
                    }
                await client.request(
                    "POST", f"/api/onboarding/{step}", token=access, json_body=body
                )
            say(f"Finished onboarding ({', '.join(remaining)})")

        token = self._saved_token()
        # An access token is a JWT: three dot-separated parts. Only a
        # plausible one is tried, as a wrong one counts as a failed login.
        if (
            token is not None
            and token.count(".") == 2
            and await client.status("/api/", token) == 200
        ):
            say(f"Using the access token in {self.paths.token}")
        else:
            if tokens is None:
                tokens = await client.login(USERNAME, PASSWORD)
            await client.ws_connect(tokens["access_token"])
            token = await client.ws(
                "auth/long_lived_access_token",
                client_name=f"{TOKEN_NAME} {datetime.now(UTC):%Y-%m-%d %H:%M:%S}",
                lifespan=TOKEN_LIFESPAN_DAYS,
            )
            await client.ws_close()
            if not isinstance(token, str):
                raise DemoError(f"No long-lived access token in {token!r}")
            write_private(self.paths.token, token + "\n")
            say(f"Created a long-lived access token in {self.paths.token}")
        if tokens is not None:
            # The login was only needed to get here; do not leave it behind.
            await client.revoke(tokens["refresh_token"])
        return token

    def _saved_token(self) -> str | None:
        try:
            token = self.paths.token.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return token or None

    async def _start_devices(self) -> None:
        configs = device_configs(self.port, self.args.extra_devices)
        for config in configs:
            device = SimulatedDevice(config)
            self.devices.append(device)
            self.reports.append(DeviceReport(mac=config.mac, board=config.board))
            device.start()
        say(
            f"Started {len(configs)} simulated devices with OTA address "
            f"{ota_url(self.port)}"
        )
        async with asyncio.timeout(self.timeout):
            # Devices paired on an earlier run show no code: they just connect.
            await asyncio.gather(
                *(
                    self._pair(device, report)
                    for device, report in zip(self.devices, self.reports, strict=True)
                )
            )
            await self._wait_connected()
            await self._put_in_area()

    async def _pair(self, device: SimulatedDevice, report: DeviceReport) -> None:
        """Enter the code the device shows in its pairing flow."""
        client = self.client
        mac = device.config.mac
        tried: set[str] = set()
        while True:
            await device.wait_for(
                lambda: (
                    device.connected
                    or (device.activation_code or "") not in ("", *tried)
                ),
                timeout=self.timeout,
            )
            if device.connected:
                return
            code = device.activation_code or ""
            tried.add(code)
            say(f"{device.config.board} ({mac}) shows the code {code}")
            flow_id = None
            while flow_id is None:
                flows = await client.ws("config_entries/flow/progress")
                flow_id = find_pairing_flow(flows, mac)
                if flow_id is None:
                    await asyncio.sleep(0.5)
            result = await client.request(
                "POST",
                f"/api/config/config_entries/flow/{flow_id}",
                json_body={"code": code},
            )
            if result.get("type") == "create_entry":
                report.title = str(result.get("title", ""))
                report.paired_now = True
                say(f"Paired {report.title}")
                return
            if result.get("type") == "abort":
                raise DemoError(
                    f"Pairing {mac} was aborted: {result.get('reason')}. "
                    "Run scripts/demo again to get a new code."
                )
            say(f"Home Assistant did not take the code: {result.get('errors')}")

    async def _wait_connected(self) -> None:
        """Wait until every device's "connected" sensor is on."""
        client = self.client
        devices = {device.config.mac: device for device in self.devices}
        waiting = {report.mac: report for report in self.reports}
        while waiting:
            self.ha.check()
            if any(not report.entity_id for report in waiting.values()):
                entities = await client.ws("config/entity_registry/list")
                titles = entry_titles(
                    await client.request(
                        "GET", f"/api/config/config_entries/entry?domain={DOMAIN}"
                    )
                )
                for mac, report in waiting.items():
                    if (entity := connected_entity(entities, mac)) is not None:
                        report.entity_id = str(entity["entity_id"])
                        report.title = titles.get(
                            str(entity.get("config_entry_id")), report.title
                        )
            for mac, report in list(waiting.items()):
                if not report.entity_id or not devices[mac].connected:
                    continue
                state = await client.request(
                    "GET", f"/api/states/{report.entity_id}", ok=(200, 404)
                )
                if isinstance(state, dict) and state.get("state") == "on":
                    device = devices[mac]
                    report.transport = "MQTT + UDP" if device.uses_mqtt else "WebSocket"
                    say(
                        f"{report.title} is connected over {report.transport} "
                        f"({report.entity_id} is on)"
                    )
                    del waiting[mac]
            if waiting:
                await asyncio.sleep(1)

    async def _put_in_area(self) -> None:
        """Put the devices in the room's Home Assistant area.

        Devices in one area answer a wake word they all hear once. The area is
        the room's (Home Assistant's own "Living Room" from onboarding, or a
        new one); a device already in an area stays there, as a person put it.
        """
        try:
            moved, area = await self._assign_area()
        except DemoError as err:
            say(f"Could not put the devices in an area: {err}")
            return
        if moved:
            names = ", ".join(moved[:-1]) + " and " if len(moved) > 1 else ""
            say(f"Put {names}{moved[-1]} in the area {area}")

    async def _assign_area(self) -> tuple[list[str], str]:
        """Put devices in no area in the room's; return their names and its."""
        client = self.client
        registry = await client.ws("config/device_registry/list")
        areas = await client.ws("config/area_registry/list")
        names = {str(area["area_id"]): str(area.get("name", "")) for area in areas}
        moved = []
        area_id = find_area(areas, self.room.name)
        for report in self.reports:
            entry = device_entry(registry, report.mac)
            if entry is None:
                continue
            if entry.get("area_id"):
                report.area = names.get(str(entry["area_id"]), "")
                continue
            if area_id is None:
                area = await client.ws(
                    "config/area_registry/create", name=self.room.name
                )
                area_id = str(area["area_id"])
                names[area_id] = str(area.get("name", self.room.name))
                say(f"Created the area {names[area_id]}")
            await client.ws(
                "config/device_registry/update", device_id=entry["id"], area_id=area_id
            )
            report.area = names[area_id]
            moved.append(report.title or report.board)
        return moved, names.get(str(area_id), self.room.name)

    # ---------------------------------------------------------------- stop

    async def shutdown(self) -> None:
        """Stop the devices, then Home Assistant."""
        if self.devices:
            say("Stopping the devices")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DEVICE_STOP_TIMEOUT):
                    await asyncio.gather(
                        *(device.stop() for device in self.devices),
                        return_exceptions=True,
                    )
        await self.voice.media.close()
        with contextlib.suppress(aiohttp.ClientError, OSError):
            await self.client.ws_close()
        await self.session.close()
        if self.ha.running:
            say("Stopping Home Assistant")
            await self.ha.stop()
        if self.ha.started:
            say("Stopped")


def setup_device_logging(path: Path) -> None:
    """Send the simulated devices' log to a file instead of the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s [%(name)s] %(message)s")
    )
    logger = logging.getLogger("simulator")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False


def start_console(
    devices: Sequence[SimulatedDevice], voice: DemoVoice, room: Room
) -> asyncio.Task[None] | None:
    """Take commands from the terminal that make the devices act, if it is one."""
    if not sys.stdin.isatty():
        return None
    print('Type "help" for commands that make a device act.', flush=True)
    return asyncio.create_task(_console(devices, voice, room), name="console")


async def _console(
    devices: Sequence[SimulatedDevice], voice: DemoVoice, room: Room
) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    while line := await reader.readline():
        try:
            command = parse_command(line.decode(errors="replace"), len(devices))
            reply = await execute(command, devices, voice, room)
        except ValueError as err:
            reply = str(err)
        except DeviceError as err:
            reply = f"The device could not connect: {err}"
        except (DemoError, TimeoutError, aiohttp.ClientError) as err:
            reply = f"That did not work: {err or 'timed out'}"
        if reply:
            print(reply, flush=True)


async def run(args: argparse.Namespace, paths: DemoPaths) -> int:
    """Run the demo until it is stopped; return the exit code."""
    loop = asyncio.get_running_loop()
    demo = Demo(args, paths)
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            say("Stopping harder")
            demo.ha.kill()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    stopped = asyncio.create_task(stop.wait(), name="stop requested")
    ha_exited = asyncio.create_task(demo.ha.exited.wait(), name="ha exited")
    setup = asyncio.create_task(demo.start(), name="demo start")
    code = 0
    try:
        await asyncio.wait(
            {setup, stopped, ha_exited}, return_when=asyncio.FIRST_COMPLETED
        )
        if not setup.done():
            setup.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await setup
        if stopped.done():
            say("Stopping on request")
        elif ha_exited.done():
            demo.ha.check()
        else:
            setup.result()
            for line in summary_lines(
                base_url(args.port), paths, demo.reports, once=args.once
            ):
                print(line, flush=True)
            if not args.once:
                console = start_console(demo.devices, demo.voice, demo.room)
                try:
                    await asyncio.wait(
                        {stopped, ha_exited}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    if console is not None:
                        console.cancel()
                demo.ha.check()
    except TimeoutError:
        say(
            f"Gave up after {args.timeout:.0f} s. See {paths.log} and "
            f"{paths.devices_log}."
        )
        code = 1
    except (DemoError, aiohttp.ClientError) as err:
        say(f"Error: {err}")
        code = 1
    finally:
        for task in (stopped, ha_exited):
            task.cancel()
        await demo.shutdown()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo."""
    args = parse_args(argv)
    try:
        return asyncio.run(run(args, DemoPaths(ROOT)))
    except KeyboardInterrupt:  # before the signal handlers are in place
        return 0
