"""The runtime of one paired device: its link, and what the link reports.

A transport authenticates a device and opens a session here with
:meth:`XiaozhiRuntime.async_open_session`. The runtime is the session's
handler: it records what the session learns into the entry data
(``entry_data.py``), which entities read, fires device events on the bus, and
passes the device's voice on (``voice/router.py``). Commands go the other
way through :attr:`XiaozhiRuntime.commands` and the session's
:class:`VoiceChannel`.
"""

from collections.abc import Awaitable, Callable, Coroutine
from itertools import islice
import logging
from typing import Any, Final, Protocol

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import device_registry as dr
from homeassistant.util import dt as dt_util

from .commands import DeviceCommands
from .const import (
    CONF_AGENT_TOOLS,
    CONF_BOARD,
    CONF_CALL_TIMEOUT,
    CONF_FALSE_WAKE_CHECK,
    CONF_FIRMWARE,
    CONF_KEEPALIVE,
    CONF_MAC,
    DEFAULT_AGENT_TOOLS,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_FALSE_WAKE_CHECK,
    DEFAULT_KEEPALIVE,
    DOMAIN,
    EVENT_XIAOZHI,
    HELLO_TIMEOUT,
    KEEPALIVE_INTERVAL,
    LOGGER,
    REQUEST_TIMEOUT,
)
from .entry_data import LinkInfo, XiaozhiEntryData
from .errors import not_connected
from .firmware.installer import FirmwareInstaller
from .limits import (
    ISSUE_TOO_MANY_TOOLS,
    MAX_DEVICE_TOOLS,
    async_clear_cut,
    async_report_cut,
)
from .media.notify import NotifyStream
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
from .protocol.audio.preroll import BURST_GAP, PREROLL_PACKETS
from .protocol.ota_image import AppImage
from .settings import server_settings_of
from .speaker.channel import VoiceChannel
from .texts import async_device_text
from .voice.router import VoiceRouter
from .voice.typed import is_typed_question

type XiaozhiConfigEntry = ConfigEntry[XiaozhiRuntime]

# A detect within this many seconds of a pre-roll (a burst of microphone
# packets) is a wake word, whatever its text.
PREROLL_WINDOW: Final = 3.0
ABORT_WAKE_WORD: Final = "wake_word_detected"


