"""The devices' MQTT + UDP endpoint: its sockets, logins and links.

Over MQTT a device stays connected between conversations, so Home Assistant
reaches it at any time (tools, alerts, announcements); each conversation
opens a UDP audio channel. The firmware never subscribes, so no standard
broker can serve it: Home Assistant runs its own small endpoint
(``protocol/mqtt/``) on two ports of its own, chosen in the server entry's
settings (``settings.py``), and the OTA answer tells paired devices to use
it.

A login is the device's credentials as everywhere (``pairing/identity.py``):
the password is its token, the user name its MAC, the client id its
Client-Id. Wrong ones count towards the address's failed logins
(``logins.py``), which also keeps a guesser out before it speaks.
"""

import asyncio
from dataclasses import dataclass
import errno
from types import MappingProxyType
from typing import Any, Final

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir

from ..const import (
    CONF_CLIENT_ID,
    CONF_MAC,
    CONF_TOKEN,
    DOMAIN,
    LOGGER,
    MAX_MQTT_PACKET,
)
from ..pairing.identity import (
    Credentials,
    Refusal,
    async_bind,
    authenticate,
    loaded_runtimes,
)
from ..protocol.http import normalize_client_id, normalize_mac
from ..protocol.mqtt.link import MqttLink
from ..protocol.mqtt.packets import Connect, ConnectReturn
from ..protocol.mqtt.server import MqttConnection, MqttServer
from ..protocol.mqtt.udp import UdpEndpoint
from ..protocol.ota import mqtt_block
from ..runtime import XiaozhiConfigEntry
from ..settings import ServerSettings, Transport
from ..texts import async_device_text
from .logins import FailedLogins
from .uploads import UploadViews
from .urls import device_base_url

# IPv4: the firmware resolves and connects over IPv4 only.
LISTEN_HOST: Final = "0.0.0.0"  # noqa: S104 - devices on the LAN dial in
ISSUE_PORT: Final = "port_unavailable"
# Why a port does not open, by errno name: the texts that say it.
PORT_FAILURES: Final = {
    "EADDRINUSE": "port_in_use",
    "EACCES": "port_not_permitted",
    "EPERM": "port_not_permitted",
    "EADDRNOTAVAIL": "port_no_address",
}


@dataclass(slots=True)
class _Opened:
    """Endpoints opened for new settings, not yet in service."""

    mqtt: MqttServer | None = None
    udp: UdpEndpoint | None = None


