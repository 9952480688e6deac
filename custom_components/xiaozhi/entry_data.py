"""What is known about one paired device, its listeners, and its Store.

Identity, tools and status (kept across restarts in the Store), the current
link, the conversation (activity, listen mode, what was heard and said) and
the pictures it uploaded. The runtime (``runtime.py``) and what it owns
(its commands, the session's voice channel) write it; entities only read it
and subscribe to its changes.
"""

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TypedDict, override

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.storage import STORAGE_DIR, Store
from homeassistant.util import dt as dt_util

from .const import DOMAIN, LOGGER
from .protocol import Activity, DeviceEvent, DeviceStatus, Tool
from .protocol.ota_image import DeviceHardware

STORAGE_VERSION: Final = 1
STORAGE_MINOR_VERSION: Final = 5
SAVE_DELAY: Final = 10.0
PICTURE_KINDS: Final = ("photo", "screen")


class StoredPicture(TypedDict):
    """What is stored about a picture; its bytes are a file beside the Store."""

    content_type: str
    question: str
    taken: str


class StoredNotify(TypedDict):
    """Whether the device played a ``notify`` sound, on which firmware."""

    firmware: str | None
    plays: bool


class StoredDevice(TypedDict):
    """What is stored about a device between restarts."""

    tools: list[dict[str, Any]]
    status: dict[str, Any]
    board: str | None
    firmware: str | None
    wake_word: str | None
    pictures: dict[str, StoredPicture]
    notify: StoredNotify | None
    hardware: dict[str, Any] | None


class DeviceStore(Store[StoredDevice]):
    """The device's Store, with the hook that migrates older layouts."""

    @override
    async def _async_migrate_func(
        self, old_major_version: int, old_minor_version: int, old_data: Any
    ) -> StoredDevice:
        """Bring stored data from an older version to this one.

        1.1 had no wake word (1.2 adds it, learnt from the device); 1.3 keeps
        the pictures; 1.4 whether the device plays ``notify`` sounds; 1.5
        its chip, board and partitions (from its OTA check). A newer
        major version is not guessed at.
        """
        if old_major_version > STORAGE_VERSION:
            raise NotImplementedError(
                f"stored device data of version {old_major_version} is newer "
                "than this integration"
            )
        data: StoredDevice = {
            "tools": [],
            "status": {},
            "board": None,
            "firmware": None,
            "wake_word": None,
            "pictures": {},
            "notify": None,
            "hardware": None,
        }
        if isinstance(old_data, dict):
            data.update(old_data)  # type: ignore[typeddict-item]
        return data


def pictures_dir(hass: HomeAssistant, entry_id: str) -> Path:
    """Return where a device's pictures are kept."""
    return Path(hass.config.path(STORAGE_DIR, DOMAIN, entry_id))


def device_store(hass: HomeAssistant, entry_id: str) -> DeviceStore:
    """Return the Store of a device's config entry."""
    return DeviceStore(
        hass,
        STORAGE_VERSION,
        f"{DOMAIN}.{entry_id}",
        minor_version=STORAGE_MINOR_VERSION,
    )


@dataclass(slots=True, frozen=True, kw_only=True)
class Picture:
    """A picture the device uploaded: a camera photo or its screen."""

    content: bytes
    content_type: str
    question: str
    taken: datetime


@dataclass(slots=True, frozen=True, kw_only=True)
class LinkInfo:
    """The device's current connection."""

    transport: str
    remote: str | None
    client_id: str | None
    protocol_version: int
    connected_since: datetime


