"""The runtime of one paired device: its link, and what rides on it.

A transport authenticates a device and opens a session here with
:meth:`XiaozhiRuntime.async_open_session`. The runtime is the session's
handler: it records what the session learns into the entry data
(``entry_data.py``), which entities read, fires device events on the bus,
and hands each session's voice channel and everything the device says to
the collaborators it owns: the conversation (``voice/``), the media player
(``media/``) and the firmware installer (``firmware/``). Each of them takes
what it uses, not the runtime. Commands go the other way through
:attr:`XiaozhiRuntime.commands` and the session's channel.
"""

from collections.abc import Awaitable, Callable
import logging
from typing import Any, Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr
from homeassistant.util import dt as dt_util

from .commands import DeviceCommands
from .const import (
    CONF_BOARD,
    CONF_FIRMWARE,
    CONF_MAC,
    DOMAIN,
    EVENT_XIAOZHI,
    HELLO_TIMEOUT,
    KEEPALIVE_INTERVAL,
    LOGGER,
    REQUEST_TIMEOUT,
)
from .entry_data import LinkInfo, XiaozhiEntryData
from .firmware.installer import FirmwareInstaller
from .limits import async_capped_tools
from .media.player import MediaPlayback
from .protocol import (
    CloseReason,
    DeviceEvent,
    DeviceEventType,
    DeviceSession,
    DeviceStatus,
    Link,
    Tool,
)
from .protocol.audio.preroll import Heard
from .protocol.ota_image import AppImage
from .settings import DeviceOptions
from .speaker.channel import DeviceUrls, VoiceChannel
from .voice.arbiter import WakeArbiter
from .voice.conversation import Conversation

type XiaozhiConfigEntry = ConfigEntry[XiaozhiRuntime]

# A client that hangs up this soon after Home Assistant's goodbye (py-xiaozhi
# over MQTT) ended its conversation as planned.
GOODBYE_HANG_UP: Final = 5.0


