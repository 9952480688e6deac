"""What a device does, read from its frames: events and its activity."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from .messages import dumps

# Device frames passed on whole in events (and so in states and the recorder).
MAX_EVENT_FRAME: Final = 4096
STATE_CHANGED: Final = "notifications/state_changed"


class DeviceEventType(StrEnum):
    """Kinds of device event."""

    WAKE_WORD = "wake_word"
    LISTENING_STARTED = "listening_started"
    LISTENING_STOPPED = "listening_stopped"
    SPEAKING_STARTED = "speaking_started"
    SPEAKING_STOPPED = "speaking_stopped"
    ABORTED = "aborted"
    CONVERSATION_ENDED = "conversation_ended"
    NOTIFICATION = "notification"
    MESSAGE = "message"
    TIMER_FINISHED = "timer_finished"
    # Home Assistant's own decisions about a wake word (``voice/``).
    WAKE_WON = "wake_won"
    WAKE_STOOD_DOWN = "wake_stood_down"
    FALSE_WAKE = "false_wake"


class Activity(StrEnum):
    """What the device is doing."""

    IDLE = "idle"
    CONNECTING = "connecting"
    LISTENING = "listening"
    SPEAKING = "speaking"
    UPGRADING = "upgrading"
    ACTIVATING = "activating"
    ERROR = "error"


# ``notifications/state_changed`` states of device implementations that send it.
_FIRMWARE_STATES: Final = {
    "idle": Activity.IDLE,
    "connecting": Activity.CONNECTING,
    "listening": Activity.LISTENING,
    "speaking": Activity.SPEAKING,
    "upgrading": Activity.UPGRADING,
    "activating": Activity.ACTIVATING,
    "fatal_error": Activity.ERROR,
    "error": Activity.ERROR,
}


@dataclass(slots=True, frozen=True, kw_only=True)
class DeviceEvent:
    """Something the device did: wake word, listening, abort, notification."""

    type: DeviceEventType
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def is_state_change(self) -> bool:
        """Return True for a notification that only reports a new activity."""
        return (
            self.type is DeviceEventType.NOTIFICATION
            and self.data.get("method") == STATE_CHANGED
        )

    @property
    def activity(self) -> Activity | None:
        """Return what the device is doing after this event, when it says."""
        match self.type:
            case DeviceEventType.WAKE_WORD | DeviceEventType.LISTENING_STARTED:
                return Activity.LISTENING
            case (
                DeviceEventType.LISTENING_STOPPED
                | DeviceEventType.ABORTED
                | DeviceEventType.SPEAKING_STOPPED
                | DeviceEventType.CONVERSATION_ENDED
            ):
                return Activity.IDLE
            case DeviceEventType.SPEAKING_STARTED:
                return Activity.SPEAKING
        if self.is_state_change:
            new_state = self.data["params"].get("newState")
            if isinstance(new_state, str):
                return _FIRMWARE_STATES.get(new_state)
        return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def notification_event(method: str, params: dict[str, Any]) -> DeviceEvent:
    """Return the event of an MCP notification from the device."""
    return DeviceEvent(
        type=DeviceEventType.NOTIFICATION, data={"method": method, "params": params}
    )


def event_from_frame(frame: Mapping[str, Any]) -> DeviceEvent:
    """Translate a device frame other than ``hello`` and ``mcp`` into an event."""
    kind = frame.get("type")
    if kind == "listen":
        state = frame.get("state")
        mode = frame.get("mode")
        data: dict[str, Any] = {"mode": mode} if isinstance(mode, str) else {}
        if state == "detect":
            data["text"] = _text(frame.get("text"))
            return DeviceEvent(type=DeviceEventType.WAKE_WORD, data=data)
        if state == "start":
            return DeviceEvent(type=DeviceEventType.LISTENING_STARTED, data=data)
        if state == "stop":
            return DeviceEvent(type=DeviceEventType.LISTENING_STOPPED, data=data)
    elif kind == "tts" and frame.get("state") in ("start", "stop"):
        started = frame.get("state") == "start"
        return DeviceEvent(
            type=DeviceEventType.SPEAKING_STARTED
            if started
            else DeviceEventType.SPEAKING_STOPPED
        )
    elif kind == "abort":
        return DeviceEvent(
            type=DeviceEventType.ABORTED, data={"reason": _text(frame.get("reason"))}
        )
    elif kind == "goodbye":
        # MQTT + UDP: the device closed its audio channel (button, reboot...).
        return DeviceEvent(type=DeviceEventType.CONVERSATION_ENDED)
    message = {key: value for key, value in frame.items() if key != "session_id"}
    if len(dumps(message)) > MAX_EVENT_FRAME:
        # Events end up in states and the recorder: pass on what it was only.
        message = {"type": kind, "truncated": True}
    return DeviceEvent(type=DeviceEventType.MESSAGE, data={"frame": message})
