"""Firmware images for tests and the simulated device: built, and checked.

Builds what a xiaozhi release zip holds (``merged-binary.bin``: a partition
table at 0x8000 and the application image in its first app slot), laid out
as esptool's ``elf2image`` writes it: an ESP image header (chip id, hash
flag), one flash-mapped segment starting with ``esp_app_desc_t`` (magic,
version, project name), the checksum block and the SHA-256 of all before it.

Checks an image as the firmware does before it boots one: ``Ota::Upgrade``
(``main/ota.cc``) writes the download into the next OTA slot and calls
``esp_ota_end``, which runs ``esp_image_verify`` (ESP-IDF
``components/bootloader_support/src/esp_image_format.c``, without secure
boot). Nothing here is laxer than that code.
"""

from collections.abc import Sequence
import hashlib
import io
import struct
from typing import Final, NamedTuple
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
DIGEST_SIZE: Final = 32
MAX_SEGMENTS: Final = 16  # ESP_IMAGE_MAX_SEGMENTS
CHECKSUM_SEED: Final = 0xEF  # ESP_ROM_CHECKSUM_INITIAL
UNSET_REVISIONS: Final = (0, 0xFFFF)  # IS_FIELD_SET in bootloader_common_loader.c
CHIP_REVISION: Final = 2
"""The simulated chip's revision, v0.2 (``chip_info.revision`` of its OTA check)."""
EFUSE_BLOCK_REVISION: Final = 0
"""The simulated chip's eFuse block revision, v0.0."""
DEFAULT_MMU_PAGE: Final = 0x10000
"""``CONFIG_MMU_PAGE_SIZE`` for the simulated 16 MB flash."""

# Where the flash is mapped (SOC_IROM_*, SOC_DROM_*, and the P4's PSRAM:
# ``should_map`` in esp_image_format.c), from ESP-IDF's soc/<chip>/soc.h.
MAPPED: Final = {
    "esp32": ((0x400D0000, 0x40400000), (0x3F400000, 0x3F800000)),
    "esp32s3": ((0x42000000, 0x44000000), (0x3C000000, 0x3E000000)),
    "esp32c3": ((0x42000000, 0x42800000), (0x3C000000, 0x3C800000)),
    "esp32c6": ((0x42000000, 0x43000000),),
    "esp32p4": ((0x40000000, 0x44000000), (0x48000000, 0x4C000000)),
}
# Where ESP-IDF links flash-mapped data (.flash.appdesc first): SOC_DROM_LOW.
DROM: Final = {
    "esp32": 0x3F400000,
    "esp32s3": 0x3C000000,
    "esp32c3": 0x3C000000,
    "esp32c6": 0x42000000,
    "esp32p4": 0x40000000,
}
# Chips whose MMU page size the image's descriptor sets
# (SOC_MMU_PAGE_SIZE_CONFIGURABLE).
MMU_PAGE_IN_DESC: Final = frozenset({"esp32c6"})


class PartitionEntry(NamedTuple):
    """One entry of a partition table."""

    label: str
    type: int
    subtype: int
    offset: int
    size: int

    @property
    def is_ota(self) -> bool:
        """Return True for an OTA application slot (ota_0 ... ota_15)."""
        return self.type == 0 and 0x10 <= self.subtype <= 0x1F


# The firmware's partitions/v2/16m.csv: two OTA slots.
DEFAULT_TABLE: Final = [
    PartitionEntry("nvs", 1, 0x02, 0x9000, 0x4000),
    PartitionEntry("otadata", 1, 0x00, 0xD000, 0x2000),
    PartitionEntry("phy_init", 1, 0x01, 0xF000, 0x1000),
    PartitionEntry("ota_0", 0, 0x10, APP_OFFSET, APP_SLOT),
    PartitionEntry("ota_1", 0, 0x11, APP_OFFSET + APP_SLOT, APP_SLOT),
    PartitionEntry("assets", 1, 0x82, 0x800000, 0x800000),
]
# partitions/v2/4m.csv: a factory app and no OTA slot.
FACTORY_TABLE: Final = [
    PartitionEntry("nvs", 1, 0x02, 0x9000, 0x4000),
    PartitionEntry("otadata", 1, 0x00, 0xD000, 0x2000),
    PartitionEntry("phy_init", 1, 0x01, 0xF000, 0x1000),
    PartitionEntry("factory", 0, 0x00, 0x10000, 0x2F0000),
    PartitionEntry("assets", 1, 0x82, 0x300000, 0x100000),
]


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


def partition_table(entries: Sequence[tuple[str, int, int, int, int]]) -> bytes:
    """Return a partition table of (label, type, subtype, offset, size)."""
    table = b"".join(
        b"\xaa\x50"
        + struct.pack("<BBII", kind, subtype, offset, size)
        + label.encode().ljust(16, b"\0")
        + b"\0\0\0\0"
        for label, kind, subtype, offset, size in entries
    )
    return table + b"\xff" * 32