class XiaozhiRuntime:
    """Owns one device's link for its config entry."""

    def __init__(
        self, hass: HomeAssistant, entry: XiaozhiConfigEntry, arbiter: WakeArbiter
    ) -> None:
        """Start disconnected, with what the entry remembers."""
        self.hass = hass
        self.entry = entry
        self.name = entry.title
        self.entry_data = data = XiaozhiEntryData(
            hass,
            entry.entry_id,
            mac=entry.data[CONF_MAC],
            board=entry.data.get(CONF_BOARD),
            firmware=entry.data.get(CONF_FIRMWARE),
        )
        self.options = DeviceOptions.from_options(entry.options)
        self.session: DeviceSession | None = None
        # The live session's voice, and the URLs its device uses.
        self.channel: VoiceChannel | None = None
        self.commands = DeviceCommands(
            self.name,
            data,
            session=lambda: self.session,
            urls=lambda: self.channel.urls if self.channel else None,
        )
        self.player = MediaPlayback(
            hass, self.name, data, voice_busy=lambda: self.conversation.busy
        )
        self.conversation = Conversation(
            hass,
            entry,
            data,
            player=self.player,
            arbiter=arbiter,
            options=self.options,
            fire=self.async_fire_event,
        )
        self.installer = FirmwareInstaller(
            hass, self.name, firmware=lambda: data.firmware, link=self._link_kind
        )
        self._pending_link: LinkInfo | None = None
        self._goodbye_at = -GOODBYE_HANG_UP
        self._shutting_down = False

    async def async_setup(self) -> None:
        """Restore what is stored and register the device."""
        data = self.entry_data
        await data.async_load()
        device = dr.async_get(self.hass).async_get_or_create(
            config_entry_id=self.entry.entry_id,
            connections={(dr.CONNECTION_NETWORK_MAC, data.mac)},
            identifiers={(DOMAIN, data.mac)},
            name=self.name,
            manufacturer="XiaoZhi",
            model=data.board,
            sw_version=data.firmware,
        )
        data.device_id = device.id

    async def async_shutdown(self) -> None:
        """Close the link and write what is known (unload, stop)."""
        self.installer.shutdown()
        self.conversation.shutdown()
        await self.async_disconnect(CloseReason.SERVER_CLOSED)
        await self.entry_data.async_save()

    # --- what entities ask ----------------------------------------------

    @property
    def connected(self) -> bool:
        """Return True when a session finished its handshake."""
        return self.session is not None and self.session.ready

    @property
    def available(self) -> bool:
        """Return True when entities should show their state.

        A device away as planned (its conversation ended, or a WebSocket
        device hung up after one) keeps its entities' last state. With
        keep-alive, a device that dropped otherwise (an MQTT link lost, a
        WebSocket that never came back after a restart of Home Assistant) is
        unavailable; without keep-alive the device connects only when it is
        used and entities keep their state too.
        """
        return (
            self.connected
            or self.entry_data.expected_disconnect
            or not self.options.keepalive
        )

    @callback
    def async_checked_in(self, firmware: str | None) -> None:
        """Take the firmware version the device reported (its OTA check)."""
        if firmware and firmware != self.entry_data.firmware:
            self.entry_data.async_set_identity(None, firmware)
            self._update_device()
            self.entry_data.async_write_state()
        self.installer.checked_in(firmware)

    @callback
    def _update_device(self) -> None:
        data = self.entry_data
        if data.device_id is not None:
            dr.async_get(self.hass).async_update_device(
                data.device_id, model=data.board, sw_version=data.firmware
            )

    def _link_kind(self) -> bool | None:
        """Return whether the link is always on (MQTT); None when not connected."""
        session = self.session
        if session is None or session.closed:
            return None
        return session.link.always_on

    async def async_install_firmware(
        self, prepare: Callable[[], Awaitable[AppImage]]
    ) -> None:
        """Install the image ``prepare`` returns (the entity's and the action's).

        Connected, the device fetches it at once; away, a newer version waits
        for its next boot.
        """
        urls = self.channel.urls if self.channel and self.connected else None
        await self.installer.async_install(
            prepare,
            mint=urls.mint_firmware_url if urls is not None else None,
            call_tool=self.commands.async_call_tool,
        )

    # --- connection -----------------------------------------------------

    @callback
    def async_open_session(
        self,
        link: Link,
        urls: DeviceUrls,
        *,
        client_id: str | None,
        protocol_version: int,
    ) -> DeviceSession:
        """Start a session on a new authenticated link; it replaces the old one."""
        options = self.options
        session = DeviceSession(
            link,
            self,
            vision_url=urls.vision_url,
            request_timeout=REQUEST_TIMEOUT,
            call_timeout=options.call_timeout,
            hello_timeout=HELLO_TIMEOUT,
            keepalive_interval=KEEPALIVE_INTERVAL if options.keepalive else None,
        )
        previous, self.session = self.session, session
        self.channel = VoiceChannel(
            session,
            self.entry_data,
            self.async_fire_event,
            self.name,
            urls=urls,
            on_ended=self._conversation_over,
        )
        self.conversation.session_opened(self.channel)
        self._pending_link = LinkInfo(
            transport=link.transport,
            remote=link.remote,
            client_id=client_id,
            protocol_version=protocol_version,
            connected_since=dt_util.utcnow(),
        )
        session.start()
        if previous is not None:
            LOGGER.info("%s connected again; closing its previous link", self.name)
            # Its pending calls fail at once; the old connection may take a
            # while to close, which must not hold up the new conversation.
            self.entry.async_create_background_task(
                self.hass,
                previous.close(CloseReason.REPLACED, "replaced by a new connection"),
                f"xiaozhi close replaced link of {self.entry_data.mac}",
            )
        return session

    async def async_disconnect(self, reason: CloseReason) -> None:
        """Close the device's link (unload, removal, shutdown)."""
        self._shutting_down = True
        if (session := self.session) is not None:
            await session.close(reason, "closed by Home Assistant")

    async def async_token_changed(self) -> None:
        """End the link made with the old token; restart the device if possible.

        The firmware fetches its token from the OTA endpoint at start-up, so a
        restart makes it pick up the new one at once.
        """
        await self.async_restart("its token changed")
        if (session := self.session) is not None:
            await session.close(CloseReason.SERVER_CLOSED, "token changed")

    async def async_restart(self, why: str) -> None:
        """Restart the device, if it can be, so that it fetches the OTA answer.

        The firmware reads its token and where to connect from the OTA answer
        at start-up.
        """
        if not self.connected or not self.commands.can_reboot:
            return
        LOGGER.info("Restarting %s: %s", self.name, why)
        try:
            await self.commands.async_reboot()
        except HomeAssistantError as err:
            LOGGER.warning("Could not restart %s: %s", self.name, err)

    @callback
    def async_apply_options(self) -> None:
        """Use new options on the live link."""
        options = self.options = DeviceOptions.from_options(self.entry.options)
        self.conversation.options = options
        if (session := self.session) is not None:
            session.call_timeout = options.call_timeout
            session.set_keepalive(KEEPALIVE_INTERVAL if options.keepalive else None)
        self.entry_data.async_write_state()

    # --- session callbacks (SessionHandler) ------------------------------

    @callback
    def session_ready(self, session: DeviceSession) -> None:
        """Take the device's identity, tools and status from the handshake."""
        if session is not self.session:
            return
        data = self.entry_data
        info = session.server_info
        board, version = info.get("name"), info.get("version")
        data.async_set_identity(
            board if isinstance(board, str) and board else None,
            version if isinstance(version, str) and version else None,
        )
        self._update_device()
        self._take_tools(session.tools)
        if session.status is not None:
            data.async_set_status(DeviceStatus.from_json(session.status))
        first = data.connects == 0
        level = logging.INFO if first or self.options.keepalive else logging.DEBUG
        LOGGER.log(
            level,
            "%s connected (%d tools, firmware %s)",
            self.name,
            len(data.tools),
            data.firmware,
        )
        data.async_set_link(self._pending_link)
        self.installer.checked_in(data.firmware)

    @callback
    def session_tools(self, session: DeviceSession) -> None:
        """Take a fresh tool list."""
        if session is self.session:
            self._take_tools(session.tools)

    @callback
    def _take_tools(self, tools: dict[str, Tool]) -> None:
        self.entry_data.async_set_tools(
            async_capped_tools(self.hass, self.entry.entry_id, self.name, tools)
        )

    @callback
    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Take a fresh status."""
        if session is self.session:
            self.entry_data.async_set_status(DeviceStatus.from_json(status))

    @callback
    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Record a device event, fire it, and hand it to the conversation."""
        if session is not self.session or self.conversation.takes_typed(event):
            return  # a question typed on a text client is no device event
        data = self.entry_data
        match event.type:
            case DeviceEventType.LISTENING_STARTED:
                mode = event.data.get("mode")
                if isinstance(mode, str):
                    data.async_set_listen_mode(mode)
            case DeviceEventType.CONVERSATION_ENDED:
                data.async_set_listen_mode(None)
        self.async_fire_event(event)
        self.conversation.on_event(event)

    @callback
    def async_fire_event(self, event: DeviceEvent) -> None:
        """Fire a device event on the bus and to the entities."""
        self.hass.bus.async_fire(
            EVENT_XIAOZHI,
            {**event.data, "device_id": self.entry_data.device_id, "type": event.type},
        )
        self.entry_data.async_signal_event(event)

    @callback
    def session_audio(
        self, session: DeviceSession, payload: bytes, heard: Heard | None
    ) -> None:
        """Pass microphone audio to the conversation."""
        if session is self.session:
            self.conversation.on_audio(payload, heard)

    @callback
    def _conversation_over(self) -> None:
        """Home Assistant ended a conversation on a link that stays up."""
        self._goodbye_at = self.hass.loop.time()
        self.conversation.conversation_over()

    @callback
    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Forget the session; log why it ended."""
        if session is not self.session:
            return
        self.session = None
        self.channel = None
        # A WebSocket device connects for a conversation and hangs up (or is
        # hung up on) after it: away as planned, whoever closed. So is a
        # client that hangs up on Home Assistant's goodbye (py-xiaozhi over
        # MQTT). Home Assistant cannot tell that from a device that lost
        # power, and cannot reach either until it connects again.
        hung_up = self.hass.loop.time() - self._goodbye_at < GOODBYE_HANG_UP
        expected = reason is CloseReason.CONVERSATION_ENDED or (
            reason is CloseReason.DEVICE_CLOSED
            and (not session.link.always_on or hung_up)
        )
        if self._shutting_down or expected or not self.options.keepalive:
            LOGGER.debug("%s disconnected (%s)", self.name, reason)
        else:
            LOGGER.info(
                "%s disconnected (%s); its entities are unavailable until it "
                "connects again",
                self.name,
                reason,
            )
        # Availability first: the satellite writes its state as it stops.
        self.entry_data.async_set_link(None, expected=expected)
        self.installer.link_lost()
        self.conversation.session_closed()
