"""The devices' MQTT + UDP endpoint: its settings, sockets, logins and links.

Over MQTT a device stays connected between conversations, so Home Assistant
reaches it at any time (tools, alerts, announcements); each conversation
opens a UDP audio channel. The firmware never subscribes, so no standard
broker can serve it: Home Assistant runs its own small endpoint
(``protocol/mqtt_server.py``, ``protocol/udp.py``) on two ports of its own,
and the OTA answer tells paired devices to use it.

A login is the device's credentials as everywhere (identity.py): the
password is its token, the user name its MAC, the client id its Client-Id.
Wrong ones count towards Home Assistant's IP ban like a failed login on the
web server.
"""

import asyncio
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from ipaddress import ip_address
import logging
from types import MappingProxyType
from typing import Any, Final, Protocol

from homeassistant.components.http.ban import KEY_BAN_MANAGER, process_wrong_login
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir
from homeassistant.helpers.storage import Store

from .const import (
    CONF_CLIENT_ID,
    CONF_MAC,
    CONF_TOKEN,
    DEFAULT_MQTT_PORT,
    DEFAULT_UDP_PORT,
    DOMAIN,
    LOGGER,
    MAX_MQTT_PACKET,
    MQTT_KEEPALIVE,
)
from .helpers import device_base_url
from .identity import Credentials, Refusal, async_bind, authenticate
from .manager import UploadUrls, XiaozhiConfigEntry
from .pairing import normalize_client_id, normalize_mac
from .protocol import DeviceSession
from .protocol.messages import DeviceHello
from .protocol.mqtt import Connect, ConnectReturn
from .protocol.mqtt_server import MqttConnection, MqttServer
from .protocol.udp import AudioChannel, UdpEndpoint

STORE_KEY: Final = f"{DOMAIN}.endpoints"
STORE_VERSION: Final = 1
# Ports an MQTT broker uses: 1883 (Mosquitto add-on), 8883 (TLS; on that port
# the firmware insists on a publicly trusted certificate).
RESERVED_PORTS: Final = frozenset({1883, 8883})
MAX_LOGIN_REPORTS: Final = 8  # failed logins reported at once (reverse DNS)


class Transport(StrEnum):
    """What the OTA answer tells paired devices to use."""

    AUTO = "auto"  # MQTT + UDP when the endpoint is up, else WebSocket
    WEBSOCKET = "websocket"


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSettings:
    """The integration-wide transport settings (all devices)."""

    transport: Transport = Transport.AUTO
    mqtt_port: int = DEFAULT_MQTT_PORT
    udp_port: int = DEFAULT_UDP_PORT

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndpointSettings:
        """Read stored settings, keeping defaults for what is missing or bad."""
        default = cls()
        try:
            transport = Transport(data.get("transport", default.transport))
        except ValueError:
            transport = default.transport
        ports = {
            key: value
            for key in ("mqtt_port", "udp_port")
            if isinstance(value := data.get(key), int) and 0 <= value < 65536
        }
        return replace(default, transport=transport, **ports)


class UploadsFactory(Protocol):
    """Mints the upload URLs of a device reached on ``base``."""

    def __call__(self, base: str, mac: str) -> UploadUrls:
        """Return the device's upload URLs."""


def topics(mac: str) -> tuple[str, str]:
    """Return the device's publish topic and the one Home Assistant uses."""
    name = mac.replace(":", "")
    return f"xiaozhi/{name}/up", f"xiaozhi/{name}/down"


