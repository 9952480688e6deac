"""The configuration directory a smoke run starts Home Assistant with."""

from datetime import UTC, datetime
from pathlib import Path
import socket
from typing import Final

from .. import ROOT
from ..files import link_custom_components, write_http_store

# Only what the run uses beyond Home Assistant's defaults: the REST and
# WebSocket APIs (api), the config entry flows (config), and the demo's
# speech engines (a custom integration, linked in with the integration).
CONFIGURATION_YAML: Final = """\
# Home Assistant configuration of a scripts/smoke run (written for each run).
api:
config:
xiaozhi_demo_voice:

logger:
  default: warning
  logs:
    custom_components.xiaozhi: {level}
"""
CONFIGURED_DOMAINS: Final = ("api", "config", "logger")


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """Return a port on 127.0.0.1 nothing listens on now (TCP or UDP)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare_config_dir(
    config: Path, port: int, http_store: tuple[int, int], *, debug: bool = False
) -> None:
    """Write the configuration; ``http_store`` is the release's store version.

    The integration logs at info level, or debug with ``debug``.
    """
    config.mkdir(parents=True, exist_ok=True)
    (config / "configuration.yaml").write_text(
        CONFIGURATION_YAML.format(level="debug" if debug else "info"), encoding="utf-8"
    )
    link_custom_components(config, ROOT)
    write_http_store(config, port, datetime.now(UTC), installed=http_store)
