"""Run Home Assistant with the XiaoZhi integration and two simulated devices.

``scripts/demo`` prepares the virtual environment and runs this file, which

1. writes a Home Assistant configuration under ``.demo/config`` (the HTTP
   server listens on 127.0.0.1 and ``--port``),
2. starts Home Assistant (its output goes to ``.demo/home-assistant.log``),
3. onboards the owner ``demo`` (password ``demo``) on the first run and keeps
   a long-lived access token in ``.demo/token``,
4. starts two simulated XiaoZhi devices that know only the OTA address,
   enters the code each unpaired one shows, and waits until both are
   connected,
5. keeps running until Ctrl-C (or stops right away with ``--once``).
"""

import argparse
import asyncio
from collections.abc import Iterable, Mapping, Sequence
import contextlib
import ctypes
from dataclasses import dataclass
from datetime import UTC, datetime
import json
import logging
import os
from pathlib import Path
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator import (  # noqa: E402 - importable once the repository is on the path
    DeviceConfig,
    SimulatedDevice,
    bool_tool,
    many_tools,
    no_arg_tool,
    rgb_light_tool,
)
from simulator.cli import client_id_for  # noqa: E402

DOMAIN = "xiaozhi"
HOST = "127.0.0.1"
DEFAULT_PORT = 8123
DEFAULT_TIMEOUT = 300.0
USERNAME = "demo"
PASSWORD = "demo"  # noqa: S105 - the demo owner's documented password
OWNER_NAME = "Demo"
LANGUAGE = "en"
TOKEN_NAME = "XiaoZhi demo"  # noqa: S105 - a label, not a secret
TOKEN_LIFESPAN_DAYS = 3650
ONBOARDING_STEPS = ("user", "core_config", "analytics", "integration")
# `python -m homeassistant` exits with this code when a restart is requested.
RESTART_EXIT_CODE = 100
STOP_TIMEOUT = 60.0
DEVICE_STOP_TIMEOUT = 10.0

# Home Assistant's HTTP settings store (homeassistant/components/http/config.py).
HTTP_STORE_KEY = "http"
HTTP_STORE_VERSION = 2
HTTP_STORE_MINOR_VERSION = 2
HTTP_STORE_META_KEYS = ("created_at", "error", "error_message")

CONFIGURATION_YAML = """\
# Home Assistant configuration of the XiaoZhi demo.
# scripts/demo writes this file on every start: changes here are overwritten.
# The HTTP server (127.0.0.1 and the --port of scripts/demo) is set in
# .storage/http, where Home Assistant keeps it, not here.

# The web interface and the APIs it uses.
frontend:
config:
api:

# History and logbook of the devices' entities.
recorder:
history:
logbook:

# Automations, scripts and scenes made in the web interface.
automation: !include automations.yaml
script: !include scripts.yaml
scene: !include scenes.yaml

logger:
  default: warning
  logs:
    custom_components.xiaozhi: info
    homeassistant.components.http.config: info
"""

# Files the web interface edits; created empty when missing, never overwritten.
EDITABLE_FILES = {
    "automations.yaml": "[]\n",
    "scripts.yaml": "",
    "scenes.yaml": "[]\n",
}


class DemoError(Exception):
    """Something the demo cannot recover from; the message says what."""


# --------------------------------------------------------------------- setup