class DeviceEndpoints:
    """The MQTT and UDP endpoints, started and stopped with their settings."""

    def __init__(self, hass: HomeAssistant, uploads: UploadsFactory) -> None:
        """Prepare; nothing listens before :meth:`async_start`."""
        self.hass = hass
        self._uploads = uploads
        self._store: Store[dict[str, Any]] = Store(hass, STORE_VERSION, STORE_KEY)
        self.settings = EndpointSettings()
        self.mqtt: MqttServer | None = None
        self.udp: UdpEndpoint | None = None
        self._reports = 0

    # --- life cycle ------------------------------------------------------

    @property
    def active(self) -> bool:
        """Return True when devices are told to use MQTT + UDP."""
        return self.mqtt is not None and self.udp is not None

    async def async_start(self) -> None:
        """Load the settings and open the endpoints they ask for."""
        stored = await self._store.async_load()
        if stored is not None:
            self.settings = EndpointSettings.from_dict(stored)
        await self._async_open(self.settings)

    async def async_stop(self) -> None:
        """Close both endpoints (Home Assistant stops)."""
        if self.mqtt is not None:
            await self.mqtt.stop()
            self.mqtt = None
        if self.udp is not None:
            self.udp.stop()
            self.udp = None

    async def _async_open(self, settings: EndpointSettings) -> dict[str, str]:
        """Open the endpoints; return the ports that failed, with the error."""
        errors: dict[str, str] = {}
        if settings.transport is Transport.AUTO:
            mqtt = MqttServer(self, max_packet=MAX_MQTT_PACKET)
            udp = UdpEndpoint()
            # IPv4: the firmware resolves and connects over IPv4 only.
            try:
                await mqtt.start("0.0.0.0", settings.mqtt_port)  # noqa: S104
            except OSError as err:
                errors["mqtt_port"] = err.strerror or str(err)
            try:
                await udp.start("0.0.0.0", settings.udp_port)  # noqa: S104
            except OSError as err:
                errors["udp_port"] = err.strerror or str(err)
            if errors:  # audio needs both: devices stay on WebSocket
                await mqtt.stop()
                udp.stop()
            else:
                self.mqtt, self.udp = mqtt, udp
                LOGGER.debug(
                    "Device endpoints: MQTT on TCP %s, audio on UDP %s",
                    mqtt.port,
                    udp.port,
                )
        self._async_update_issues(settings, errors)
        return errors

    @callback
    def _async_update_issues(
        self, settings: EndpointSettings, errors: dict[str, str]
    ) -> None:
        for key, protocol, port in (
            ("mqtt_port", "MQTT (TCP)", settings.mqtt_port),
            ("udp_port", "UDP", settings.udp_port),
        ):
            issue = f"port_unavailable_{key}"
            if key not in errors:
                ir.async_delete_issue(self.hass, DOMAIN, issue)
                continue
            LOGGER.error(
                "Cannot open the device %s port %s (%s); devices use WebSocket",
                protocol,
                port,
                errors[key],
            )
            ir.async_create_issue(
                self.hass,
                DOMAIN,
                issue,
                is_fixable=False,
                severity=ir.IssueSeverity.ERROR,
                translation_key="port_unavailable",
                translation_placeholders={
                    "protocol": protocol,
                    "port": str(port),
                    "error": errors[key],
                },
            )

    async def async_apply(self, settings: EndpointSettings) -> dict[str, str]:
        """Use new settings; on failure keep the old ones and return why.

        Devices connected over MQTT are restarted first: they learn where to
        connect only from the OTA answer at start-up.
        """
        if settings == self.settings and (
            self.active or settings.transport is Transport.WEBSOCKET
        ):
            return {}
        old = self.settings
        await self._async_restart_mqtt_devices()
        await self.async_stop()
        errors = await self._async_open(settings)
        if errors:
            await self._async_open(old)
            return errors
        self.settings = settings
        await self._store.async_save(asdict(settings))
        return {}

    async def _async_restart_mqtt_devices(self) -> None:
        entries: list[XiaozhiConfigEntry] = (
            self.hass.config_entries.async_loaded_entries(DOMAIN)
        )
        restarts = [
            entry.runtime_data.async_restart("the device transport settings changed")
            for entry in entries
            if (session := entry.runtime_data.session) is not None
            and isinstance(session.link, MqttLink)
        ]
        if restarts:
            await asyncio.gather(*restarts)

    # --- what the OTA answer says -----------------------------------------

    def ota_block(
        self, host: str | None, entry: XiaozhiConfigEntry, client_id: str
    ) -> dict[str, Any] | None:
        """Return the ``mqtt`` block for a paired device, or None for WebSocket.

        ``host`` is how the device reaches Home Assistant. The firmware splits
        the endpoint at its first colon, so an IPv6 literal cannot be used.
        """
        mqtt, udp = self.mqtt, self.udp
        if mqtt is None or udp is None or not host or ":" in host:
            return None
        up, down = topics(entry.data[CONF_MAC])
        return {
            "endpoint": f"{host}:{mqtt.port}",
            "client_id": entry.data.get(CONF_CLIENT_ID) or client_id,
            "username": entry.data[CONF_MAC],
            "password": entry.data[CONF_TOKEN],
            "keepalive": MQTT_KEEPALIVE,
            "publish_topic": up,
            # Not read by current firmware, which never subscribes; firmware
            # 0.8 - 1.0 subscribed to it and failed without it.
            "subscribe_topic": down,
        }

    # --- logins (MqttAuthenticator) ---------------------------------------

    def allowed(self, peer: str) -> bool:
        """Refuse an address Home Assistant's IP ban holds, before it speaks."""
        manager = self.hass.http.app.get(KEY_BAN_MANAGER) if self.hass.http else None
        if manager is None or not manager.ip_bans_lookup:
            return True
        try:
            return ip_address(peer) not in manager.ip_bans_lookup
        except ValueError:
            return True

    def authenticate(
        self, connection: MqttConnection, connect: Connect
    ) -> MqttLink | ConnectReturn:
        """Check a device's login; open its session on success."""
        password = connect.password or b""
        client_id = normalize_client_id(connect.client_id)
        try:
            token = password.decode()
        except UnicodeDecodeError:
            return ConnectReturn.BAD_CREDENTIALS
        entry = authenticate(
            self.hass,
            Credentials(
                token=token, mac=normalize_mac(connect.username), client_id=client_id
            ),
        )
        if isinstance(entry, Refusal):
            return _CONNACK[entry]
        async_bind(self.hass, entry, client_id)
        manager = entry.runtime_data
        up, down = topics(manager.mac)
        link = MqttLink(self, connection, up, down, identity=entry.entry_id)
        base = device_base_url(
            self.hass, f"http://{connection.local}:{self.hass.http.server_port}"
        )
        link.session = manager.async_open_session(
            link,
            self._uploads(base, manager.mac),
            client_id=client_id,
            protocol_version=3,
        )
        LOGGER.debug("%s connected over MQTT from %s", manager.name, connection.peer)
        return link

    def refused(self, peer: str, connect: Connect, code: ConnectReturn) -> None:
        """Count wrong credentials towards the IP ban, as the web server does."""
        LOGGER.debug("Refused MQTT login of %r from %s: %s", connect, peer, code.name)
        if code is not ConnectReturn.BAD_CREDENTIALS or not peer:
            return
        if self._reports >= MAX_LOGIN_REPORTS:
            return  # a flood: the ones in flight already count towards the ban
        self._reports += 1
        self.hass.async_create_background_task(
            self._async_report(peer), "xiaozhi failed MQTT login"
        )

    async def _async_report(self, peer: str) -> None:
        try:
            await process_wrong_login(_LoginAttempt(self.hass, peer))  # type: ignore[arg-type]
        finally:
            self._reports -= 1


