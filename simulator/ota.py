"""The OTA / provisioning exchange, as the firmware's ota.cc performs it.

At boot a device POSTs its system information to its OTA URL. The answer may
carry ``activation`` (a code to show and a challenge to confirm by polling
``<ota url>/activate``), ``websocket`` (stored key by key), ``mqtt`` (takes
precedence over ``websocket``), ``server_time`` and ``firmware``.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
import hashlib
import hmac
import re
from typing import TYPE_CHECKING, Any

from .tools import dumps

if TYPE_CHECKING:
    from .config import DeviceConfig

FLASH_SIZE = 16 * 1024 * 1024


class OtaError(Exception):
    """The OTA check failed (network error, non-200 status, bad JSON)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        """Keep the HTTP status when there was one."""
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, kw_only=True)
class Activation:
    """The ``activation`` section of an OTA answer."""

    code: str | None = None
    message: str | None = None
    challenge: str | None = None
    timeout_ms: int | None = None


@dataclass(frozen=True, kw_only=True)
class FirmwareOffer:
    """The ``firmware`` section of an OTA answer."""

    version: str
    url: str
    force: bool = False
    newer: bool = False


@dataclass(frozen=True, kw_only=True)
class OtaResult:
    """What the device took from one OTA answer."""

    raw: Mapping[str, Any] = field(default_factory=dict)
    activation: Activation | None = None
    websocket: Mapping[str, str | int] | None = None
    mqtt: Mapping[str, str | int] | None = None
    server_time: Mapping[str, Any] | None = None
    firmware: FirmwareOffer | None = None

    @property
    def needs_activation(self) -> bool:
        """Return whether the answer holds an activation code or challenge."""
        return self.activation is not None and (
            self.activation.code is not None or self.activation.challenge is not None
        )


def system_info(
    config: DeviceConfig, *, ssid: str = "home", rssi: int = -55
) -> dict[str, Any]:
    """Return the system-information JSON the firmware posts to its OTA URL.

    The same document answers the ``self.get_system_info`` tool.
    """
    elf_sha256 = hashlib.sha256(
        f"{config.board}/{config.firmware}".encode()
    ).hexdigest()
    return {
        "version": 2,
        "language": config.language,
        "flash_size": FLASH_SIZE,
        "minimum_free_heap_size": 8 * 1024 * 1024 // 100,
        "mac_address": config.mac,
        "uuid": config.client_id,
        "chip_model_name": config.chip,
        "chip_info": {"model": 9, "cores": 2, "revision": 2, "features": 18},
        "application": {
            "name": "xiaozhi",
            "version": config.firmware,
            "compile_time": "2025-01-01T00:00:00Z",
            "idf_version": "v5.4.1",
            "elf_sha256": elf_sha256,
        },
        "partition_table": [
            {
                "label": entry.label,
                "type": entry.type,
                "subtype": entry.subtype,
                "address": entry.offset,
                "size": entry.size,
            }
            for entry in config.partition_table
        ],
        "ota": {"label": config.running_label},
        "board": {
            "type": config.board,
            "name": config.board,
            **({"manufacturer": config.manufacturer} if config.manufacturer else {}),
            "ssid": ssid,
            "rssi": rssi,
            "channel": 6,
            "ip": "192.168.1.50",
            "mac": config.mac,
        },
    }


def ota_headers(config: DeviceConfig) -> dict[str, str]:
    """Return the headers of the OTA check and of the activation polls."""
    headers = {
        "Activation-Version": "2" if config.serial_number else "1",
        "Device-Id": config.mac,
        "Client-Id": config.client_id,
    }
    if config.serial_number:
        headers["Serial-Number"] = config.serial_number
    headers["User-Agent"] = config.user_agent
    headers["Accept-Language"] = config.language
    headers["Content-Type"] = "application/json"
    return headers


def activate_url(ota_url: str) -> str:
    """Return ``<ota url>/activate`` without doubling the slash."""
    return ota_url + ("activate" if ota_url.endswith("/") else "/activate")


def activation_payload(config: DeviceConfig, challenge: str) -> str:
    """Return the activation body: ``{}`` unless the device has a serial number."""
    if not config.serial_number:
        return "{}"
    digest = hmac.new(
        config.hmac_key.encode(), challenge.encode(), hashlib.sha256
    ).hexdigest()
    return dumps(
        {
            "algorithm": "hmac-sha256",
            "serial_number": config.serial_number,
            "challenge": challenge,
            "hmac": digest,
        }
    )


def _version_numbers(version: str) -> list[int]:
    """Split a dotted version, reading each part's leading digits."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\s*[+-]?\d+", part)
        numbers.append(int(match.group()) if match else 0)
    return numbers


def is_newer_version(current: str, offered: str) -> bool:
    """Compare dotted versions the way the firmware does."""
    now = _version_numbers(current)
    new = _version_numbers(offered)
    for mine, theirs in zip(now, new, strict=False):
        if theirs != mine:
            return theirs > mine
    return len(new) > len(now)


def _scalars(section: Mapping[str, Any]) -> dict[str, str | int]:
    """Keep the string and number items of a section, as the firmware stores."""
    kept: dict[str, str | int] = {}
    for key, value in section.items():
        if isinstance(value, str):
            kept[key] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            kept[key] = int(value)
    return kept


def parse_ota_response(data: object, current_version: str) -> OtaResult:
    """Interpret an OTA answer; raises OtaError when it is not a JSON object."""
    if not isinstance(data, Mapping):
        raise OtaError("OTA answer is not a JSON object")

    activation = None
    section = data.get("activation")
    if isinstance(section, Mapping):
        code = section.get("code")
        message = section.get("message")
        challenge = section.get("challenge")
        timeout_ms = section.get("timeout_ms")
        activation = Activation(
            code=code if isinstance(code, str) else None,
            message=message if isinstance(message, str) else None,
            challenge=challenge if isinstance(challenge, str) else None,
            timeout_ms=int(timeout_ms)
            if isinstance(timeout_ms, int | float) and not isinstance(timeout_ms, bool)
            else None,
        )

    mqtt = data.get("mqtt")
    websocket = data.get("websocket")
    server_time = data.get("server_time")
    firmware = None
    section = data.get("firmware")
    if isinstance(section, Mapping):
        version = section.get("version")
        url = section.get("url")
        if isinstance(version, str) and isinstance(url, str):
            force_item = section.get("force")
            force = (
                isinstance(force_item, int | float)
                and not isinstance(force_item, bool)
                and int(force_item) == 1
            )
            firmware = FirmwareOffer(
                version=version,
                url=url,
                force=force,
                newer=force or is_newer_version(current_version, version),
            )

    return OtaResult(
        raw=dict(data),
        activation=activation,
        websocket=_scalars(websocket) if isinstance(websocket, Mapping) else None,
        mqtt=_scalars(mqtt) if isinstance(mqtt, Mapping) else None,
        server_time=dict(server_time)
        if isinstance(server_time, Mapping)
        and isinstance(server_time.get("timestamp"), int | float)
        else None,
        firmware=firmware,
    )