@dataclass(frozen=True, slots=True)
class DemoPaths:
    """Where the demo keeps its files."""

    root: Path

    @property
    def demo(self) -> Path:
        """Return the demo's own directory (git-ignored)."""
        return self.root / ".demo"

    @property
    def config(self) -> Path:
        """Return Home Assistant's configuration directory."""
        return self.demo / "config"

    @property
    def token(self) -> Path:
        """Return the file holding the long-lived access token."""
        return self.demo / "token"

    @property
    def log(self) -> Path:
        """Return the file Home Assistant's output goes to."""
        return self.demo / "home-assistant.log"

    @property
    def devices_log(self) -> Path:
        """Return the file the simulated devices log to."""
        return self.demo / "devices.log"


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


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the demo."""
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description=(
            "Run Home Assistant with the XiaoZhi integration on 127.0.0.1 and pair "
            "two simulated XiaoZhi devices with it. Log in as demo / demo."
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
        help="stop as soon as both devices are connected (a non-interactive check)",
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


def base_url(port: int) -> str:
    """Return the address of Home Assistant."""
    return f"http://{HOST}:{port}"


def ota_url(port: int) -> str:
    """Return the OTA address the devices are given."""
    return f"{base_url(port)}/api/xiaozhi/v1/ota/"


def http_store(port: int, created_at: str) -> dict[str, Any]:
    """Return Home Assistant's HTTP settings store with 127.0.0.1:<port> as stable.

    The layout is what ``HTTPConfigStore`` reads (version 2.2): the settings
    under ``stable`` are complete and normalised the way its schema leaves
    them, nothing is ``pending`` and the YAML migration is done, so Home
    Assistant uses the settings as they are ("Using stable HTTP config")
    and schedules no revert.
    """
    return {
        "version": HTTP_STORE_VERSION,
        "minor_version": HTTP_STORE_MINOR_VERSION,
        "key": HTTP_STORE_KEY,
        "data": {
            "stable": {
                "server_host": [HOST],
                "server_port": port,
                "cors_allowed_origins": ["https://cast.home-assistant.io"],
                "login_attempts_threshold": -1,
                "ip_ban_enabled": True,
                "ssl_profile": "modern",
                "use_x_frame_options": True,
                "created_at": created_at,
                "error": None,
                "error_message": None,
            },
            "pending": None,
            "yaml_migration_done": True,
        },
    }


def _without_meta(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k not in HTTP_STORE_META_KEYS}


def http_store_is_current(current: Any, wanted: Mapping[str, Any]) -> bool:
    """Return True if the stored HTTP settings are already the wanted ones."""
    if not isinstance(current, dict):
        return False
    if any(current.get(key) != wanted[key] for key in ("version", "minor_version")):
        return False
    data = current.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("stable"), dict):
        return False
    return (
        data.get("pending") is None
        and data.get("yaml_migration_done") is True
        and _without_meta(data["stable"]) == _without_meta(wanted["data"]["stable"])
    )


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
    tmp.replace(path)


def write_http_store(config_dir: Path, port: int, now: datetime) -> bool:
    """Make 127.0.0.1:<port> Home Assistant's stable HTTP settings.

    Returns True if the store file was (re)written.
    """
    path = config_dir / ".storage" / HTTP_STORE_KEY
    wanted = http_store(port, now.isoformat())
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except OSError, ValueError:
        current = None
    if http_store_is_current(current, wanted):
        return False
    write_private(path, json.dumps(wanted, indent=2) + "\n")
    return True


def link_custom_components(config_dir: Path, root: Path) -> None:
    """Let Home Assistant find the integration of this repository."""
    link = config_dir / "custom_components"
    target = Path(os.path.relpath(root / "custom_components", config_dir))
    if link.is_symlink():
        if link.readlink() == target:
            return
        link.unlink()
    elif link.exists():
        raise DemoError(f"{link} exists and is not a link to {target}")
    link.symlink_to(target, target_is_directory=True)


def prepare_config_dir(paths: DemoPaths, port: int, now: datetime) -> None:
    """Write the configuration Home Assistant starts with."""
    config = paths.config
    config.mkdir(parents=True, exist_ok=True)
    (config / "configuration.yaml").write_text(CONFIGURATION_YAML, encoding="utf-8")
    for name, content in EDITABLE_FILES.items():
        if not (config / name).exists():
            (config / name).write_text(content, encoding="utf-8")
    link_custom_components(config, paths.root)
    write_http_store(config, port, now)


def port_in_use(port: int) -> bool:
    """Return True if something already listens on 127.0.0.1:<port>."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def device_configs(port: int) -> list[DeviceConfig]:
    """Return the two demo devices; both know only the OTA address."""
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
        DeviceConfig(
            mac=plain_mac,
            client_id=client_id_for(plain_mac),
            board="bread-compact-wifi",
            screen=True,
            camera=False,
            battery=False,
            **timing,
        ),
        DeviceConfig(
            mac=rich_mac,
            client_id=client_id_for(rich_mac),
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


# ------------------------------------------------------------ what HA answers


def onboarding_done_steps(status: Any) -> set[str]:
    """Return the finished steps of an ``/api/onboarding`` answer.

    Once onboarding is complete Home Assistant no longer serves that address
    (404, an error object or text rather than a list): every step is done.
    """
    if not isinstance(status, list):
        if isinstance(status, dict | str) or status is None:
            return set(ONBOARDING_STEPS)
        raise DemoError(f"Unexpected onboarding status: {status!r}")
    return {
        item["step"]
        for item in status
        if isinstance(item, dict) and item.get("done") and "step" in item
    }


def find_pairing_flow(flows: Iterable[Mapping[str, Any]], mac: str) -> str | None:
    """Return the id of the pairing flow of the device with this MAC, if any."""
    mac = mac.lower()
    for flow in flows:
        context = flow.get("context") or {}
        if (
            flow.get("handler") == DOMAIN
            and str(context.get("unique_id", "")).lower() == mac
            and flow.get("step_id", "pair") == "pair"
        ):
            return str(flow["flow_id"])
    return None


def connected_entity(
    entities: Iterable[Mapping[str, Any]], mac: str
) -> Mapping[str, Any] | None:
    """Return the registry entry of a device's "connected" binary sensor."""
    unique_id = f"{mac.lower()}-connected"
    for entity in entities:
        if (
            entity.get("platform") == DOMAIN
            and entity.get("unique_id") == unique_id
            and str(entity.get("entity_id", "")).startswith("binary_sensor.")
        ):
            return entity
    return None


def entry_titles(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Return entry id -> title of config entries."""
    return {
        str(entry["entry_id"]): str(entry.get("title", ""))
        for entry in entries
        if "entry_id" in entry
    }


@dataclass(slots=True)
class DeviceReport:
    """What the summary says about a device."""

    mac: str
    board: str
    title: str = ""
    entity_id: str = ""
    paired_now: bool = False


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
        for device in devices
    )
    lines.append("")
    lines.append("Stopping (--once)." if once else "Press Ctrl-C to stop.")
    return lines


def tail(path: Path, lines: int = 20) -> str:
    """Return the last lines of a text file ('' if it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ----------------------------------------------------------- Home Assistant


def _die_with_parent() -> None:
    """Have the kernel stop Home Assistant if the demo itself dies."""
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class HomeAssistantProcess:
    """Home Assistant as a child process, restarted when it asks to be."""

    def __init__(self, paths: DemoPaths) -> None:
        """Prepare; nothing runs before start()."""
        self._paths = paths
        self._proc: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._stopping = False
        self.exited = asyncio.Event()
        self.exit_code: int | None = None
        self.started = False

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "homeassistant",
            "--config",
            str(self._paths.config),
            "--skip-pip",
            "--log-no-color",
        ]

    async def _spawn(self) -> None:
        with self._paths.log.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                *self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._paths.root,
                # Ctrl-C reaches only the demo, which stops the devices first.
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def start(self) -> None:
        """Start Home Assistant; its output goes to the log file."""
        log = self._paths.log
        if log.exists():
            log.replace(log.with_name(log.name + ".1"))
        await self._spawn()
        self.started = True
        self._watcher = asyncio.create_task(self._watch(), name="home assistant")

    async def _watch(self) -> None:
        while self._proc is not None:
            code = await self._proc.wait()
            if self._stopping:
                return
            if code == RESTART_EXIT_CODE:
                say("Home Assistant asked for a restart; starting it again.")
                try:
                    await self._spawn()
                except OSError as err:
                    say(f"Could not start Home Assistant again: {err}")
                    code = 1
                else:
                    continue
            self.exit_code = code
            self.exited.set()
            return

    @property
    def running(self) -> bool:
        """Return True while the process runs."""
        return self._proc is not None and self._proc.returncode is None

    def kill(self) -> None:
        """Kill the process at once."""
        if self.running and self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop gracefully (SIGTERM); kill it if it takes longer than timeout."""
        self._stopping = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            say(f"Home Assistant did not stop within {timeout:.0f} s; killing it.")
            self.kill()
            await proc.wait()

    def check(self) -> None:
        """Raise DemoError if Home Assistant has stopped by itself."""
        if self.exited.is_set():
            raise DemoError(
                f"Home Assistant stopped (exit code {self.exit_code}). "
                f"The end of {self._paths.log}:\n{tail(self._paths.log)}"
            )


class HomeAssistantClient:
    """The REST and WebSocket APIs of the Home Assistant the demo runs."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        """Talk to 127.0.0.1:<port>."""
        self._session = session
        self.url = base_url(port)
        self.client_id = f"{self.url}/"
        self.redirect_uri = f"{self.url}/?auth_callback=1"
        self.token: str | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ws_id = 0
        self._ws_lock = asyncio.Lock()

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        ok: Sequence[int] = (200,),
    ) -> Any:
        """Send a request and return the JSON answer; DemoError otherwise."""
        headers = {}
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        async with self._session.request(
            method,
            self.url + path,
            headers=headers,
            json=json_body,
            data=form,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as response:
            text = await response.text()
            if response.status not in ok:
                raise DemoError(
                    f"{method} {path} answered {response.status}: {text[:300]}"
                )
            try:
                return json.loads(text) if text else None
            except ValueError:
                return text

    async def status(self, path: str, token: str) -> int:
        """Return the status code of an authenticated GET."""
        async with self._session.get(
            self.url + path,
            headers={"Authorization": f"Bearer {token}"},
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            await response.read()
            return response.status

    # ------------------------------------------------------------ auth

    async def exchange_code(self, code: str) -> dict[str, Any]:
        """Exchange an authorization code for access and refresh tokens."""
        tokens = await self.request(
            "POST",
            "/auth/token",
            form={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": self.client_id,
            },
        )
        if not isinstance(tokens, dict) or "access_token" not in tokens:
            raise DemoError(f"No access token in {tokens!r}")
        return tokens

    async def login(self, username: str, password: str) -> dict[str, Any]:
        """Log in through the login flow the web interface uses."""
        flow = await self.request(
            "POST",
            "/auth/login_flow",
            json_body={
                "client_id": self.client_id,
                "handler": ["homeassistant", None],
                "redirect_uri": self.redirect_uri,
            },
        )
        result = await self.request(
            "POST",
            f"/auth/login_flow/{flow['flow_id']}",
            json_body={
                "client_id": self.client_id,
                "username": username,
                "password": password,
            },
        )
        if result.get("type") != "create_entry":
            raise DemoError(
                f"Could not log in as {username} / {password} (errors: "
                f"{result.get('errors')}). Start over with scripts/demo --reset."
            )
        return await self.exchange_code(result["result"])

    async def revoke(self, refresh_token: str) -> None:
        """Revoke a refresh token (and its access tokens)."""
        await self.request("POST", "/auth/revoke", form={"token": refresh_token})

    # ------------------------------------------------------------ WebSocket

    async def ws_connect(self, token: str) -> None:
        """Open the WebSocket API and authenticate."""
        await self.ws_close()
        ws = await self._session.ws_connect(
            self.url.replace("http", "ws", 1) + "/api/websocket",
            max_msg_size=0,
        )
        hello = await ws.receive_json()
        if hello.get("type") != "auth_required":
            raise DemoError(f"Unexpected WebSocket greeting: {hello!r}")
        await ws.send_json({"type": "auth", "access_token": token})
        answer = await ws.receive_json()
        if answer.get("type") != "auth_ok":
            await ws.close()
            raise DemoError(f"WebSocket authentication failed: {answer!r}")
        self._ws = ws

    async def ws_close(self) -> None:
        """Close the WebSocket API connection, if open."""
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    async def ws(self, command: str, **data: Any) -> Any:
        """Send a WebSocket command and return its result."""
        if self._ws is None:
            raise DemoError("The WebSocket API is not connected")
        async with self._ws_lock:
            self._ws_id += 1
            msg_id = self._ws_id
            await self._ws.send_json({"id": msg_id, "type": command, **data})
            while True:
                message = await self._ws.receive()
                if message.type is not aiohttp.WSMsgType.TEXT:
                    raise DemoError(f"WebSocket API closed during {command}")
                answer = json.loads(message.data)
                if answer.get("id") == msg_id and answer.get("type") == "result":
                    break
        if not answer.get("success"):
            raise DemoError(f"{command} failed: {answer.get('error')}")
        return answer.get("result")


# ------------------------------------------------------------------- the demo


_START = time.monotonic()


def say(message: str) -> None:
    """Print a progress line with the seconds since the demo started."""
    print(f"[{time.monotonic() - _START:6.1f}s] {message}", flush=True)


class Demo:
    """Home Assistant, its owner and token, and the simulated devices."""

    def __init__(self, args: argparse.Namespace, paths: DemoPaths) -> None:
        """Prepare from the command line."""
        self.args = args
        self.paths = paths
        self.port: int = args.port
        self.timeout: float = args.timeout
        self.ha = HomeAssistantProcess(paths)
        self.session = aiohttp.ClientSession()
        self.client = HomeAssistantClient(self.session, self.port)
        self.devices: list[SimulatedDevice] = []
        self.reports: list[DeviceReport] = []

    # ---------------------------------------------------------------- start

    async def start(self) -> None:
        """Do everything up to "both devices are connected"."""
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
        await self._wait_http()
        say("Home Assistant answers; logging in")
        client.token = await self._owner_token()
        await client.ws_connect(client.token)
        config = await self._wait_running()
        say("Home Assistant is running")
        await self._update_core_config(config)
        if DOMAIN not in config.get("components", []):
            await self._open_device_endpoints()
        await self._start_devices()

    async def _wait_http(self) -> None:
        """Wait until the web server answers (it starts with the frontend)."""
        # Needs no login: asking the API without a token would show up as a
        # failed login attempt in Home Assistant's notifications.
        url = base_url(self.port) + "/manifest.json"
        async with asyncio.timeout(self.timeout):
            while True:
                self.ha.check()
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with self.session.get(
                        url, timeout=aiohttp.ClientTimeout(total=5)
                    ) as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.5)

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

    async def _open_device_endpoints(self) -> None:
        """Open "Add integration > XiaoZhi" once, as a person would.

        Without a paired device Home Assistant does not set up the
        integration, so nothing answers at the OTA address yet. The first step
        of the XiaoZhi flow (the one that shows the OTA address) opens the
        device endpoints; the demo then closes that flow, and devices that
        check in start their own pairing flows.
        """
        flow = await self.client.request(
            "POST", "/api/config/config_entries/flow", json_body={"handler": DOMAIN}
        )
        await self.client.request(
            "DELETE", f"/api/config/config_entries/flow/{flow['flow_id']}"
        )
        say("Opened the XiaoZhi device endpoints (Add integration > XiaoZhi)")

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
        configs = device_configs(self.port)
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
                    say(f"{report.title} is connected ({report.entity_id} is on)")
                    del waiting[mac]
            if waiting:
                await asyncio.sleep(1)

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
                await asyncio.wait(
                    {stopped, ha_exited}, return_when=asyncio.FIRST_COMPLETED
                )
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


if __name__ == "__main__":
    sys.exit(main())
