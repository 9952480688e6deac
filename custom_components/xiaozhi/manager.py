"""The runtime of one paired device: its link, the session's callbacks, commands.

A transport (the WebSocket view) authenticates a device and opens a session
here with :meth:`XiaozhiManager.async_open_session`. What the session learns
flows into the entry data (``entry_data.py``), which entities read. Commands
from entities and actions come back through :meth:`XiaozhiManager.async_call_tool`.
"""

import asyncio
from collections.abc import Mapping
import logging
from typing import Any, Final, Protocol

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers import device_registry as dr
from homeassistant.util import dt as dt_util

from .const import (
    CONF_BOARD,
    CONF_CALL_TIMEOUT,
    CONF_FIRMWARE,
    CONF_KEEPALIVE,
    CONF_MAC,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DOMAIN,
    EVENT_XIAOZHI,
    HELLO_TIMEOUT,
    KEEPALIVE_INTERVAL,
    LOGGER,
    REQUEST_TIMEOUT,
)
from .entry_data import LinkInfo, XiaozhiEntryData
from .helpers import async_device_text, device_command
from .protocol import (
    ArgumentError,
    CloseReason,
    ConnectionClosedError,
    DeviceEvent,
    DeviceEventType,
    DeviceSession,
    DeviceStatus,
    Link,
    Setting,
    ToolResult,
    XiaozhiError,
    validate_arguments,
)
from .protocol.firmware import (
    PHOTO_TOOL,
    REBOOT_TOOL,
    SNAPSHOT_TOOL,
    STATUS_TOOL,
    plays_notify,
)
from .protocol.status import BRIGHTNESS, THEME, VOLUME

type XiaozhiConfigEntry = ConfigEntry[XiaozhiManager]

PHOTO_QUESTION: Final = "Photo requested from Home Assistant"
SNAPSHOT_QUALITY: Final = 80


class UploadUrls(Protocol):
    """Where a device uploads pictures; the transport that serves it mints them."""

    @property
    def vision_url(self) -> str:
        """Return the URL the camera posts photos to."""

    def mint_snapshot_url(self) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time screen picture URL and the callback revoking it."""

    def mint_clip_url(self, audio: bytes) -> tuple[str, asyncio.Event, CALLBACK_TYPE]:
        """Return a one-time URL of a sound, its fetched event and its revoker."""


class VoiceHandler(Protocol):
    """What serves a device's voice (the Assist satellite entity)."""

    def voice_event(self, event: DeviceEvent) -> None:
        """Take a wake word, listen start/stop or abort."""

    def voice_audio(self, payload: bytes) -> None:
        """Take one Opus packet from the microphone."""

    def voice_closed(self) -> None:
        """Learn that the device's audio is gone (link closed, or goodbye)."""


VOICE_EVENTS: Final = frozenset(
    {
        DeviceEventType.WAKE_WORD,
        DeviceEventType.LISTENING_STARTED,
        DeviceEventType.LISTENING_STOPPED,
        DeviceEventType.ABORTED,
    }
)


