"""Run Home Assistant with the XiaoZhi integration and simulated devices.

``scripts/demo`` prepares the virtual environment and runs ``python -m demo``,
which

1. writes a Home Assistant configuration under ``.demo/config`` (the HTTP
   server listens on 127.0.0.1 and ``--port``),
2. starts Home Assistant (its output goes to ``.demo/home-assistant.log``),
3. onboards the owner ``demo`` (password ``demo``) on the first run and keeps
   a long-lived access token in ``.demo/token``,
4. makes the "XiaoZhi demo" voice pipeline (the engines in
   ``voice_engines``, Home Assistant's own agent) the preferred one,
5. starts simulated XiaoZhi devices that know only the OTA address, enters
   the code each unpaired one shows, waits until all are connected and puts
   them in one area ("Living room": they stand in one room, at distances
   from the person speaking, and a wake word they all hear gets one answer),
6. keeps running until Ctrl-C (or stops right away with ``--once``), taking
   commands on its console that make a device act (``help`` lists them).

Rooms: ``files`` (what is written to disk), ``process`` (Home Assistant as a
child process), ``client`` (Home Assistant's REST and WebSocket APIs),
``devices`` (the simulated devices and the console), ``voice`` (the pipeline
and conversations), ``voice_engines`` (a small integration loaded into the
demo's Home Assistant), ``main`` (the run). ``smoke`` reuses them to test
the integration on any Home Assistant release (``scripts/smoke``).
"""

from pathlib import Path
import sys
import time
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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
# The SSL profile the store's schema fills in, by the store versions the demo
# writes: 3.1 (Home Assistant 2026.11) names profiles after their guideline.
HTTP_STORE_SSL_PROFILES = {(2, 2): "modern", (3, 1): "intermediate_v6"}
HTTP_STORE_META_KEYS = ("created_at", "error", "error_message")


class DemoError(Exception):
    """Something the demo cannot recover from; the message says what."""


def base_url(port: int) -> str:
    """Return the address of Home Assistant."""
    return f"http://{HOST}:{port}"


def ota_url(port: int) -> str:
    """Return the OTA address the devices are given."""
    return f"{base_url(port)}/api/xiaozhi/v1/ota/"


_START = time.monotonic()


def say(message: str) -> None:
    """Print a progress line with the seconds since the demo started."""
    print(f"[{time.monotonic() - _START:6.1f}s] {message}", flush=True)
