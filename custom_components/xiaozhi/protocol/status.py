"""The device status (``self.get_device_status``) as a typed model.

The firmware answers a JSON document in which every section and key is
optional::

    {"audio_speaker": {"volume": 70},
     "screen": {"brightness": 80, "theme": "light"},
     "battery": {"level": 85, "charging": false},
     "network": {"type": "wifi", "ssid": "home", "signal": "strong"},
     "chip": {"temperature": 41.5}}

:class:`DeviceStatus` reads it once; the document itself is kept in ``raw``
(for storage and diagnostics). A :class:`Setting` ties a value to the tool
that changes it, so a confirmed change is written back at the same path.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
import math
from typing import Any, Final, Self

from .firmware import BRIGHTNESS_TOOL, THEME_TOOL, VOLUME_TOOL

type StatusPath = tuple[str, ...]

VOLUME_PATH: Final[StatusPath] = ("audio_speaker", "volume")
BRIGHTNESS_PATH: Final[StatusPath] = ("screen", "brightness")
THEME_PATH: Final[StatusPath] = ("screen", "theme")
BATTERY_LEVEL_PATH: Final[StatusPath] = ("battery", "level")
CHARGING_PATH: Final[StatusPath] = ("battery", "charging")
NETWORK_TYPE_PATH: Final[StatusPath] = ("network", "type")
SSID_PATH: Final[StatusPath] = ("network", "ssid")
SIGNAL_PATH: Final[StatusPath] = ("network", "signal")
TEMPERATURE_PATH: Final[StatusPath] = ("chip", "temperature")

SIGNALS: Final = ("strong", "medium", "weak")
THEMES: Final = ("light", "dark")


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """A status value that a tool with one argument sets."""

    tool: str
    argument: str
    path: StatusPath


VOLUME: Final = Setting(tool=VOLUME_TOOL, argument="volume", path=VOLUME_PATH)
BRIGHTNESS: Final = Setting(
    tool=BRIGHTNESS_TOOL, argument="brightness", path=BRIGHTNESS_PATH
)
THEME: Final = Setting(tool=THEME_TOOL, argument="theme", path=THEME_PATH)


def value_at(document: Mapping[str, Any], path: StatusPath) -> Any:
    """Return the value at ``path`` in a status document, or None."""
    node: Any = document
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number == int(number) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _choice(value: Any, options: tuple[str, ...]) -> str | None:
    return value if value in options else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceStatus:
    """What the device reported about itself; None where it said nothing."""

    volume: int | None = None
    brightness: int | None = None
    theme: str | None = None
    battery_level: float | None = None
    charging: bool | None = None
    network_type: str | None = None
    ssid: str | None = None
    signal: str | None = None
    temperature: float | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Self:
        """Read a status document; values of the wrong type are left out."""
        return cls(
            volume=_integer(value_at(document, VOLUME_PATH)),
            brightness=_integer(value_at(document, BRIGHTNESS_PATH)),
            theme=_choice(value_at(document, THEME_PATH), THEMES),
            battery_level=_number(value_at(document, BATTERY_LEVEL_PATH)),
            charging=_flag(value_at(document, CHARGING_PATH)),
            network_type=_text(value_at(document, NETWORK_TYPE_PATH)),
            ssid=_text(value_at(document, SSID_PATH)),
            signal=_choice(value_at(document, SIGNAL_PATH), SIGNALS),
            temperature=_number(value_at(document, TEMPERATURE_PATH)),
            raw=document,
        )

    def with_value(self, path: StatusPath, value: Any) -> Self:
        """Return the status with ``value`` at ``path`` (a confirmed change)."""
        document = dict(self.raw)
        node = document
        for key in path[:-1]:
            child = node.get(key)
            # The device reported this section in another shape (or not at
            # all): the value it just confirmed replaces it.
            child = dict(child) if isinstance(child, Mapping) else {}
            node[key] = child
            node = child
        node[path[-1]] = value
        return self.from_json(document)
