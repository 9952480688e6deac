"""The runtime of one paired device: its link, tools, status and listeners."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
import logging
import secrets
from typing import Any

from aiohttp import WSMsgType, web
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.storage import Store
from homeassistant.util import dt as dt_util
import orjson

from .const import (
    CONF_BOARD,
    CONF_CALL_TIMEOUT,
    CONF_FIRMWARE,
    CONF_KEEPALIVE,
    CONF_MAC,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DOMAIN,
    HELLO_TIMEOUT,
    KEEPALIVE_INTERVAL,
    LOGGER,
    MAX_EVENT_FRAME,
    REBOOT_TOOL,
    REQUEST_TIMEOUT,
    SNAPSHOT_TOOL,
    STATUS_TOOL,
    URL_SNAPSHOT,
    URL_VISION,
)
from .http import DATA_KEY
from .protocol import (
    ArgumentError,
    CloseReason,
    ConnectionClosedError,
    DeviceSession,
    RequestTimeoutError,
    Tool,
    ToolResult,
    XiaozhiError,
    validate_arguments,
)

type XiaozhiConfigEntry = ConfigEntry[XiaozhiDevice]

EVENT_XIAOZHI = "xiaozhi_event"
STORAGE_VERSION = 1
SAVE_DELAY = 10.0

ACTIVITIES = [
    "idle",
    "connecting",
    "listening",
    "speaking",
    "upgrading",
    "activating",
    "error",
]
_FIRMWARE_STATES = {
    "idle": "idle",
    "connecting": "connecting",
    "listening": "listening",
    "speaking": "speaking",
    "upgrading": "upgrading",
    "activating": "activating",
    "fatal_error": "error",
    "error": "error",
}


@dataclass(slots=True, frozen=True, kw_only=True)
class DeviceEvent:
    """Something the device did: wake word, listening, abort, notification."""

    type: str
    data: dict[str, Any]


@dataclass(slots=True, frozen=True, kw_only=True)
class Photo:
    """A picture the device uploaded."""

    content: bytes
    content_type: str
    question: str
    taken: datetime


def _store(hass: HomeAssistant, entry_id: str) -> Store[dict[str, Any]]:
    return Store(hass, STORAGE_VERSION, f"{DOMAIN}.{entry_id}")


async def async_remove_store(hass: HomeAssistant, entry_id: str) -> None:
    """Forget what was stored about a device whose entry was removed."""
    await _store(hass, entry_id).async_remove()


def activity_after(event: DeviceEvent) -> str | None:
    """Return what the device is doing after ``event``, when the event says."""
    match event.type:
        case "wake_word" | "listening_started":
            return "listening"
        case "listening_stopped" | "aborted" | "speaking_stopped":
            return "idle"
        case "speaking_started":
            return "speaking"
        case "notification" if event.data["method"] == "notifications/state_changed":
            new_state = event.data["params"].get("newState")
            if isinstance(new_state, str):
                return _FIRMWARE_STATES.get(new_state)
    return None


def event_from_frame(frame: Mapping[str, Any]) -> DeviceEvent:
    """Translate a device frame other than ``mcp`` into a device event."""
    kind = frame.get("type")
    if kind == "listen":
        state = frame.get("state")
        mode = frame.get("mode")
        data: dict[str, Any] = {"mode": mode} if isinstance(mode, str) else {}
        if state == "detect":
            text = frame.get("text")
            data["text"] = text if isinstance(text, str) else ""
            return DeviceEvent(type="wake_word", data=data)
        if state == "start":
            return DeviceEvent(type="listening_started", data=data)
        if state == "stop":
            return DeviceEvent(type="listening_stopped", data=data)
    elif kind == "tts" and frame.get("state") in ("start", "stop"):
        started = frame.get("state") == "start"
        return DeviceEvent(
            type="speaking_started" if started else "speaking_stopped", data={}
        )
    elif kind == "abort":
        reason = frame.get("reason")
        return DeviceEvent(
            type="aborted", data={"reason": reason if isinstance(reason, str) else ""}
        )
    message = {k: v for k, v in frame.items() if k != "session_id"}
    if len(orjson.dumps(message)) > MAX_EVENT_FRAME:
        # Events end up in states and the recorder: pass on what it was only.
        message = {"type": kind, "truncated": True}
    return DeviceEvent(type="message", data={"frame": message})


class XiaozhiDevice:
    """Owns one device's connection, tools and state for its config entry."""

    def __init__(self, hass: HomeAssistant, entry: XiaozhiConfigEntry) -> None:
        """Start disconnected, with what the entry remembers."""
        self.hass = hass
        self.entry = entry
        self.mac: str = entry.data[CONF_MAC]
        self.board: str | None = entry.data.get(CONF_BOARD)
        self.firmware: str | None = entry.data.get(CONF_FIRMWARE)
        self.client_id: str | None = None
        self.protocol_version: int | None = None
        self.session: DeviceSession | None = None
        self.tools: dict[str, Tool] = {}
        self.status: dict[str, Any] = {}
        self.last_photo: Photo | None = None
        self.screen: Photo | None = None
        self.activity = "idle"
        self.device_id: str | None = None
        self._listeners: dict[CALLBACK_TYPE, None] = {}
        self._event_listeners: dict[Callable[[DeviceEvent], None], None] = {}
        self._shutting_down = False
        self._was_connected = False
        self._store = _store(hass, entry.entry_id)

    # --- persistence ----------------------------------------------------

    async def async_load(self) -> None:
        """Restore the last known tools, status and identity."""
        stored = await self._store.async_load()
        if stored:
            tools = (Tool.from_json(item) for item in stored.get("tools", ()))
            self.tools = {tool.name: tool for tool in tools if tool is not None}
            if isinstance(status := stored.get("status"), dict):
                self.status = status
            self.board = stored.get("board") or self.board
            self.firmware = stored.get("firmware") or self.firmware
        device = dr.async_get(self.hass).async_get_or_create(
            config_entry_id=self.entry.entry_id,
            connections={(dr.CONNECTION_NETWORK_MAC, self.mac)},
            identifiers={(DOMAIN, self.mac)},
            name=self.name,
            manufacturer="XiaoZhi",
            model=self.board,
            sw_version=self.firmware,
        )
        self.device_id = device.id

    def _data_to_save(self) -> dict[str, Any]:
        return {
            "tools": [tool.as_dict() for tool in self.tools.values()],
            "status": self.status,
            "board": self.board,
            "firmware": self.firmware,
        }

    async def async_save(self) -> None:
        """Write what is known about the device now."""
        await self._store.async_save(self._data_to_save())

    @callback
    def _schedule_save(self) -> None:
        self._store.async_delay_save(self._data_to_save, SAVE_DELAY)

    # --- state for entities ---------------------------------------------

    @property
    def name(self) -> str:
        """Return the entry's title."""
        return self.entry.title

    @property
    def connected(self) -> bool:
        """Return True when a session finished its handshake."""
        return self.session is not None and self.session.ready

    @property
    def call_timeout(self) -> float:
        """Return the tool call timeout chosen in the options."""
        return float(self.entry.options.get(CONF_CALL_TIMEOUT, DEFAULT_CALL_TIMEOUT))

    @property
    def keepalive(self) -> bool:
        """Return True when the link is kept open between conversations."""
        return bool(self.entry.options.get(CONF_KEEPALIVE, DEFAULT_KEEPALIVE))

    @callback
    def async_add_listener(self, update: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``update`` whenever the device's state changes."""
        self._listeners[update] = None

        @callback
        def remove() -> None:
            self._listeners.pop(update, None)

        return remove

    @callback
    def async_add_event_listener(
        self, listener: Callable[[DeviceEvent], None]
    ) -> CALLBACK_TYPE:
        """Call ``listener`` with every device event."""
        self._event_listeners[listener] = None

        @callback
        def remove() -> None:
            self._event_listeners.pop(listener, None)

        return remove

    @callback
    def _notify(self) -> None:
        for update in list(self._listeners):
            update()

    @callback
    def _emit(self, event: DeviceEvent) -> None:
        self.hass.bus.async_fire(
            EVENT_XIAOZHI,
            {**event.data, "device_id": self.device_id, "type": event.type},
        )
        for listener in list(self._event_listeners):
            listener(event)
        if (activity := activity_after(event)) is not None and (
            activity != self.activity
        ):
            self.activity = activity
            self._notify()

    # --- connection -----------------------------------------------------

    async def async_handle_connection(
        self, ws: web.WebSocketResponse, request: web.Request, vision_url: str
    ) -> None:
        """Serve one authenticated WebSocket until it closes."""
        headers = request.headers
        self.client_id = headers.get("Client-Id")
        try:
            self.protocol_version = int(headers.get("Protocol-Version", "1"))
        except ValueError:
            self.protocol_version = None
        session = DeviceSession(
            ws,
            self,
            vision_url=vision_url,
            vision_token=secrets.token_urlsafe(24),
            request_timeout=REQUEST_TIMEOUT,
            call_timeout=self.call_timeout,
            hello_timeout=HELLO_TIMEOUT,
            keepalive_interval=KEEPALIVE_INTERVAL if self.keepalive else None,
        )
        previous, self.session = self.session, session
        session.start()
        if previous is not None:
            LOGGER.info("%s connected again; closing its previous link", self.name)
            # Its pending calls fail at once; the old socket may take a while
            # to close, which must not hold up the new conversation.
            self.hass.async_create_background_task(
                previous.close(CloseReason.REPLACED, "replaced by a new connection"),
                f"xiaozhi close replaced link of {self.mac}",
            )
        try:
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    session.feed_text(message.data)
                elif message.type is WSMsgType.BINARY:
                    session.feed_binary(message.data)
                elif message.type is WSMsgType.ERROR:
                    LOGGER.warning("%s: WebSocket error: %s", self.name, ws.exception())
        finally:
            await session.connection_lost()

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
        if self.connected and REBOOT_TOOL in self.tools:
            try:
                await self.async_call_tool(REBOOT_TOOL)
            except HomeAssistantError as err:
                LOGGER.warning("Could not restart %s: %s", self.name, err)
        if (session := self.session) is not None:
            await session.close(CloseReason.SERVER_CLOSED, "token changed")

    @callback
    def apply_options(self) -> None:
        """Use new options on the live link."""
        if (session := self.session) is not None:
            session.call_timeout = self.call_timeout
            session.set_keepalive(KEEPALIVE_INTERVAL if self.keepalive else None)

    # --- SessionHandler -------------------------------------------------

    @callback
    def session_ready(self, session: DeviceSession) -> None:
        """Take the device's identity, tools and status from the handshake."""
        if session is not self.session:
            return
        info = session.server_info
        if isinstance(board := info.get("name"), str) and board:
            self.board = board
        if isinstance(version := info.get("version"), str) and version:
            self.firmware = version
        self.tools = dict(session.tools)
        if session.status is not None:
            self.status = session.status
        if self.device_id is not None:
            dr.async_get(self.hass).async_update_device(
                self.device_id, model=self.board, sw_version=self.firmware
            )
        level = (
            logging.INFO if self.keepalive and self._was_connected else logging.DEBUG
        )
        LOGGER.log(
            level,
            "%s connected (%d tools, firmware %s)",
            self.name,
            len(self.tools),
            self.firmware,
        )
        self._was_connected = True
        self._schedule_save()
        self._notify()

    @callback
    def session_tools(self, session: DeviceSession) -> None:
        """Take a fresh tool list."""
        if session is self.session:
            self.tools = dict(session.tools)
            self._schedule_save()
            self._notify()

    @callback
    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Take a fresh status."""
        if session is self.session and status != self.status:
            self.status = status
            self._schedule_save()
            self._notify()

    @callback
    def session_notification(
        self, session: DeviceSession, method: str, params: dict[str, Any]
    ) -> None:
        """Pass an MCP notification on as a device event."""
        if session is self.session:
            self._emit(
                DeviceEvent(
                    type="notification", data={"method": method, "params": params}
                )
            )

    @callback
    def session_message(self, session: DeviceSession, frame: dict[str, Any]) -> None:
        """Pass listen, abort and other frames on as device events."""
        if session is self.session:
            self._emit(event_from_frame(frame))

    @callback
    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Forget the session; log why it ended."""
        if session is not self.session:
            return
        self.session = None
        self.activity = "idle"
        if self._shutting_down or not self.keepalive:
            LOGGER.debug("%s disconnected (%s)", self.name, reason)
        else:
            LOGGER.info(
                "%s disconnected (%s); its entities are unavailable until it "
                "connects again",
                self.name,
                reason,
            )
        self._notify()

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
        tool = self.tools.get(name)
        if tool is None:
            raise ServiceValidationError(
                translation_domain=DOMAIN,
                translation_key="unknown_tool",
                translation_placeholders={"tool": name, "name": self.name},
            )
        try:
            cleaned = validate_arguments(tool, arguments or {})
        except ArgumentError as err:
            raise ServiceValidationError(
                translation_domain=DOMAIN,
                translation_key=err.reason,
                translation_placeholders={"tool": name, **err.placeholders},
            ) from err
        # Not ``with self._device_errors(name)``: on this hot path the
        # generator behind the context manager costs about 2 us per call.
        try:
            return await session.call_tool(name, cleaned, timeout)
        except XiaozhiError as err:
            raise self._device_error(err, name) from err

    async def async_refresh(self) -> None:
        """List tools and read the status again now."""
        session = self._ready_session()
        with self._device_errors("tools/list"):
            await session.refresh()

    @contextmanager
    def _device_errors(self, what: str) -> Iterator[None]:
        """Turn protocol failures into translated Home Assistant errors."""
        try:
            yield
        except XiaozhiError as err:
            raise self._device_error(err, what) from err

    def _device_error(self, err: XiaozhiError, what: str) -> HomeAssistantError:
        """Return the translated Home Assistant error for a protocol failure."""
        placeholders = {"tool": what, "name": self.name}
        if isinstance(err, RequestTimeoutError):
            return HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="timeout",
                translation_placeholders=placeholders,
            )
        if isinstance(err, ConnectionClosedError):
            return HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="connection_lost",
                translation_placeholders=placeholders,
            )
        return HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="device_error",
            translation_placeholders={**placeholders, "error": str(err)},
        )

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

    async def async_set_value(
        self, name: str, arguments: Mapping[str, Any], path: tuple[str, ...]
    ) -> None:
        """Set a status value through a tool; record it once confirmed."""
        await self.async_run_tool(name, arguments)
        (value,) = arguments.values()
        self.set_status_value(path, value)

    async def async_send_alert(self, title: str, message: str) -> None:
        """Show a message on the device's screen."""
        session = self._ready_session()
        with self._device_errors("alert"):
            await session.send_alert(title, message)

    @callback
    def set_status_value(self, path: tuple[str, ...], value: Any) -> None:
        """Record a value the device confirmed setting."""
        node = self.status
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                # The device reported this section in another shape (or not
                # at all): the value it just confirmed replaces it.
                child = node[key] = {}
            node = child
        if node.get(path[-1]) != value:
            node[path[-1]] = value
            self._schedule_save()
            self._notify()

    async def async_refresh_screen(self) -> None:
        """Ask the device for a picture of its screen."""
        session = self._ready_session()
        data = self.hass.data[DATA_KEY]
        token = data.add_snapshot_token(self.mac)
        base = session.vision_url.removesuffix(URL_VISION)
        try:
            await self.async_run_tool(
                SNAPSHOT_TOOL, {"url": f"{base}{URL_SNAPSHOT}/{token}", "quality": 80}
            )
        finally:
            data.snapshot_tokens.pop(token, None)

    async def async_refresh_status(self) -> None:
        """Read the device status now."""
        session = self._ready_session()
        if STATUS_TOOL not in self.tools:
            return
        with self._device_errors(STATUS_TOOL):
            await session.refresh_status()

    @callback
    def store_screen(self, content: bytes) -> None:
        """Keep the latest picture of the device's screen."""
        self.screen = Photo(
            content=content,
            content_type="image/jpeg",
            question="",
            taken=dt_util.utcnow(),
        )
        self._notify()

    @callback
    def store_photo(self, content: bytes, content_type: str, question: str) -> None:
        """Keep the latest photo the device uploaded."""
        self.last_photo = Photo(
            content=content,
            content_type=content_type,
            question=question,
            taken=dt_util.utcnow(),
        )
        self._notify()
