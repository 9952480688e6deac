"""What the demo writes to disk: paths, Home Assistant's configuration, its store."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
import json
import os
from pathlib import Path
import socket
from typing import Any

from . import (
    HOST,
    HTTP_STORE_KEY,
    HTTP_STORE_META_KEYS,
    HTTP_STORE_MINOR_VERSION,
    HTTP_STORE_SSL_PROFILES,
    HTTP_STORE_VERSION,
    DemoError,
)

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

# Speech engines of the demo (demo/voice_engines): espeak-ng speaks, and a
# stand-in recognizer answers the sentence typed on the demo's console.
xiaozhi_demo_voice:

logger:
  default: warning
  logs:
    custom_components.xiaozhi: info
    custom_components.xiaozhi_demo_voice: info
    homeassistant.components.http.config: info
"""

# Files the web interface edits; created empty when missing, never overwritten.
EDITABLE_FILES = {
    "automations.yaml": "[]\n",
    "scripts.yaml": "",
    "scenes.yaml": "[]\n",
}


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
    def replies(self) -> Path:
        """Return the folder of the replies devices played (WAV)."""
        return self.demo / "replies"

    @property
    def devices_log(self) -> Path:
        """Return the file the simulated devices log to."""
        return self.demo / "devices.log"


def http_store(
    port: int,
    created_at: str,
    version: tuple[int, int] = (HTTP_STORE_VERSION, HTTP_STORE_MINOR_VERSION),
) -> dict[str, Any]:
    """Return Home Assistant's HTTP settings store with 127.0.0.1:<port> as stable.

    The layout is what ``HTTPConfigStore`` reads (``version``, one of
    ``HTTP_STORE_SSL_PROFILES``; 2.2 by default): the settings
    under ``stable`` are complete and normalised the way its schema leaves
    them, nothing is ``pending`` and the YAML migration is done, so Home
    Assistant uses the settings as they are ("Using stable HTTP config")
    and schedules no revert.
    """
    return {
        "version": version[0],
        "minor_version": version[1],
        "key": HTTP_STORE_KEY,
        "data": {
            "stable": {
                "server_host": [HOST],
                "server_port": port,
                "cors_allowed_origins": ["https://cast.home-assistant.io"],
                "login_attempts_threshold": -1,
                "ip_ban_enabled": True,
                "ssl_profile": HTTP_STORE_SSL_PROFILES[version],
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


def check_http_store_version(installed: tuple[int, int]) -> None:
    """Refuse to write a store layout the installed Home Assistant does not read.

    ``.storage/http`` is Home Assistant's private file. If its version moved,
    writing the old layout would be migrated, misread or thrown away without a
    word: stop instead, and say what to update.
    """
    if installed not in HTTP_STORE_SSL_PROFILES:
        written = " or ".join(
            f"{major}.{minor}" for major, minor in HTTP_STORE_SSL_PROFILES
        )
        raise DemoError(
            "Home Assistant's HTTP settings store is version "
            f"{installed[0]}.{installed[1]}, the demo writes {written}: "
            "update http_store() in demo/files.py to what "
            "homeassistant/components/http/config.py now reads."
        )


def write_http_store(
    config_dir: Path,
    port: int,
    now: datetime,
    installed: tuple[int, int] | None = None,
) -> bool:
    """Make 127.0.0.1:<port> Home Assistant's stable HTTP settings.

    ``installed`` is the store version of the Home Assistant that will read it
    (read from the installed package when not given). Returns True if the
    store file was (re)written.
    """
    if installed is None:
        from homeassistant.components.http import config as http_config  # noqa: PLC0415

        installed = (http_config.STORAGE_VERSION, http_config.STORAGE_MINOR_VERSION)
    check_http_store_version(installed)
    path = config_dir / ".storage" / HTTP_STORE_KEY
    wanted = http_store(port, now.isoformat(), installed)
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except OSError, ValueError:
        current = None
    if http_store_is_current(current, wanted):
        return False
    write_private(path, json.dumps(wanted, indent=2) + "\n")
    return True


# Integrations Home Assistant finds in config/custom_components: name -> source.
CUSTOM_COMPONENTS = {
    "xiaozhi": Path("custom_components") / "xiaozhi",
    "xiaozhi_demo_voice": Path("demo") / "voice_engines",
}


def link_custom_components(config_dir: Path, root: Path) -> None:
    """Let Home Assistant find this repository's integration and the demo engines."""
    folder = config_dir / "custom_components"
    if folder.is_symlink():  # an earlier demo linked the whole folder
        folder.unlink()
    folder.mkdir(exist_ok=True)
    for name, source in CUSTOM_COMPONENTS.items():
        link = folder / name
        target = Path(os.path.relpath(root / source, folder))
        if link.is_symlink():
            if link.readlink() == target:
                continue
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


def tail(path: Path, lines: int = 20) -> str:
    """Return the last lines of a text file ('' if it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