class XiaozhiManager:
    """Owns one device's link and commands for its config entry."""

    def __init__(self, hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
        """Start disconnected, with what the entry remembers."""
        self.hass = hass
        self.entry = entry
        self.data = XiaozhiEntryData(
            hass,
            entry.entry_id,
            mac=entry.data[CONF_MAC],
            board=entry.data.get(CONF_BOARD),
            firmware=entry.data.get(CONF_FIRMWARE),
        )
        self.session: DeviceSession | None = None
        self._uploads: UploadUrls | None = None
        self._pending_link: LinkInfo | None = None
        self._shutting_down = False
        self._voice: VoiceHandler | None = None
        self.listen_mode: str | None = None

    async def async_setup(self) -> None:
        """Restore what is stored and register the device."""
        await self.data.async_load()
        device = dr.async_get(self.hass).async_get_or_create(
            config_entry_id=self.entry.entry_id,
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            identifiers={(DOMAIN, self.mac)},
            name=self.name,
            manufacturer="XiaoZhi",
            model=self.data.board,
            sw_version=self.data.firmware,
        )
        self.data.device_id = device.id

    async def async_shutdown(self) -> None:
        """Close the link and write what is known (unload, stop)."""
        await self.async_disconnect(CloseReason.SERVER_CLOSED)
        await self.data.async_save()

    # --- what entities ask ----------------------------------------------

    @property
    def mac(self) -> str:
        """Return the device's MAC address (its identity in Home Assistant)."""
        return self.data.mac

    @property
    def name(self) -> str:
        """Return the entry's title."""
        return self.entry.title

    @property
    def connected(self) -> bool:
        """Return True when a session finished its handshake."""
        return self.session is not None and self.session.ready

    @property
    def available(self) -> bool:
        """Return True when entities should show their state.

        A device away after Home Assistant ended its conversation is expected
        to be away: its entities keep their last state. With keep-alive, a
        device that dropped by itself is unavailable; without it, the device
        connects only when it is used and entities keep their state too.
        """
        return self.connected or self.data.expected_disconnect or not self.keepalive

    @property
    def call_timeout(self) -> float:
        """Return the tool call timeout chosen in the options."""
        return float(self.entry.options.get(CONF_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT))

    @property
    def keepalive(self) -> bool:
        """Return True when the link is kept open between conversations."""
        return bool(self.entry.options.get(CONF_KEEPALIVE, DEFAULT_KEEPALIVE))

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
        self._uploads = uploads
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
                f"xiaozhi close replaced link of {self.mac}",
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
        if not self.connected or REBOOT_TOOL not in self.data.tools:
            return
        LOGGER.info("Restarting %s: %s", self.name, why)
        try:
            await self.async_reboot()
        except HomeAssistantError as err:
            LOGGER.warning("Could not restart %s: %s", self.name, err)

    @callback
    def async_apply_options(self) -> None:
        """Use new options on the live link."""
        if (session := self.session) is not None:
            session.call_timeout = self.call_timeout
            session.set_keepalive(KEEPALIVE_INTERVAL if self.keepalive else None)
        self.data.async_write_state()

    # --- session callbacks ----------------------------------------------

    @callback
    def session_ready(self, session: DeviceSession) -> None:
        """Take the device's identity, tools and status from the handshake."""
        if session is not self.session:
            return
        info = session.server_info
        board, version = info.get("name"), info.get("version")
        self.data.async_set_identity(
            board if isinstance(board, str) and board else None,
            version if isinstance(version, str) and version else None,
        )
        if self.data.device_id is not None:
            dr.async_get(self.hass).async_update_device(
                self.data.device_id,
                model=self.data.board,
                sw_version=self.data.firmware,
            )
        self.data.async_set_tools(session.tools)
        if session.status is not None:
            self.data.async_set_status(DeviceStatus.from_json(session.status))
        level = logging.INFO if self.keepalive and self.data.connects else logging.DEBUG
        LOGGER.log(
            level,
            "%s connected (%d tools, firmware %s)",
            self.name,
            len(self.data.tools),
            self.data.firmware,
        )
        self.data.async_set_link(self._pending_link)

    @callback
    def session_tools(self, session: DeviceSession) -> None:
        """Take a fresh tool list."""
        if session is self.session:
            self.data.async_set_tools(session.tools)

    @callback
    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Take a fresh status."""
        if session is self.session:
            self.data.async_set_status(DeviceStatus.from_json(status))

    @callback
    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Fire a device event on the bus and to the entities."""
        if session is not self.session:
            return
        self._async_fire(event)
        if event.type is DeviceEventType.CONVERSATION_ENDED:
            # The device closed its audio channel; the link stays (MQTT).
            if self._voice is not None:
                self._voice.voice_closed()
            return
        if event.type not in VOICE_EVENTS:
            return
        if event.type is DeviceEventType.LISTENING_STARTED:
            mode = event.data.get("mode")
            self.listen_mode = mode if isinstance(mode, str) else self.listen_mode
        if self._voice is not None:
            self._voice.voice_event(event)
        elif event.type is DeviceEventType.LISTENING_STARTED:
            # Nobody serves it: a listening device would stream its microphone
            # for as long as the link stays open.
            self.entry.async_create_background_task(
                self.hass,
                self._async_refuse_voice(),
                f"xiaozhi refuse voice of {self.mac}",
            )

    @callback
    def _async_fire(self, event: DeviceEvent) -> None:
        """Fire a device event on the bus and to the entities."""
        self.hass.bus.async_fire(
            EVENT_XIAOZHI,
            {**event.data, "device_id": self.data.device_id, "type": event.type},
        )
        self.data.async_signal_event(event)

    async def _async_refuse_voice(self) -> None:
        LOGGER.info(
            "%s started listening, but its Assist satellite is disabled; ending "
            "the conversation",
            self.name,
        )
        try:
            await self._voice_session().send_alert(
                "Home Assistant",
                await async_device_text(self.hass, "voice_off"),
                "sad",
            )
        except XiaozhiError as err:
            LOGGER.debug("Could not tell %s: %s", self.name, err)
        await self.async_end_conversation()

    @callback
    def session_audio(self, session: DeviceSession, payload: bytes) -> None:
        """Pass microphone audio to the voice assistant."""
        if session is self.session and self._voice is not None:
            self._voice.voice_audio(payload)

    @callback
    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Forget the session; log why it ended."""
        if session is not self.session:
            return
        self.session = None
        self._uploads = None
        # Home Assistant ended the conversation (WebSocket): away as planned.
        expected = reason is CloseReason.CONVERSATION_ENDED
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
        self.data.async_set_link(None, expected=expected)
        if self._voice is not None:
            self._voice.voice_closed()

    # --- voice ----------------------------------------------------------

    @callback
    def async_set_voice_handler(self, handler: VoiceHandler) -> CALLBACK_TYPE:
        """Have ``handler`` serve the device's voice until the callback is called."""
        self._voice = handler

        @callback
        def remove() -> None:
            if self._voice is handler:
                self._voice = None

        return remove

    def _voice_session(self) -> DeviceSession:
        """Return the live session; ConnectionClosedError when there is none."""
        session = self.session
        if session is None or session.closed:
            raise ConnectionClosedError("not connected")
        return session

    @property
    def voice_ready(self) -> bool:
        """Return True when the device can be spoken to now (in a conversation)."""
        return self.session is not None and self.session.audio_open

    @callback
    def async_signal_timer_finished(self, name: str, seconds: int) -> None:
        """Fire the event of a timer set on this device that finished."""
        self._async_fire(
            DeviceEvent(
                type=DeviceEventType.TIMER_FINISHED,
                data={"name": name, "seconds": seconds},
            )
        )

    @property
    def idle_reachable(self) -> bool:
        """Return True when the device is idle but reachable (MQTT)."""
        session = self.session
        return (
            session is not None
            and session.ready
            and session.link.always_on
            and not session.audio_open
        )

    @property
    def plays_notify(self) -> bool:
        """Return True when the firmware fetches and plays sounds while idle."""
        return plays_notify(self.data.firmware)

    async def async_notify_sound(
        self, audio: bytes, text: str
    ) -> tuple[asyncio.Event, CALLBACK_TYPE]:
        """Send an idle device a sound to fetch; return its fetched event, revoker."""
        session = self._ready_session()
        if self._uploads is None:  # pragma: no cover - set with the session
            raise RuntimeError("no upload URLs for a ready session")
        url, fetched, revoke = self._uploads.mint_clip_url(audio)
        try:
            await session.send_notify(url, text)
        except XiaozhiError:
            revoke()
            raise
        return fetched, revoke

    @property
    def voice_format(self) -> tuple[int, int]:
        """Return the sample rate and frame duration (ms) audio is sent with."""
        session = self._voice_session()
        return session.sample_rate, session.frame_duration

    async def async_voice_tts(self, state: str, text: str | None = None) -> None:
        """Send ``tts`` (``start``, ``stop``, ``sentence_start``) to the device."""
        await self._voice_session().send_tts(state, text)
        if state in ("start", "stop"):
            self._async_fire(
                DeviceEvent(
                    type=DeviceEventType.SPEAKING_STARTED
                    if state == "start"
                    else DeviceEventType.SPEAKING_STOPPED
                )
            )

    async def async_voice_stt(self, text: str) -> None:
        """Show the device what it heard."""
        await self._voice_session().send_stt(text)

    async def async_voice_emotion(self, emotion: str) -> None:
        """Show an emotion on the device."""
        await self._voice_session().send_emotion(emotion)

    async def async_voice_alert(self, title: str, message: str, emotion: str) -> None:
        """Show a message on the device (a timer, an error)."""
        await self._voice_session().send_alert(title, message, emotion)

    async def async_voice_audio(self, packet: bytes, timestamp: int) -> None:
        """Send one Opus packet to the device's speaker."""
        await self._voice_session().send_audio(packet, timestamp)

    async def async_end_conversation(self) -> None:
        """End the conversation as Home Assistant wants it ended.

        Over MQTT + UDP ``goodbye`` closes the audio channel and the link
        stays. Over WebSocket the firmware has no message that makes it idle:
        the conversation ends when the link closes, and the device dials again
        at its next wake word. A planned end is an expected disconnect:
        entities keep their state.
        """
        session = self.session
        if session is None or session.closed:
            return
        try:
            await session.end_conversation()
        except XiaozhiError as err:
            # The link is failing: it ends the conversation by itself.
            LOGGER.debug("%s: conversation not ended: %s", self.name, err)
        if session.link.always_on and self._voice is not None:
            # Whatever the device started meanwhile is over too.
            self._voice.voice_closed()

    # --- commands -------------------------------------------------------

    def _ready_session(self) -> DeviceSession:
        session = self.session
        if session is None or not session.ready:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="not_connected",
                translation_placeholders={"name": self.name},
            )
        return session

    @device_command
    async def async_call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Validate the arguments, call the tool and return its result.

        Raises ServiceValidationError for bad arguments or an unknown tool and
        HomeAssistantError when the device is gone or does not answer.
        """
        session = self._ready_session()
        if (tool := self.data.tools.get(name)) is None:
            raise ServiceValidationError(
                translation_domain=DOMAIN,
                translation_key="unknown_tool",
                translation_placeholders={"tool": name, "name": self.name},
            )
        try:
            cleaned = validate_arguments(tool, arguments or {})
        except ArgumentError as err:
            err.subject = name
            raise
        return await session.call_tool(name, cleaned, timeout)

    async def async_run_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None
    ) -> ToolResult:
        """Call a tool for an entity: a refusal by the device is an error."""
        result = await self.async_call_tool(name, arguments)
        if result.is_error or result.json is False:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="rejected",
                translation_placeholders={
                    "tool": name,
                    "name": self.name,
                    "error": result.text,
                },
            )
        return result

    async def async_apply(self, setting: Setting, value: Any) -> None:
        """Change a status value through its tool; record it once confirmed."""
        await self.async_run_tool(setting.tool, {setting.argument: value})
        self.data.async_set_status(self.data.status.with_value(setting.path, value))

    async def async_set_volume(self, volume: int) -> None:
        """Set the speaker volume (0-100)."""
        await self.async_apply(VOLUME, volume)

    async def async_set_brightness(self, brightness: int) -> None:
        """Set the screen brightness (0-100)."""
        await self.async_apply(BRIGHTNESS, brightness)

    async def async_set_theme(self, theme: str) -> None:
        """Set the screen theme."""
        await self.async_apply(THEME, theme)

    async def async_reboot(self) -> None:
        """Restart the device."""
        await self.async_run_tool(REBOOT_TOOL)

    async def async_take_photo(self, question: str = PHOTO_QUESTION) -> None:
        """Have the camera take a photo; it arrives through the vision upload."""
        await self.async_run_tool(PHOTO_TOOL, {"question": question})

    async def async_refresh_screen(self) -> None:
        """Ask the device for a picture of its screen."""
        self._ready_session()
        if self._uploads is None:  # pragma: no cover - set with the session
            raise RuntimeError("no upload URLs for a ready session")
        url, revoke = self._uploads.mint_snapshot_url()
        try:
            await self.async_run_tool(
                SNAPSHOT_TOOL, {"url": url, "quality": SNAPSHOT_QUALITY}
            )
        finally:
            revoke()

    @device_command
    async def async_send_alert(self, title: str, message: str) -> None:
        """Show a message on the device's screen."""
        await self._ready_session().send_alert(title, message)

    @device_command
    async def async_refresh(self) -> None:
        """List tools and read the status again now."""
        await self._ready_session().refresh()

    @device_command
    async def async_refresh_status(self) -> None:
        """Read the device status now."""
        session = self._ready_session()
        if STATUS_TOOL in self.data.tools:
            await session.refresh_status()

    @callback
    def async_store_picture(
        self, kind: str, content: bytes, content_type: str, question: str = ""
    ) -> None:
        """Keep a picture the device uploaded (``photo`` or ``screen``)."""
        self.data.async_set_picture(kind, content, content_type, question)
