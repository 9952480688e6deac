"""Firmware images: what a release holds, checked before a device gets it.

A xiaozhi release carries one zip per board holding ``merged-binary.bin``:
the whole flash (bootloader, partition table at 0x8000, the application).
Over the air a device takes the application image alone, so it is cut out
through the partition table, as the firmware's ``scripts/versions.py`` does.
The device itself checks only the image's integrity and chip
(``esp_ota_end``): the board, the project and the version are checked here.

Formats (ESP-IDF): partition entries of 32 bytes (magic ``AA 50``, type,
subtype, offset, size, label); the image header of 24 bytes
(``esp_image_header_t``: magic 0xE9, segment count, chip id at 12,
hash-appended flag at 23); segment headers of 8 bytes (load address,
length); ``esp_app_desc_t`` right after the first segment header (magic
0xABCD5432, version, project name). After the segments comes a 16-byte
aligned block ending in the checksum and, when the flag is set, the image's
SHA-256: both are part of the image, and the device refuses it without them.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
import io
import re
import struct
from typing import Any, Final, NamedTuple
import zipfile

PARTITION_TABLE_OFFSET: Final = 0x8000
PARTITION_TABLE_SIZE: Final = 0xC00
PARTITION_MAGIC: Final = b"\xaa\x50"
TYPE_APP: Final = 0x00
SUBTYPE_FACTORY: Final = 0x00
SUBTYPE_OTA_0: Final = 0x10
SUBTYPE_OTA_15: Final = 0x1F
IMAGE_MAGIC: Final = 0xE9
APP_DESC_MAGIC: Final = 0xABCD5432
IMAGE_HEADER: Final = struct.Struct("<BBBBIB3sHBHH4sB")
SEGMENT_HEADER: Final = struct.Struct("<II")
DIGEST_SIZE: Final = 32
APP_DESC_OFFSET: Final = IMAGE_HEADER.size + SEGMENT_HEADER.size
MAX_SEGMENTS: Final = 16
MERGED_BINARY: Final = "merged-binary.bin"
# A release zip or image larger than any ESP32 flash is not one.
MAX_FIRMWARE_BYTES: Final = 32 * 1024 * 1024
PROJECT: Final = "xiaozhi"
# esptool's image chip ids, by the names devices report (CONFIG_IDF_TARGET).
CHIP_IDS: Final = {
    "esp32": 0,
    "esp32s2": 2,
    "esp32c3": 5,
    "esp32s3": 9,
    "esp32c2": 12,
    "esp32c6": 13,
    "esp32h2": 16,
    "esp32p4": 18,
    "esp32c61": 20,
    "esp32c5": 23,
}
_PLAIN_VERSION: Final = re.compile(r"^\d{1,9}(\.\d{1,9}){0,3}$")


class ImageHeader(NamedTuple):
    """The 24-byte header of an ESP image (``esp_image_header_t``)."""

    magic: int
    segment_count: int
    spi_mode: int
    spi_speed_size: int
    entry_addr: int
    wp_pin: int
    spi_pin_drv: bytes
    chip_id: int
    min_chip_rev: int
    min_chip_rev_full: int
    max_chip_rev_full: int
    reserved: bytes
    hash_appended: int
    """Byte 23: a SHA-256 of the image follows its checksum block."""

    @classmethod
    def read(cls, data: bytes) -> ImageHeader:
        """Read the header at the start of ``data``."""
        return cls._make(IMAGE_HEADER.unpack_from(data))


class Refusal(StrEnum):
    """Why an image is not sent (translation keys)."""

    NOT_A_ZIP = "firmware_not_a_zip"
    NO_MERGED_BINARY = "firmware_no_merged_binary"
    NO_PARTITION_TABLE = "firmware_no_partition_table"
    NO_APP = "firmware_no_app"
    NOT_AN_IMAGE = "firmware_not_an_image"
    NOT_XIAOZHI = "firmware_not_xiaozhi"
    WRONG_CHIP = "firmware_wrong_chip"
    WRONG_VERSION = "firmware_wrong_version"
    TOO_LARGE = "firmware_too_large"
    NO_OTA_SLOT = "firmware_no_ota_slot"


class FirmwareRefusedError(Exception):
    """The image must not reach the device; ``reason`` says why."""

    def __init__(self, reason: Refusal, detail: str = "") -> None:
        """Refuse for ``reason``."""
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Partition:
    """One entry of a partition table."""

    label: str
    type: int
    subtype: int
    offset: int
    size: int

    @property
    def is_app(self) -> bool:
        """Return True for an application slot."""
        return self.type == TYPE_APP

    @property
    def is_ota(self) -> bool:
        """Return True for an OTA application slot (ota_0 ... ota_15)."""
        return self.is_app and SUBTYPE_OTA_0 <= self.subtype <= SUBTYPE_OTA_15


@dataclass(frozen=True, slots=True)
class AppImage:
    """An application image and what its header and descriptor say."""

    data: bytes
    chip_id: int
    version: str
    project: str

    @property
    def chip(self) -> str | None:
        """Return the chip's name, if known."""
        return next(
            (name for name, cid in CHIP_IDS.items() if cid == self.chip_id), None
        )