def merged_binary(
    image: bytes, table: Sequence[tuple[str, int, int, int, int]] | None = None
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


def next_ota_slot(
    table: Sequence[PartitionEntry], running: str | None
) -> PartitionEntry:
    """Return the slot an upgrade writes; ValueError where the firmware has none.

    As ``esp_ota_get_next_update_partition`` (ESP-IDF
    ``components/app_update/esp_ota_ops.c``) picks it: the OTA slot after
    the running one, else the first. ``Ota::Upgrade`` fails before its GET
    when there is none, and ``esp_ota_begin`` refuses the running slot.
    """
    slots = sorted((entry for entry in table if entry.is_ota), key=lambda e: e.subtype)
    if not slots:
        raise ValueError("no OTA partition to update")
    labels = [slot.label for slot in slots]
    after = labels.index(running) + 1 if running in labels else len(slots)
    slot = slots[after] if after < len(slots) else slots[0]
    if slot.label == running:
        raise ValueError(f"{slot.label} is the running partition")
    return slot


def read_image(data: bytes, chip: str) -> str:
    """Return the version of an image the device would boot; ValueError if not.

    What ``esp_image_verify`` checks for an app image (ESP-IDF
    ``components/bootloader_support/src/esp_image_format.c``, no secure
    boot), in its order: the header (magic, chip id and revisions, segment
    count), each segment (its header, length, flash mapping, and for the
    first the descriptor's eFuse block revisions), the checksum, the
    SHA-256. That it fits its partition is the download's to check: it
    stops at the slot's end, and an image here holds all it describes. The
    version is read for the reboot (the device checks none).

    Stricter in two ways: past the written bytes the device would read
    erased flash (0xFF), which could by chance make a checksum; here an image
    must hold all it describes. A count of 0 segments passes ESP-IDF's
    header check, but such an image has no descriptor to boot.
    """
    if len(data) < IMAGE_HEADER.size or data[0] != IMAGE_MAGIC:
        raise ValueError("invalid magic byte")
    (
        _magic,
        count,
        *_spi,
        chip_id,
        _min_rev,
        min_rev_full,
        max_rev_full,
        _reserved,
        hash_appended,
    ) = IMAGE_HEADER.unpack_from(data)
    # bootloader_common_check_chip_validity, bootloader_common_loader.c.
    if chip_id != CHIP_IDS.get(chip):
        raise ValueError(f"image for chip {chip_id}, not {chip}")
    # The chip's minimum is checked even when unset: 0 passes, 0xFFFF not.
    _check_revision("chip", min_rev_full, max_rev_full, CHIP_REVISION, min_set=True)
    if not 0 < count <= MAX_SEGMENTS:
        raise ValueError(f"segment count {count}")
    checksum = CHECKSUM_SEED
    offset = IMAGE_HEADER.size
    for index in range(count):
        if offset + SEGMENT_HEADER.size > len(data):
            raise ValueError(f"cut short in segment {index}'s header")
        load_address, length = SEGMENT_HEADER.unpack_from(data, offset)
        offset += SEGMENT_HEADER.size
        if offset + length > len(data):
            raise ValueError(f"cut short in segment {index}")
        segment = data[offset : offset + length]
        _check_segment(index, load_address, offset, segment, chip=chip)
        checksum ^= _xor(segment)
        offset += length
    # process_checksum: the last byte of the 16-aligned block after them.
    block_end = offset + 1 + (-(offset + 1) % 16)
    if block_end > len(data):
        raise ValueError("cut short in the checksum block")
    if (stored := data[block_end - 1]) != checksum:
        raise ValueError(
            f"checksum failed: calculated {checksum:#04x}, read {stored:#04x}"
        )
    # process_appended_hash_and_sig and verify_simple_hash: any non-zero flag.
    if hash_appended:
        digest = data[block_end : block_end + DIGEST_SIZE]
        if len(digest) < DIGEST_SIZE:
            raise ValueError("cut short in the SHA-256")
        if hashlib.sha256(data[:block_end]).digest() != digest:
            raise ValueError("image hash failed: the image is corrupt")
    return data[0x30:0x50].split(b"\0", 1)[0].decode()


def _check_segment(
    index: int, load_address: int, offset: int, segment: bytes, *, chip: str
) -> None:
    """Refuse a segment as ``verify_segment_header`` and ``process_segment`` do.

    Its length is a multiple of 4 (its 16 MB limit is out of reach in a slot
    of at most 16 MB); the first holds a whole descriptor. A flash-mapped
    segment sits in the image where it maps: its offset and load address
    agree modulo the MMU page (app partitions start on 64 KB boundaries, so
    the offset in the image is the one in flash).
    """
    length = len(segment)
    if length % 4:
        raise ValueError(f"segment {index}: invalid length {length:#x}")
    if index == 0 and length < APP_DESC_SIZE:
        raise ValueError("segment 0 is too short for the app description")
    page = DEFAULT_MMU_PAGE
    if index == 0 and chip in MMU_PAGE_IN_DESC:
        (magic,) = struct.unpack_from("<I", segment)
        if magic != APP_DESC_MAGIC:
            raise ValueError("no app description in segment 0")
        if 13 <= segment[0xB4] <= 18:  # MMU_PAGE_SIZE_MIN ... MAX, as log2
            page = 1 << segment[0xB4]
    mapped = any(low <= load_address < high for low, high in MAPPED[chip])
    if mapped and offset % page != load_address % page:
        raise ValueError(
            f"segment {index} load address {load_address:#010x} "
            f"does not match data {offset:#x}"
        )
    # process_segment_data: the descriptor's eFuse block revisions.
    if index == 0 and chip != "esp32":
        minimum, maximum = struct.unpack_from("<HH", segment, 0xB0)
        _check_revision("eFuse block", minimum, maximum, EFUSE_BLOCK_REVISION)


def _check_revision(
    what: str, minimum: int, maximum: int, revision: int, *, min_set: bool = False
) -> None:
    """Refuse an image whose revision range leaves out the chip's.

    A field of 0 or 0xFFFF is unset (``IS_FIELD_SET``); ``min_set`` checks
    the minimum all the same.
    """
    if (min_set or minimum not in UNSET_REVISIONS) and revision < minimum:
        raise ValueError(f"needs {what} revision >= {_v(minimum)}, not {_v(revision)}")
    if maximum not in UNSET_REVISIONS and revision > maximum:
        raise ValueError(f"needs {what} revision <= {_v(maximum)}, not {_v(revision)}")


def _v(revision: int) -> str:
    return f"v{revision // 100}.{revision % 100}"


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