class UploadUrls(Protocol):
    """Where a device uploads and fetches; the transport that serves it mints them."""

    @property
    def vision_url(self) -> str:
        """Return the URL the camera posts photos to."""

    def mint_snapshot_url(self) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time screen picture URL and the callback revoking it."""

    def mint_sound_url(self, sound: NotifyStream) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL streaming a sound and the callback revoking it."""

    def mint_firmware_url(
        self, image: bytes, progress: Callable[[int], None], broke: Callable[[], None]
    ) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of a firmware image, reporting bytes sent."""


class XiaozhiRuntime:
    """Owns one device's link for its config entry."""

    def __init__(self, hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
        """Start disconnected, with what the entry remembers."""
        self.hass = hass
        self.entry = entry
        self.entry_data = XiaozhiEntryData(
            hass,
            entry.entry_id,
            mac=entry.data[CONF_MAC],
            board=entry.data.get(CONF_BOARD),
            firmware=entry.data.get(CONF_FIRMWARE),
        )
        self.session: DeviceSession | None = None
        self.uploads: UploadUrls | None = None
        self.commands = DeviceCommands(self)
        self.voice_router = VoiceRouter(
            entry.title,
            lambda key: async_device_text(hass, key),
            self.run_in_background,
        )
        self.player = MediaPlayback(hass, self)
        self.installer = FirmwareInstaller(
            hass,
            entry.title,
            firmware=lambda: self.entry_data.firmware,
            link=self._link_kind,
        )
        self._channel: VoiceChannel | None = None
        self._pending_link: LinkInfo | None = None
        # Microphone packets back to back so far, and when a burst as long as
        # a wake word's pre-roll came last (live audio is one per frame).
        self._burst = 0
        self._mic_heard_at = -PREROLL_WINDOW
        self._preroll_at = -PREROLL_WINDOW
        self._shutting_down = False

    async def async_setup(self) -> None:
        """Restore what is stored and register the device."""
        await self.entry_data.async_load()
        device = dr.async_get(self.hass).async_get_or_create(
            config_entry_id=self.entry.entry_id,
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            identifiers={(DOMAIN, self.mac)},
            name=self.name,
            manufacturer="XiaoZhi",
            model=self.entry_data.board,
            sw_version=self.entry_data.firmware,
        )
        self.entry_data.device_id = device.id

    async def async_shutdown(self) -> None:
        """Close the link and write what is known (unload, stop)."""
        self.installer.shutdown()
        await self.async_disconnect(CloseReason.SERVER_CLOSED)
        await self.entry_data.async_save()

    def run_in_background(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` for as long as the device's entry is loaded."""
        self.entry.async_create_background_task(
            self.hass, coro, f"{name} of {self.mac}"
        )

    # --- what entities ask ----------------------------------------------

    @property
    def mac(self) -> str:
        """Return the device's MAC address (its identity in Home Assistant)."""
        return self.entry_data.mac

    @property
    def name(self) -> str:
        """Return the entry's title."""
        return self.entry.title

    @property
    def device_id(self) -> str | None:
        """Return the device's id in Home Assistant's device registry."""
        return self.entry_data.device_id

    @property
    def firmware(self) -> str | None:
        """Return the firmware version the device reported last."""
        return self.entry_data.firmware

    @property
    def plays_notify(self) -> bool | None:
        """Return whether its firmware plays notify sounds (None: not known)."""
        return self.entry_data.plays_notify

    @callback
    def async_learn_notify(self, *, plays: bool) -> None:
        """Remember whether its firmware plays notify sounds."""
        self.entry_data.async_learn_notify(plays)

    @callback
    def async_checked_in(self, firmware: str | None) -> None:
        """Take the firmware version the device reported (its OTA check)."""
        if firmware and firmware != self.entry_data.firmware:
            self.entry_data.async_set_identity(None, firmware)
            self._update_device()
            self.entry_data.async_write_state()
        self.installer.checked_in(firmware)

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
        uploads = self.uploads if self.connected else None
        await self.installer.async_install(
            prepare,
            mint=uploads.mint_firmware_url if uploads is not None else None,
            call_tool=self.commands.async_call_tool,
        )

    @callback
    def _update_device(self) -> None:
        data = self.entry_data
        if data.device_id is not None:
            dr.async_get(self.hass).async_update_device(
                data.device_id, model=data.board, sw_version=data.firmware
            )

    @property
    def listen_mode(self) -> str | None:
        """Return how the device listens (manual: push-to-talk)."""
        return self.entry_data.listen_mode

    @property
    def voice_busy(self) -> bool:
        """Return True while a reply or announcement is spoken on the device."""
        return self.voice_router.busy

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
            self.connected or self.entry_data.expected_disconnect or not self.keepalive
        )

    @property
    def call_timeout(self) -> float:
        """Return the tool call timeout chosen in the options."""
        return float(self.entry.options.get(CONF_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT))

    @property
    def offers_agent_tools(self) -> bool:
        """Return True when the device's tools are offered to the agent."""
        return bool(self.entry.options.get(CONF_AGENT_TOOLS, DEFAULT_AGENT_TOOLS))

    @property
    def checks_false_wakes(self) -> bool:
        """Return True when a wake word is checked by speech-to-text first."""
        return bool(
            self.entry.options.get(CONF_FALSE_WAKE_CHECK, DEFAULT_FALSE_WAKE_CHECK)
        )

    @property
    def wake_group(self) -> str | None:
        """Return the area whose boxes compete with this one for a wake word.

        None when arbitration is off, the device has no area, or no other
        XiaoZhi device is in it: then nobody decides, and it answers at once.
        """
        if not server_settings_of(self.hass).wake_arbitration:
            return None
        registry = dr.async_get(self.hass)
        device_id = self.entry_data.device_id
        device = registry.async_get(device_id) if device_id else None
        if device is None or device.area_id is None:
            return None
        for other in dr.async_entries_for_area(registry, device.area_id):
            if (
                other.id != device.id
                and other.disabled_by is None
                and any(domain == DOMAIN for domain, _ in other.identifiers)
            ):
                return device.area_id
        return None

    @property
    def keepalive(self) -> bool:
        """Return True when the link is kept open between conversations."""
        return bool(self.entry.options.get(CONF_KEEPALIVE, DEFAULT_KEEPALIVE))

    @property
    def voice(self) -> VoiceChannel:
        """Return the voice of the live session.

        Raises DeviceUnavailableError when the device is not connected.
        """
        channel, session = self._channel, self.session
        if channel is None or session is None or session.closed:
            raise not_connected(self.name)
        return channel

    @property
    def ready_session(self) -> DeviceSession:
        """Return the session once its handshake is done.

        Raises DeviceUnavailableError when the device is not connected.
        """
        session = self.session
        if session is None or not session.ready:
            raise not_connected(self.name)
        return session

    # --- connection -----------------------------------------------------

    @callback
    def async_open_session(
        self,
        link: Link,
        uploads: UploadUrls,
        *,
        client_id: str | None,
        protocol_version: int,
    ) -> DeviceSession:
        """Start a session on a new authenticated link; it replaces the old one."""
        session = DeviceSession(
            link,
            self,
            vision_url=uploads.vision_url,
            request_timeout=REQUEST_TIMEOUT,
            call_timeout=self.call_timeout,
            hello_timeout=HELLO_TIMEOUT,
            keepalive_interval=KEEPALIVE_INTERVAL if self.keepalive else None,
        )
        previous, self.session = self.session, session
        self._channel = VoiceChannel(
            session,
            self.entry_data,
            self.async_fire_event,
            self.name,
            on_ended=self._conversation_over,
        )
        self.uploads = uploads
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
            self.run_in_background(
                previous.close(CloseReason.REPLACED, "replaced by a new connection"),
                "xiaozhi close replaced link",
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
        if (session := self.session) is not None:
            session.call_timeout = self.call_timeout
            session.set_keepalive(KEEPALIVE_INTERVAL if self.keepalive else None)
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
        level = logging.INFO if first or self.keepalive else logging.DEBUG
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
        """Keep the device's first tools, as many as a device may bring."""
        entry_id = self.entry.entry_id
        if len(tools) > MAX_DEVICE_TOOLS:
            async_report_cut(
                self.hass,
                entry_id,
                self.name,
                ISSUE_TOO_MANY_TOOLS,
                {"count": str(len(tools)), "limit": str(MAX_DEVICE_TOOLS)},
            )
            tools = dict(islice(tools.items(), MAX_DEVICE_TOOLS))
        else:
            async_clear_cut(self.hass, entry_id, ISSUE_TOO_MANY_TOOLS)
        self.entry_data.async_set_tools(tools)

    @callback
    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Take a fresh status."""
        if session is self.session:
            self.entry_data.async_set_status(DeviceStatus.from_json(status))

    @callback
    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Record a device event, fire it, and pass its voice on."""
        if session is not self.session or self._channel is None:
            return
        if (
            event.type is DeviceEventType.WAKE_WORD
            and is_typed_question(
                text := str(event.data.get("text") or ""), self.entry_data.wake_word
            )
            # A wake word comes after the audio from before it (the pre-roll);
            # a text client sends none (py-xiaozhi streams live audio first).
            and not self._heard_preroll
        ):
            # Not a wake word: a question typed on a text client.
            LOGGER.debug("%s: typed question %r", self.name, text)
            self.voice_router.typed(text, self._channel)
            return
        if event.type is DeviceEventType.WAKE_WORD or (
            event.type is DeviceEventType.ABORTED
            and event.data.get("reason") == ABORT_WAKE_WORD
        ):
            # The user woke the device: media gives way to the conversation.
            self.player.device_took_over()
        elif event.type is DeviceEventType.ABORTED:
            # Its button: the user wants quiet.
            self.player.async_silence()
        elif event.type is DeviceEventType.CONVERSATION_ENDED:
            self.player.conversation_over()
        self._record(event)
        self.async_fire_event(event)
        self.voice_router.event(event, self._channel)

    @property
    def _heard_preroll(self) -> bool:
        """Return True when a wake word's pre-roll came just now."""
        return self.hass.loop.time() - self._preroll_at <= PREROLL_WINDOW

    @callback
    def _record(self, event: DeviceEvent) -> None:
        """Keep what a voice event says about the device."""
        data = self.entry_data
        match event.type:
            case DeviceEventType.WAKE_WORD:
                # Only the firmware's wake word engine sends its pre-roll: a
                # text client's greeting ("hi") is not the device's wake word.
                if (text := str(event.data.get("text") or "")) and self._heard_preroll:
                    data.async_set_wake_word(text)
            case DeviceEventType.LISTENING_STARTED:
                mode = event.data.get("mode")
                if isinstance(mode, str):
                    data.async_set_listen_mode(mode)
            case DeviceEventType.CONVERSATION_ENDED:
                data.async_set_listen_mode(None)

    @callback
    def async_fire_event(self, event: DeviceEvent) -> None:
        """Fire a device event on the bus and to the entities."""
        self.hass.bus.async_fire(
            EVENT_XIAOZHI,
            {**event.data, "device_id": self.entry_data.device_id, "type": event.type},
        )
        self.entry_data.async_signal_event(event)

    @callback
    def session_audio(self, session: DeviceSession, payload: bytes) -> None:
        """Pass microphone audio to the voice assistant."""
        if session is self.session:
            now = self.hass.loop.time()
            back_to_back = now - self._mic_heard_at < BURST_GAP
            self._burst = self._burst + 1 if back_to_back else 1
            self._mic_heard_at = now
            if self._burst >= PREROLL_PACKETS:
                self._preroll_at = now
            self.voice_router.audio(payload)

    @callback
    def _conversation_over(self) -> None:
        """Home Assistant ended a conversation on a link that stays up."""
        self.player.conversation_over()
        self.voice_router.closed()

    @callback
    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Forget the session; log why it ended."""
        if session is not self.session:
            return
        self.session = None
        self._channel = None
        self.uploads = None
        # A WebSocket device connects for a conversation and hangs up (or is
        # hung up on) after it: away as planned, whoever closed. Home
        # Assistant cannot tell that from a device that lost power, and cannot
        # reach either until it connects again.
        expected = reason is CloseReason.CONVERSATION_ENDED or (
            reason is CloseReason.DEVICE_CLOSED and not session.link.always_on
        )
        if self._shutting_down or expected or not self.keepalive:
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
        self.player.device_took_over(gone=True)
        self.voice_router.closed()

    # --- what the device's voice and uploads report -----------------------

    @callback
    def async_signal_timer_finished(self, name: str, seconds: int) -> None:
        """Fire the event of a timer set on this device that finished."""
        self.async_fire_event(
            DeviceEvent(
                type=DeviceEventType.TIMER_FINISHED,
                data={"name": name, "seconds": seconds},
            )
        )

    @callback
    def async_store_picture(
        self, kind: str, content: bytes, content_type: str, question: str = ""
    ) -> None:
        """Keep a picture the device uploaded (``photo`` or ``screen``)."""
        self.entry_data.async_set_picture(kind, content, content_type, question)