class DeviceEndpoints:
    """The MQTT and UDP endpoints, opened and closed with the settings."""

    def __init__(
        self, hass: HomeAssistant, uploads: UploadViews, logins: FailedLogins
    ) -> None:
        """Prepare; nothing listens before :meth:`async_apply`."""
        self.hass = hass
        self._uploads = uploads
        self._logins = logins
        self.settings = ServerSettings(transport=Transport.WEBSOCKET)
        self.mqtt: MqttServer | None = None
        self.udp: UdpEndpoint | None = None
        # Ports opened for settings not saved yet (a form's).
        self._bound: tuple[ServerSettings, _Opened] | None = None

    # --- life cycle ------------------------------------------------------

    @property
    def active(self) -> bool:
        """Return True when devices are told to use MQTT + UDP."""
        return self.mqtt is not None and self.udp is not None

    async def async_start(
        self, settings: ServerSettings, *, restart_devices: bool = False
    ) -> None:
        """Serve with the server entry's settings; a port that fails raises a repair.

        At start-up, and when its settings were saved. Devices keep dialling
        the ports they were given at their last start, so the repair's fix is
        to free the port (and retry) or to choose other ports and restart the
        devices.
        """
        errors = await self.async_apply(settings, restart_devices=restart_devices)
        for key, protocol in (("mqtt_port", "MQTT (TCP)"), ("udp_port", "UDP")):
            issue = f"{ISSUE_PORT}_{key}"
            if key not in errors:
                ir.async_delete_issue(self.hass, DOMAIN, issue)
                continue
            port = getattr(settings, key)
            LOGGER.error(
                "Cannot open the device %s port %s (%s); devices on MQTT + UDP "
                "cannot connect until it can",
                protocol,
                port,
                errors[key],
            )
            ir.async_create_issue(
                self.hass,
                DOMAIN,
                issue,
                is_fixable=True,
                severity=ir.IssueSeverity.ERROR,
                translation_key=ISSUE_PORT,
                translation_placeholders={
                    "protocol": protocol,
                    "port": str(port),
                    "error": errors[key],
                },
            )

    async def async_stop(self) -> None:
        """Close both endpoints (the server entry unloads)."""
        await self._release_bound()
        await self._close(self.mqtt, self.udp)
        self.mqtt = self.udp = None

    @staticmethod
    async def _close(mqtt: MqttServer | None, udp: UdpEndpoint | None) -> None:
        if mqtt is not None:
            await mqtt.stop()
        if udp is not None:
            udp.stop()

    async def async_bind(self, settings: ServerSettings) -> dict[str, str]:
        """Open the ports new settings need; return those that failed, and why.

        Nothing that serves is touched: the ports opened are kept for
        :meth:`async_apply`, and a port that cannot be opened leaves nothing
        open. (A settings form binds first and saves after; the server
        entry's update listener then applies.)
        """
        await self._release_bound()
        opened, errors = await self._async_open(settings)
        if not errors:
            self._bound = (settings, opened)
        return errors

    async def async_apply(
        self, settings: ServerSettings, *, restart_devices: bool = True
    ) -> dict[str, str]:
        """Serve with new settings; return the ports that failed, and why.

        The ports bound for them are used (else they are opened now). Devices
        connected over MQTT are then restarted, since they learn where to
        connect only from the OTA answer at start-up. Settings that apply
        leave no port to repair.
        """
        if self._bound is not None and self._bound[0] == settings:
            (_settings, opened), self._bound = self._bound, None
        else:
            await self._release_bound()
            opened, errors = await self._async_open(settings)
            if errors:
                return errors
        keep_mqtt, keep_udp = self._kept(settings)
        changed = (keep_mqtt, keep_udp) != (self.mqtt is not None, self.udp is not None)
        changed = changed or not (keep_mqtt and keep_udp)
        retired = _Opened(
            None if keep_mqtt else self.mqtt, None if keep_udp else self.udp
        )
        if changed and restart_devices:
            await self._async_restart_mqtt_devices()
        self.settings = settings
        self.mqtt = self.mqtt if keep_mqtt else opened.mqtt
        self.udp = self.udp if keep_udp else opened.udp
        await self._close(retired.mqtt, retired.udp)
        async_delete_port_issues(self.hass)
        if self.active:
            LOGGER.debug(
                "Device endpoints: MQTT on TCP %s, audio on UDP %s",
                self.mqtt.port if self.mqtt else None,
                self.udp.port if self.udp else None,
            )
        return {}

    async def _async_open(
        self, settings: ServerSettings
    ) -> tuple[_Opened, dict[str, str]]:
        """Open what ``settings`` need beyond what serves; nothing on a failure."""
        keep_mqtt, keep_udp = self._kept(settings)
        want_mqtt = settings.transport is Transport.AUTO
        opened, errors = _Opened(), {}
        if want_mqtt and not keep_mqtt:
            opened.mqtt = MqttServer(self, max_packet=MAX_MQTT_PACKET)
            try:
                await opened.mqtt.start(LISTEN_HOST, settings.mqtt_port)
            except OSError as err:
                errors["mqtt_port"] = await self._why(err)
        if want_mqtt and not keep_udp:
            opened.udp = UdpEndpoint()
            try:
                await opened.udp.start(LISTEN_HOST, settings.udp_port)
            except OSError as err:
                errors["udp_port"] = await self._why(err)
        if errors:
            await self._close(opened.mqtt, opened.udp)
            return _Opened(), errors
        return opened, {}

    def _kept(self, settings: ServerSettings) -> tuple[bool, bool]:
        """Return which endpoints that serve now serve ``settings`` too."""
        old, want_mqtt = self.settings, settings.transport is Transport.AUTO
        return (
            want_mqtt and self.mqtt is not None and settings.mqtt_port == old.mqtt_port,
            want_mqtt and self.udp is not None and settings.udp_port == old.udp_port,
        )

    async def _release_bound(self) -> None:
        if self._bound is not None:
            (_settings, opened), self._bound = self._bound, None
            await self._close(opened.mqtt, opened.udp)

    async def _why(self, err: OSError) -> str:
        """Return why a port did not open, in the user's language (no OS text)."""
        code = errno.errorcode.get(err.errno or 0, "unknown")
        LOGGER.debug("Opening a device port failed: %s", err)
        return await async_device_text(
            self.hass, PORT_FAILURES.get(code, "port_refused"), {"code": code}
        )

    async def _async_restart_mqtt_devices(self) -> None:
        restarts = [
            runtime.async_restart("the device transport settings changed")
            for runtime in loaded_runtimes(self.hass)
            if (session := runtime.session) is not None
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
        if mqtt is None or mqtt.port is None or udp is None or host is None:
            return None
        return mqtt_block(
            host,
            mqtt.port,
            mac=entry.data[CONF_MAC],
            client_id=entry.data.get(CONF_CLIENT_ID) or client_id,
            token=entry.data[CONF_TOKEN],
        )

    # --- logins (MqttAuthenticator) ---------------------------------------

    def allowed(self, peer: str) -> bool:
        """Refuse an address with too many wrong credentials, before it speaks."""
        return not self._logins.blocked(peer)

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
        self._logins.succeeded(connection.peer)
        runtime = entry.runtime_data
        link = MqttLink(
            connection,
            runtime.entry_data.mac,
            lambda: self.udp,
            identity=entry.entry_id,
            spawn=lambda lost: self.hass.async_create_background_task(
                lost, "xiaozhi MQTT session ended"
            ),
        )
        base = device_base_url(
            self.hass, f"http://{connection.local}:{self.hass.http.server_port}"
        )
        link.session = runtime.async_open_session(
            link,
            self._uploads.for_device(base, runtime.entry_data.mac),
            client_id=client_id,
            protocol_version=3,
        )
        LOGGER.debug("%s connected over MQTT from %s", runtime.name, connection.peer)
        return link

    @callback
    def refused(self, peer: str, connect: Connect, code: ConnectReturn) -> None:
        """Count wrong credentials towards the address's failed logins."""
        if code is ConnectReturn.BAD_CREDENTIALS:
            self._logins.failed(peer, "MQTT login")
        else:
            LOGGER.debug("Refused MQTT login from %s: %s", peer, code.name)


_CONNACK: Final = MappingProxyType(
    {
        Refusal.BAD_TOKEN: ConnectReturn.BAD_CREDENTIALS,
        Refusal.WRONG_DEVICE: ConnectReturn.BAD_CREDENTIALS,
        Refusal.WRONG_CLIENT: ConnectReturn.BAD_CREDENTIALS,
        Refusal.DISABLED: ConnectReturn.NOT_AUTHORIZED,
        Refusal.NOT_LOADED: ConnectReturn.SERVER_UNAVAILABLE,
    }
)


@callback
def async_delete_port_issues(hass: HomeAssistant) -> None:
    """Remove the repairs of ports that could not be opened."""
    for key in ("mqtt_port", "udp_port"):
        ir.async_delete_issue(hass, DOMAIN, f"{ISSUE_PORT}_{key}")
