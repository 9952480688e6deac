"""Device frames become typed events; events say what the device does."""

from typing import Any

import pytest

from aioxiaozhi import Activity, DeviceEvent, DeviceEventType
from aioxiaozhi.events import (
    event_from_frame,
    notification_event,
)


@pytest.mark.parametrize(
    ("frame", "event_type", "data", "activity"),
    [
        (
            {"type": "listen", "state": "detect", "text": "你好小智"},
            DeviceEventType.WAKE_WORD,
            {"text": "你好小智"},
            Activity.LISTENING,
        ),
        (
            {"type": "listen", "state": "detect"},
            DeviceEventType.WAKE_WORD,
            {"text": ""},
            Activity.LISTENING,
        ),
        (
            {"type": "listen", "state": "start", "mode": "manual"},
            DeviceEventType.LISTENING_STARTED,
            {"mode": "manual"},
            Activity.LISTENING,
        ),
        (
            {"type": "listen", "state": "stop"},
            DeviceEventType.LISTENING_STOPPED,
            {},
            Activity.IDLE,
        ),
        (
            {"type": "tts", "state": "start"},
            DeviceEventType.SPEAKING_STARTED,
            {},
            Activity.SPEAKING,
        ),
        (
            {"type": "tts", "state": "stop"},
            DeviceEventType.SPEAKING_STOPPED,
            {},
            Activity.IDLE,
        ),
        (
            {"type": "abort", "reason": "wake_word_detected"},
            DeviceEventType.ABORTED,
            {"reason": "wake_word_detected"},
            Activity.IDLE,
        ),
        ({"type": "abort"}, DeviceEventType.ABORTED, {"reason": ""}, Activity.IDLE),
        (
            {"session_id": "s", "type": "listen", "state": "loud"},
            DeviceEventType.MESSAGE,
            {"frame": {"type": "listen", "state": "loud"}},
            None,
        ),
        (
            {"type": "tts", "state": "sentence_start", "text": "hi"},
            DeviceEventType.MESSAGE,
            {"frame": {"type": "tts", "state": "sentence_start", "text": "hi"}},
            None,
        ),
        (
            {"type": "custom", "payload": "x" * 5000},
            DeviceEventType.MESSAGE,
            {"frame": {"type": "custom", "truncated": True}},
            None,
        ),
    ],
)
def test_event_from_frame(
    frame: dict[str, Any],
    event_type: DeviceEventType,
    data: dict[str, Any],
    activity: Activity | None,
) -> None:
    event = event_from_frame(frame)
    assert event == DeviceEvent(type=event_type, data=data)
    assert event.activity is activity
    assert not event.is_state_change


@pytest.mark.parametrize(
    ("params", "activity"),
    [
        ({"newState": "speaking", "oldState": "idle"}, Activity.SPEAKING),
        ({"newState": "fatal_error"}, Activity.ERROR),
        ({"newState": "warming_up"}, None),
        ({"newState": 3}, None),
        ({}, None),
    ],
)
def test_state_changed_notification(
    params: dict[str, Any], activity: Activity | None
) -> None:
    event = notification_event("notifications/state_changed", params)
    assert event.is_state_change
    assert event.activity is activity


def test_other_notification() -> None:
    event = notification_event("notifications/battery_low", {"level": 5})
    assert event.type is DeviceEventType.NOTIFICATION
    assert not event.is_state_change
    assert event.activity is None