_CONNACK: Final = MappingProxyType(
    {
        Refusal.BAD_TOKEN: ConnectReturn.BAD_CREDENTIALS,
        Refusal.WRONG_DEVICE: ConnectReturn.BAD_CREDENTIALS,
        Refusal.WRONG_CLIENT: ConnectReturn.BAD_CREDENTIALS,
        Refusal.DISABLED: ConnectReturn.NOT_AUTHORIZED,
        Refusal.NOT_LOADED: ConnectReturn.SERVER_UNAVAILABLE,
    }
)


class _LoginAttempt:
    """What Home Assistant's ban handling reads of a request, for an MQTT login."""

    def __init__(self, hass: HomeAssistant, peer: str) -> None:
        self.app = hass.http.app
        self.remote = peer
        self.headers = {"user-agent": "xiaozhi device (MQTT)"}
        self.rel_url = "MQTT CONNECT"


class MqttLink:
    """A device's MQTT connection and UDP audio channel, as its session's link."""

    transport = "mqtt"
    always_on = True

    def __init__(
        self,
        endpoints: DeviceEndpoints,
        connection: MqttConnection,
        topic_up: str,
        topic_down: str,
        *,
        identity: str,
    ) -> None:
        """Wrap a logged-in connection of the device ``identity`` (its entry)."""
        self._endpoints = endpoints
        self.identity = identity
        self._connection = connection
        self._topic_up = topic_up
        self._topic_down = topic_down
        self._channel: AudioChannel | None = None
        self._foreign_topics = 0
        self.session: DeviceSession | None = None

    @property
    def remote(self) -> str | None:
        """Return the device's address."""
        return self._connection.peer

    @property
    def channel(self) -> AudioChannel | None:
        """Return the open audio channel, if any."""
        return self._channel

    def open_audio(self, hello: DeviceHello) -> dict[str, Any]:
        """Open a UDP channel with a fresh key; return the hello's fields."""
        self.close_audio()
        udp = self._endpoints.udp
        if udp is None or udp.port is None:
            LOGGER.warning("The UDP audio endpoint is down: no audio channel")
            return {"transport": "udp"}
        frame_ms = hello.audio_params.get("frame_duration")
        self._channel = udp.open_channel(
            self._connection.peer,
            self._audio,
            float(frame_ms) if isinstance(frame_ms, int | float) else None,
        )
        return {
            "transport": "udp",
            "udp": self._channel.hello_fields(self._connection.local, udp.port),
        }

    def close_audio(self) -> None:
        """Close the audio channel."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    async def send_text(self, text: str) -> None:
        """Publish a message to the device's connection."""
        self._connection.publish(self._topic_down, text.encode())

    async def send_audio(self, payload: bytes, timestamp: int) -> None:
        """Send an Opus packet on the audio channel."""
        if self._channel is None:
            raise ConnectionError("no audio channel")
        self._channel.send(payload, timestamp)

    async def close(self, message: str) -> None:
        """Close the MQTT connection."""
        LOGGER.debug("Closing MQTT connection of %s: %s", self.remote, message)
        self._connection.close()

    # --- MqttClient -------------------------------------------------------

    def mqtt_message(self, topic: str, payload: bytes) -> None:
        """Take what the device published to its own topic."""
        session = self.session
        if session is None:
            return
        if topic != self._topic_up:
            self._foreign_topics += 1
            level = logging.WARNING if self._foreign_topics == 1 else logging.DEBUG
            LOGGER.log(
                level, "Ignoring a message from %s to topic %r", self.remote, topic
            )
            return
        session.feed_text(payload.decode("utf-8", "replace"))

    def mqtt_closed(self) -> None:
        """Close the audio channel and end the session."""
        self.close_audio()
        if (session := self.session) is not None:
            self._endpoints.hass.async_create_background_task(
                session.connection_lost(), "xiaozhi MQTT session ended"
            )

    def _audio(self, payload: bytes) -> None:
        if (session := self.session) is not None:
            session.feed_audio(payload)
