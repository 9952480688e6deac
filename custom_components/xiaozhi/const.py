"""Constants for the XiaoZhi integration."""

import logging
from typing import Final

from .protocol.http import MAX_BODY

DOMAIN: Final = "xiaozhi"
LOGGER = logging.getLogger(__package__)

# HTTP endpoints on Home Assistant's own server.
URL_BASE: Final = "/api/xiaozhi/v1"
URL_WEBSOCKET: Final = f"{URL_BASE}/"
URL_OTA: Final = f"{URL_BASE}/ota/"
URL_ACTIVATE: Final = f"{URL_BASE}/ota/activate"
URL_VISION: Final = f"{URL_BASE}/vision"
URL_SNAPSHOT: Final = f"{URL_BASE}/snapshot"
URL_CLIP: Final = f"{URL_BASE}/clip"
URL_FIRMWARE: Final = f"{URL_BASE}/firmware"

# Config entry data.
CONF_MAC: Final = "mac"
CONF_TOKEN: Final = "token"  # noqa: S105 - the key's name, not a secret
CONF_BOARD: Final = "board"
CONF_FIRMWARE: Final = "firmware"
# The random UUID the firmware generated and sends as Client-Id: the identity
# the device paired with (its MAC is visible to everyone on the LAN).
CONF_CLIENT_ID: Final = "client_id"

# Config entry options.
CONF_CALL_TIMEOUT: Final = "call_timeout"
CONF_KEEPALIVE: Final = "keepalive"
CONF_AGENT_TOOLS: Final = "agent_tools"
CONF_FALSE_WAKE_CHECK: Final = "false_wake_check"
DEFAULT_CALL_TIMEOUT: Final = 30.0
DEFAULT_KEEPALIVE: Final = True
DEFAULT_AGENT_TOOLS: Final = True
DEFAULT_FALSE_WAKE_CHECK: Final = False

# The devices' MQTT + UDP endpoint (integration-wide). Not 1883/8883: those
# are an MQTT broker's (the Mosquitto add-on), and on 8883 the firmware wants
# TLS with a publicly trusted certificate.
DEFAULT_MQTT_PORT: Final = 1885
DEFAULT_UDP_PORT: Final = 1886
MAX_MQTT_PACKET: Final = 256 * 1024

# Device conversation timings (seconds).
HELLO_TIMEOUT: Final = 10.0
REQUEST_TIMEOUT: Final = 10.0
KEEPALIVE_INTERVAL: Final = 50.0

# Pairing.
CODE_TTL: Final = 600.0
MAX_CODE_ATTEMPTS: Final = 5
# Devices waiting to be paired at once; the OTA endpoint needs no login. A real
# device is one address, so one address gets a few; all together get more.
MAX_PENDING_DEVICES: Final = 64
MAX_PENDING_PER_ADDRESS: Final = 4
WAIT_FOR_DEVICE_TIMEOUT: Final = 900.0

# Limits on what a device or a client may send.
MAX_OTA_BODY: Final = MAX_BODY
MAX_PHOTO_BYTES: Final = 2 * 1024 * 1024

# Fired on the bus for every device event.
EVENT_XIAOZHI: Final = "xiaozhi_event"