@dataclass(frozen=True, slots=True)
class DeviceHardware:
    """What a device's OTA check says about its chip, board and flash."""

    chip: str | None
    board: str | None
    manufacturer: str | None
    slots: tuple[Partition, ...]

    @classmethod
    def from_system_info(cls, info: Mapping[str, Any]) -> DeviceHardware:
        """Read the OTA check's JSON; what is missing or malformed is None."""
        board = info.get("board")
        board = board if isinstance(board, dict) else {}
        table = info.get("partition_table")
        slots = []
        for item in table if isinstance(table, list) else []:
            if not isinstance(item, dict):
                continue
            label = item.get("label")
            values = [item.get(key) for key in ("type", "subtype", "address", "size")]
            numbers = [value for value in values if isinstance(value, int)]
            if isinstance(label, str) and len(numbers) == len(values):
                slots.append(Partition(label[:16], *numbers))
        return cls(
            chip=_short(info.get("chip_model_name")),
            board=_short(board.get("name")),
            manufacturer=_short(board.get("manufacturer")),
            slots=tuple(slots[:32]),
        )

    def as_dict(self) -> dict[str, Any]:
        """Return what is stored."""
        return {
            "chip": self.chip,
            "board": self.board,
            "manufacturer": self.manufacturer,
            "slots": [
                [p.label, p.type, p.subtype, p.offset, p.size] for p in self.slots
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceHardware:
        """Read what was stored."""
        return cls(
            chip=data.get("chip"),
            board=data.get("board"),
            manufacturer=data.get("manufacturer"),
            slots=tuple(Partition(*item) for item in data.get("slots") or []),
        )


def _short(value: Any) -> str | None:
    """Return a short identifier string, or None."""
    if isinstance(value, str) and 0 < len(value) <= 64 and value.isprintable():
        return value
    return None


def is_plain_version(version: str) -> bool:
    """Return True for a version of plain numeric segments (safe to offer at boot).

    The firmware compares versions with ``std::stoi`` per segment: anything
    else (``v2``, ``rc1``, an empty segment) makes it abort at every boot.
    """
    return bool(_PLAIN_VERSION.match(version))


def version_key(version: str) -> tuple[int, ...] | None:
    """Return a plain version as a comparable tuple; None for anything else."""
    if not is_plain_version(version):
        return None
    return tuple(int(part) for part in version.split("."))


def parse_partition_table(data: bytes) -> list[Partition]:
    """Return the entries of a partition table (stops at its end or MD5 entry)."""
    partitions: list[Partition] = []
    for offset in range(0, min(len(data), PARTITION_TABLE_SIZE) - 31, 32):
        entry = data[offset : offset + 32]
        if entry[:2] != PARTITION_MAGIC:
            break
        type_, subtype, start, size = struct.unpack_from("<BBII", entry, 2)
        label = entry[12:28].split(b"\0", 1)[0].decode("ascii", "replace")
        partitions.append(Partition(label, type_, subtype, start, size))
    return partitions


def merged_binary(archive: bytes) -> bytes:
    """Return ``merged-binary.bin`` of a release zip."""
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
            try:
                info = zipped.getinfo(MERGED_BINARY)
            except KeyError:
                raise FirmwareRefusedError(Refusal.NO_MERGED_BINARY) from None
            if info.file_size > MAX_FIRMWARE_BYTES:
                raise FirmwareRefusedError(Refusal.TOO_LARGE, f"{info.file_size} bytes")
            return zipped.read(info)
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise FirmwareRefusedError(Refusal.NOT_A_ZIP, str(err)) from None


def app_from_merged(merged: bytes) -> AppImage:
    """Cut the application image out of a merged binary and read it.

    The first application partition is the one ``scripts/versions.py``
    takes (``ota_0`` in tables with OTA slots).
    """
    table = parse_partition_table(
        merged[PARTITION_TABLE_OFFSET : PARTITION_TABLE_OFFSET + PARTITION_TABLE_SIZE]
    )
    if not table:
        raise FirmwareRefusedError(Refusal.NO_PARTITION_TABLE)
    app = next((part for part in table if part.is_app), None)
    if app is None or app.offset >= len(merged):
        raise FirmwareRefusedError(Refusal.NO_APP)
    return read_app_image(merged[app.offset : app.offset + app.size])


def read_firmware_file(data: bytes) -> AppImage:
    """Read a firmware file of any of its shapes: release zip, merged binary, app.

    A merged binary starts with the bootloader and has its partition table
    at 0x8000; an application image has its descriptor right after its
    first segment header.
    """
    if data[:2] == b"PK":
        data = merged_binary(data)
    table = data[PARTITION_TABLE_OFFSET : PARTITION_TABLE_OFFSET + 2]
    if table == PARTITION_MAGIC:
        return app_from_merged(data)
    return read_app_image(data)


def read_app_image(data: bytes) -> AppImage:
    """Read an application image, whole: its segments, checksum block and digest.

    What follows it (the 0xFF of the rest of its partition) is cut off.
    """
    if len(data) < APP_DESC_OFFSET + 0x50:
        raise FirmwareRefusedError(Refusal.NOT_AN_IMAGE, "too short")
    header = ImageHeader.read(data)
    if header.magic != IMAGE_MAGIC or not 0 < header.segment_count <= MAX_SEGMENTS:
        raise FirmwareRefusedError(Refusal.NOT_AN_IMAGE, "no image header")
    end = IMAGE_HEADER.size
    for _ in range(header.segment_count):
        if end + SEGMENT_HEADER.size > len(data):
            raise FirmwareRefusedError(Refusal.NOT_AN_IMAGE, "cut short")
        _address, length = SEGMENT_HEADER.unpack_from(data, end)
        end += SEGMENT_HEADER.size + length
    end += 1  # the checksum byte, then padding to 16
    end += -end % 16
    # esptool writes 0 or 1; ESP-IDF reads any other value as set too.
    if header.hash_appended:
        end += DIGEST_SIZE
    if end > len(data):
        raise FirmwareRefusedError(Refusal.NOT_AN_IMAGE, "cut short")
    (desc_magic,) = struct.unpack_from("<I", data, APP_DESC_OFFSET)
    if desc_magic != APP_DESC_MAGIC:
        raise FirmwareRefusedError(Refusal.NOT_XIAOZHI, "no application descriptor")
    version = _text(data, APP_DESC_OFFSET + 0x10, 32)
    project = _text(data, APP_DESC_OFFSET + 0x30, 32)
    return AppImage(data[:end], header.chip_id, version, project)


def _text(data: bytes, offset: int, size: int) -> str:
    return data[offset : offset + size].split(b"\0", 1)[0].decode("utf-8", "replace")


def check_image(
    image: AppImage,
    *,
    version: str,
    chip: str | None,
    slots: list[Partition],
) -> None:
    """Refuse an image that is not this release's xiaozhi for this device.

    ``slots`` are the device's OTA slots (from its OTA check); with none it
    cannot update over the air.
    """
    if image.project != PROJECT:
        raise FirmwareRefusedError(Refusal.NOT_XIAOZHI, image.project or "no project")
    if chip is None or CHIP_IDS.get(chip) != image.chip_id:
        raise FirmwareRefusedError(
            Refusal.WRONG_CHIP, f"{image.chip or image.chip_id} for {chip}"
        )
    if image.version != version:
        raise FirmwareRefusedError(
            Refusal.WRONG_VERSION, f"{image.version} not {version}"
        )
    ota = [slot for slot in slots if slot.is_ota]
    if not ota:
        raise FirmwareRefusedError(Refusal.NO_OTA_SLOT)
    smallest = min(slot.size for slot in ota)
    if len(image.data) > smallest:
        raise FirmwareRefusedError(
            Refusal.TOO_LARGE, f"{len(image.data)} bytes for a {smallest}-byte slot"
        )
