"""Settings of the whole integration (its server entry), and of one device.

Every device shares them: how devices reach Home Assistant (the transport and
the ports of the MQTT + UDP endpoint). They live in the options of the
"XiaoZhi server" config entry, which stands for Home Assistant as the
devices' server, so that no device's options pretend to hold them.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers.storage import Store
from yarl import URL

from .const import (
    CONF_AGENT_TOOLS,
    CONF_CALL_TIMEOUT,
    CONF_FALSE_WAKE_CHECK,
    CONF_KEEPALIVE,
    DEFAULT_AGENT_TOOLS,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_FALSE_WAKE_CHECK,
    DEFAULT_KEEPALIVE,
    DEFAULT_MQTT_PORT,
    DEFAULT_UDP_PORT,
    DOMAIN,
)

# The server entry's unique id; device entries use their MAC address.
SERVER_UNIQUE_ID: Final = "server"

CONF_TRANSPORT: Final = "transport"
CONF_MQTT_PORT: Final = "mqtt_port"
CONF_UDP_PORT: Final = "udp_port"
CONF_FIRMWARE_RELEASES_URL: Final = "firmware_releases_url"
CONF_FIRMWARE_PRERELEASES: Final = "firmware_prereleases"
CONF_WAKE_ARBITRATION: Final = "wake_arbitration"
# The firmware's own releases, as GitHub's REST API lists them.
DEFAULT_RELEASES_URL: Final = "https://api.github.com/repos/78/xiaozhi-esp32/releases"

# Ports an MQTT broker uses: 1883 (Mosquitto add-on), 8883 (TLS; on that port
# the firmware insists on a publicly trusted certificate).
RESERVED_PORTS: Final = frozenset({1883, 8883})

# Where version 0.1 kept these settings; moved into the server entry.
LEGACY_SETTINGS_KEY: Final = f"{DOMAIN}.endpoints"


class Transport(StrEnum):
    """What the OTA answer tells paired devices to use."""

    AUTO = "auto"  # MQTT + UDP when the endpoint is up, else WebSocket
    WEBSOCKET = "websocket"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """The integration-wide settings."""

    transport: Transport = Transport.AUTO
    mqtt_port: int = DEFAULT_MQTT_PORT
    udp_port: int = DEFAULT_UDP_PORT
    firmware_releases_url: str = DEFAULT_RELEASES_URL
    firmware_prereleases: bool = False
    # Boxes of one area that hear one wake word pick one to answer.
    wake_arbitration: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ServerSettings:
        """Read stored options, keeping defaults for what is missing or bad."""
        default = cls()
        try:
            transport = Transport(options.get(CONF_TRANSPORT, default.transport))
        except ValueError:
            transport = default.transport
        ports = {
            key: int(value)
            for key in (CONF_MQTT_PORT, CONF_UDP_PORT)
            if isinstance(value := options.get(key), int | float) and 0 <= value < 65536
        }
        url = options.get(CONF_FIRMWARE_RELEASES_URL)
        return replace(
            default,
            transport=transport,
            firmware_releases_url=url
            if isinstance(url, str) and is_http_url(url)
            else default.firmware_releases_url,
            firmware_prereleases=options.get(CONF_FIRMWARE_PRERELEASES) is True,
            wake_arbitration=options.get(CONF_WAKE_ARBITRATION) is not False,
            **ports,
        )

    def as_options(self) -> dict[str, Any]:
        """Return the settings as the server entry stores them."""
        return {
            CONF_TRANSPORT: self.transport.value,
            CONF_MQTT_PORT: self.mqtt_port,
            CONF_UDP_PORT: self.udp_port,
            CONF_FIRMWARE_RELEASES_URL: self.firmware_releases_url,
            CONF_FIRMWARE_PRERELEASES: self.firmware_prereleases,
            CONF_WAKE_ARBITRATION: self.wake_arbitration,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceOptions:
    """The options of one device (its entry's Configure)."""

    call_timeout: float = DEFAULT_CALL_TIMEOUT
    # The link is kept open between conversations (keep-alive).
    keepalive: bool = DEFAULT_KEEPALIVE
    # The device's tools are offered to the conversation agent.
    agent_tools: bool = DEFAULT_AGENT_TOOLS
    # A wake word is checked by speech-to-text before the turn starts.
    false_wake_check: bool = DEFAULT_FALSE_WAKE_CHECK

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> DeviceOptions:
        """Read an entry's options, keeping defaults for what is missing."""
        return cls(
            call_timeout=float(options.get(CONF_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT)),
            keepalive=bool(options.get(CONF_KEEPALIVE, DEFAULT_KEEPALIVE)),
            agent_tools=bool(options.get(CONF_AGENT_TOOLS, DEFAULT_AGENT_TOOLS)),
            false_wake_check=bool(
                options.get(CONF_FALSE_WAKE_CHECK, DEFAULT_FALSE_WAKE_CHECK)
            ),
        )


def is_http_url(url: str) -> bool:
    """Return True for an absolute http(s) URL."""
    parsed = URL(url)
    return parsed.absolute and parsed.scheme in ("http", "https") and bool(parsed.host)


def server_settings_of(hass: HomeAssistant) -> ServerSettings:
    """Return the settings of the server entry (defaults without one)."""
    entry = hass.config_entries.async_entry_for_domain_unique_id(
        DOMAIN, SERVER_UNIQUE_ID
    )
    return ServerSettings.from_options(entry.options if entry else {})


def is_server_entry(entry: ConfigEntry) -> bool:
    """Return True for the entry that holds the integration-wide settings."""
    return entry.unique_id == SERVER_UNIQUE_ID


def legacy_settings_store(hass: HomeAssistant) -> Store[dict[str, Any]]:
    """Return where the settings were kept before the server entry held them."""
    return Store(hass, 1, LEGACY_SETTINGS_KEY)