class XiaozhiEntryData:
    """State of one device, and who wants to hear when it changes."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry_id: str,
        *,
        mac: str,
        board: str | None,
        firmware: str | None,
    ) -> None:
        """Start with what the config entry remembers."""
        self.mac = mac
        self.board = board
        self.firmware = firmware
        self.hardware: DeviceHardware | None = None
        self.device_id: str | None = None
        self.tools: dict[str, Tool] = {}
        self.status = DeviceStatus()
        self.activity = Activity.IDLE
        self.wake_word: str | None = None
        self._notify: StoredNotify | None = None
        # How the device listens in the current conversation (auto, manual,
        # realtime); None outside a conversation.
        self.listen_mode: str | None = None
        self.last_heard: str | None = None
        self.last_reply: str | None = None
        self._pictures: dict[str, Picture] = {}
        self.link: LinkInfo | None = None
        # The last link ended as planned (a conversation ended, or a WebSocket
        # device hung up after one): the device is away as expected, not lost.
        self.expected_disconnect = False
        self.connects = 0
        self._state_listeners: dict[CALLBACK_TYPE, None] = {}
        self._tools_listeners: dict[CALLBACK_TYPE, None] = {}
        self._status_listeners: dict[CALLBACK_TYPE, None] = {}
        self._event_listeners: dict[Callable[[DeviceEvent], None], None] = {}
        self._hass = hass
        self._store = device_store(hass, entry_id)
        self._pictures_dir = pictures_dir(hass, entry_id)

    # --- persistence ----------------------------------------------------

    async def async_load(self) -> None:
        """Restore the last known tools, status and board."""
        stored = await self._store.async_load()
        if stored is None:
            return
        tools = (Tool.from_json(item) for item in stored["tools"])
        self.tools = {tool.name: tool for tool in tools if tool is not None}
        self.status = DeviceStatus.from_json(stored["status"])
        self.board = stored["board"] or self.board
        self.firmware = stored["firmware"] or self.firmware
        self.wake_word = stored["wake_word"]
        self._notify = stored["notify"]
        if (hardware := stored.get("hardware")) is not None:
            self.hardware = DeviceHardware.from_dict(hardware)
        for kind, meta in stored["pictures"].items():
            if kind not in PICTURE_KINDS:
                continue
            content = await self._hass.async_add_executor_job(
                _read_file, self._pictures_dir / f"{kind}.jpg"
            )
            taken = dt_util.parse_datetime(meta["taken"])
            if content is not None and taken is not None:
                self._pictures[kind] = Picture(
                    content=content,
                    content_type=meta["content_type"],
                    question=meta["question"],
                    taken=taken,
                )

    def _data_to_save(self) -> StoredDevice:
        return {
            "tools": [tool.as_dict() for tool in self.tools.values()],
            "status": dict(self.status.raw),
            "board": self.board,
            "firmware": self.firmware,
            "wake_word": self.wake_word,
            "notify": self._notify,
            "hardware": self.hardware.as_dict() if self.hardware else None,
            "pictures": {
                kind: {
                    "content_type": picture.content_type,
                    "question": picture.question,
                    "taken": picture.taken.isoformat(),
                }
                for kind, picture in self._pictures.items()
            },
        }

    async def async_save(self) -> None:
        """Write what is known about the device now."""
        await self._store.async_save(self._data_to_save())

    @callback
    def _schedule_save(self) -> None:
        self._store.async_delay_save(self._data_to_save, SAVE_DELAY)

    # --- listeners ------------------------------------------------------

    @staticmethod
    def _subscribe[T](listeners: dict[T, None], listener: T) -> CALLBACK_TYPE:
        listeners[listener] = None

        @callback
        def remove() -> None:
            listeners.pop(listener, None)

        return remove

    @callback
    def async_subscribe_state(self, listener: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``listener`` whenever anything entities show changes."""
        return self._subscribe(self._state_listeners, listener)

    @callback
    def async_subscribe_tools(self, listener: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``listener`` when the tool list changes."""
        return self._subscribe(self._tools_listeners, listener)

    @callback
    def async_subscribe_status(self, listener: CALLBACK_TYPE) -> CALLBACK_TYPE:
        """Call ``listener`` when the status changes."""
        return self._subscribe(self._status_listeners, listener)

    @callback
    def async_subscribe_events(
        self, listener: Callable[[DeviceEvent], None]
    ) -> CALLBACK_TYPE:
        """Call ``listener`` with every device event."""
        return self._subscribe(self._event_listeners, listener)

    @callback
    def async_write_state(self) -> None:
        """Tell every entity to write its state."""
        for listener in list(self._state_listeners):
            listener()

    # --- updates --------------------------------------------------------

    @callback
    def async_set_identity(self, board: str | None, firmware: str | None) -> None:
        """Take the board and firmware a connection reported."""
        if (board or self.board, firmware or self.firmware) != (
            self.board,
            self.firmware,
        ):
            self.board = board or self.board
            self.firmware = firmware or self.firmware
            self._schedule_save()

    @callback
    def async_set_hardware(self, hardware: DeviceHardware) -> None:
        """Take what the device's OTA check said about its hardware."""
        if hardware != self.hardware:
            self.hardware = hardware
            self._schedule_save()
            self.async_write_state()

    @callback
    def async_set_wake_word(self, wake_word: str) -> None:
        """Take the wake word the device said it heard."""
        if wake_word != self.wake_word:
            self.wake_word = wake_word
            self._schedule_save()
            self.async_write_state()

    @property
    def plays_notify(self) -> bool | None:
        """Return whether the device's firmware plays ``notify`` sounds.

        None until an idle announcement has shown it, and again once the
        firmware changed: its version number does not tell (``main`` kept
        2.4.2 for a while after the change).
        """
        known = self._notify
        if known is None or known["firmware"] != self.firmware:
            return None
        return known["plays"]

    @callback
    def async_learn_notify(self, plays: bool) -> None:
        """Remember whether the device fetched a ``notify`` sound."""
        self._notify = {"firmware": self.firmware, "plays": plays}
        self._schedule_save()

    @property
    def push_to_talk(self) -> bool:
        """Return True when the device listens while its button is held (manual)."""
        return self.listen_mode == "manual"

    @callback
    def async_set_listen_mode(self, mode: str | None) -> None:
        """Take how the device listens now (None: the conversation ended)."""
        self.listen_mode = mode

    @callback
    def async_set_transcript(self, heard: str | None, reply: str | None) -> None:
        """Take what the device heard and what it answered in a turn."""
        self.last_heard = heard if heard is not None else self.last_heard
        self.last_reply = reply if reply is not None else self.last_reply
        self.async_write_state()

    @callback
    def async_set_tools(self, tools: dict[str, Tool]) -> None:
        """Take a tool list; entities follow it when it changed."""
        if tools == self.tools:
            return
        self.tools = dict(tools)
        self._schedule_save()
        for listener in list(self._tools_listeners):
            listener()
        self.async_write_state()

    @callback
    def async_set_status(self, status: DeviceStatus) -> None:
        """Take a status; entities follow it when it changed."""
        if status == self.status and status.raw == self.status.raw:
            return
        self.status = status
        self._schedule_save()
        for listener in list(self._status_listeners):
            listener()
        self.async_write_state()

    @callback
    def async_set_activity(self, activity: Activity) -> None:
        """Take what the device is doing now."""
        if activity is not self.activity:
            self.activity = activity
            self.async_write_state()

    @callback
    def async_set_link(self, link: LinkInfo | None, *, expected: bool = False) -> None:
        """Take the device's connection, or None once it is gone.

        ``expected`` says it ended as planned (see ``expected_disconnect``).
        """
        if link is not None:
            self.connects += 1
        else:
            self.activity = Activity.IDLE
            self.listen_mode = None
        self.expected_disconnect = link is None and expected
        self.link = link
        self.async_write_state()

    @callback
    def async_signal_event(self, event: DeviceEvent) -> None:
        """Pass a device event on to its listeners; follow its activity."""
        for listener in list(self._event_listeners):
            listener(event)
        if (activity := event.activity) is not None:
            self.async_set_activity(activity)

    @callback
    def async_set_picture(
        self, kind: str, content: bytes, content_type: str, question: str = ""
    ) -> None:
        """Keep the latest ``photo`` or ``screen`` picture."""
        self._pictures[kind] = Picture(
            content=content,
            content_type=content_type,
            question=question,
            taken=dt_util.utcnow(),
        )
        # The picture's bytes first, then the Store that points at them.
        path = self._pictures_dir / f"{kind}.jpg"

        def written(done: asyncio.Future[None]) -> None:
            if done.cancelled():  # shutting down
                return
            if (err := done.exception()) is not None:
                LOGGER.warning("Cannot keep the %s picture in %s: %s", kind, path, err)
                return
            self._schedule_save()

        self._hass.async_add_executor_job(_write_file, path, content).add_done_callback(
            written
        )
        self.async_write_state()

    @property
    def last_photo(self) -> Picture | None:
        """Return the last photo of the camera."""
        return self._pictures.get("photo")

    @property
    def screen(self) -> Picture | None:
        """Return the last picture of the screen."""
        return self._pictures.get("screen")


def _read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _write_file(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
