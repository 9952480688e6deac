"""Firmware images for tests and the simulated device: built, and read back.

Builds what a xiaozhi release zip holds (``merged-binary.bin``: a partition
table at 0x8000 and the application image in its first app slot), laid out
as esptool's ``elf2image`` writes it: an ESP image header (chip id, hash
flag), one flash-mapped segment starting with ``esp_app_desc_t`` (magic,
version, project name), the checksum block and the SHA-256 of all before it.
Reads an image as the firmware's OTA does (the header's magic and chip id;
nothing else).
"""

import hashlib
import io
import struct
from typing import Final
import zipfile

CHIP_IDS: Final = {"esp32": 0, "esp32s3": 9, "esp32c3": 5, "esp32c6": 13, "esp32p4": 18}
APP_OFFSET: Final = 0x20000
APP_SLOT: Final = 0x3F0000

IMAGE_MAGIC: Final = 0xE9
APP_DESC_MAGIC: Final = 0xABCD5432
# esp_image_header_t: magic, segment count, SPI mode, SPI speed and size,
# entry, WP pin, SPI pin drive, chip id, min chip rev, min and max chip rev
# (major * 100 + minor), reserved, hash appended (byte 23).
IMAGE_HEADER: Final = struct.Struct("<BBBBIB3sHBHH4sB")
SEGMENT_HEADER: Final = struct.Struct("<II")
APP_DESC_SIZE: Final = 256
CHECKSUM_SEED: Final = 0xEF  # ESP_ROM_CHECKSUM_INITIAL
# Where ESP-IDF links flash-mapped data (.flash.appdesc first): SOC_DROM_LOW.
DROM: Final = {
    "esp32": 0x3F400000,
    "esp32s3": 0x3C000000,
    "esp32c3": 0x3C000000,
    "esp32c6": 0x42000000,
    "esp32p4": 0x40000000,
}


def app_image(
    *,
    version: str,
    chip: str = "esp32s3",
    project: str = "xiaozhi",
    payload: int = 4096,
    digest: bool = True,
) -> bytes:
    """Return an application image of ``version`` for ``chip``.

    One segment in the flash-mapped data region (where ESP-IDF links
    ``.flash.appdesc``, 0x20 past a 64 KB page so that it maps), holding the
    descriptor and ``payload`` bytes; the checksum block; with ``digest``,
    as every xiaozhi build, the SHA-256 of the image so far.
    """
    desc = bytearray(APP_DESC_SIZE)
    struct.pack_into("<I", desc, 0, APP_DESC_MAGIC)
    desc[0x10 : 0x10 + len(version)] = version.encode()
    desc[0x30 : 0x30 + len(project)] = project.encode()
    segment = bytes(desc) + bytes(range(256)) * (payload // 256)
    header = IMAGE_HEADER.pack(
        IMAGE_MAGIC,
        1,
        2,
        0x4F,
        0x40380000,
        0xEE,
        b"\0\0\0",
        CHIP_IDS[chip],
        0,
        0,
        0xFFFF,
        b"\0\0\0\0",
        1 if digest else 0,
    )
    load_address = DROM[chip] + IMAGE_HEADER.size + SEGMENT_HEADER.size
    image = header + SEGMENT_HEADER.pack(load_address, len(segment)) + segment
    image += bytes(-(len(image) + 1) % 16)
    image += bytes([CHECKSUM_SEED ^ _xor(segment)])
    if digest:
        image += hashlib.sha256(image).digest()
    return image


def partition_table(entries: list[tuple[str, int, int, int, int]]) -> bytes:
    """Return a partition table of (label, type, subtype, offset, size)."""
    table = b"".join(
        b"\xaa\x50"
        + struct.pack("<BBII", kind, subtype, offset, size)
        + label.encode().ljust(16, b"\0")
        + b"\0\0\0\0"
        for label, kind, subtype, offset, size in entries
    )
    return table + b"\xff" * 32


DEFAULT_TABLE: Final = [
    ("nvs", 1, 2, 0x9000, 0x4000),
    ("otadata", 1, 0, 0xD000, 0x2000),
    ("ota_0", 0, 0x10, APP_OFFSET, APP_SLOT),
    ("ota_1", 0, 0x11, APP_OFFSET + APP_SLOT, APP_SLOT),
]


def merged_binary(
    image: bytes, table: list[tuple[str, int, int, int, int]] | None = None
) -> bytes:
    """Return a merged binary: bootloader, partition table, the app image."""
    entries = table if table is not None else DEFAULT_TABLE
    app_offset = next(offset for _l, kind, _s, offset, _z in entries if kind == 0)
    flash = bytearray(b"\xff" * (app_offset + len(image)))
    flash[0x0:4] = b"\xe9\x03\x02\x4f"  # the bootloader starts like an image
    table_bytes = partition_table(entries)
    flash[0x8000 : 0x8000 + len(table_bytes)] = table_bytes
    flash[app_offset : app_offset + len(image)] = image
    return bytes(flash)


def release_zip(merged: bytes, name: str = "merged-binary.bin") -> bytes:
    """Return a release zip holding ``merged``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zipped:
        # A fixed date: the same content makes the same zip.
        zipped.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), merged)
    return out.getvalue()


def read_image(data: bytes, chip: str) -> str:
    """Return the version of an image the device would write; ValueError if not.

    As ``esp_ota_end`` does: the image magic and the chip id; the version
    is read for the "reboot" (the device itself does not check it).
    """
    if len(data) < 0x20 + 0x50 or data[0] != 0xE9:
        raise ValueError("not an image")
    (chip_id,) = struct.unpack_from("<H", data, 12)
    if chip_id != CHIP_IDS.get(chip):
        raise ValueError(f"image for chip {chip_id}, not {chip}")
    return data[0x30:0x50].split(b"\0", 1)[0].decode()


def _xor(data: bytes) -> int:
    """Return the XOR of all bytes of ``data``.

    The firmware XORs 32-bit words and folds the result to a byte; that is
    the XOR of the bytes. Folding a big integer in halves keeps a 4 MB
    image fast.
    """
    value = int.from_bytes(data)
    size = len(data)
    while size > 1:
        half = (size + 1) // 2
        value = (value >> (8 * half)) ^ (value & ((1 << (8 * half)) - 1))
        size = half
    return value
