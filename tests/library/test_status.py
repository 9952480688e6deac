"""The device status read into a typed model, and confirmed changes written back."""

from typing import Any

import pytest

from aioxiaozhi import DeviceStatus
from aioxiaozhi.status import THEME_PATH, VOLUME_PATH

FIRMWARE_STATUS = {
    "audio_speaker": {"volume": 70},
    "screen": {"brightness": 80, "theme": "light"},
    "battery": {"level": 85, "charging": False},
    "network": {"type": "wifi", "ssid": "home", "signal": "strong"},
    "chip": {"temperature": 41.5},
}


def test_firmware_status() -> None:
    status = DeviceStatus.from_json(FIRMWARE_STATUS)
    assert status == DeviceStatus(
        volume=70,
        brightness=80,
        theme="light",
        battery_level=85,
        charging=False,
        network_type="wifi",
        ssid="home",
        signal="strong",
        temperature=41.5,
    )
    assert status.raw is FIRMWARE_STATUS


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"audio_speaker": None, "screen": [], "battery": "full"},
        {
            "audio_speaker": {"volume": "70"},
            "screen": {"brightness": True, "theme": "purple"},
            "battery": {"level": float("nan"), "charging": "no"},
            "network": {"type": 1, "ssid": None, "signal": "excellent"},
            "chip": {"temperature": float("inf")},
        },
    ],
)
def test_odd_shapes_read_as_unknown(document: dict[str, Any]) -> None:
    assert DeviceStatus.from_json(document) == DeviceStatus()


def test_fractional_volume_is_not_an_integer() -> None:
    assert DeviceStatus.from_json({"audio_speaker": {"volume": 70.5}}).volume is None
    assert DeviceStatus.from_json({"audio_speaker": {"volume": 70.0}}).volume == 70


def test_with_value_writes_the_path_back() -> None:
    status = DeviceStatus.from_json(FIRMWARE_STATUS)
    changed = status.with_value(VOLUME_PATH, 30)
    assert changed.volume == 30
    assert changed.raw["audio_speaker"] == {"volume": 30}
    assert changed.raw["screen"] == FIRMWARE_STATUS["screen"]
    # The original document is left alone.
    assert FIRMWARE_STATUS["audio_speaker"] == {"volume": 70}


def test_with_value_replaces_a_section_of_another_shape() -> None:
    status = DeviceStatus.from_json({"screen": "off"})
    assert status.with_value(THEME_PATH, "dark").raw == {"screen": {"theme": "dark"}}
