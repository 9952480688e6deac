"""Firmware upgrades on the simulated device: the slot it writes, the image it takes.

The checks are ESP-IDF's ``esp_image_verify`` (``esp_image_format.c``), run
by ``esp_ota_end`` at the end of the firmware's ``Ota::Upgrade``.
"""

from collections.abc import Callable
import hashlib
import struct

import pytest

from aioxiaozhi.testing.firmware_image import (
    APP_SLOT,
    CHIP_IDS,
    DEFAULT_TABLE,
    FACTORY_TABLE,
    PartitionEntry,
    app_image,
    next_ota_slot,
    read_image,
)

from .conftest import DeviceFactory, FakeServer

SEGMENT = 0x18  # the first segment header, after the 24-byte image header
DESC = 0x20  # its data: the esp_app_desc_t


def reseal(image: bytes | bytearray) -> bytes:
    """Return ``image`` with its checksum and digest made right for its bytes."""
    data = bytearray(image)
    offset = 24
    checksum = 0xEF
    for _ in range(data[1]):
        _address, length = struct.unpack_from("<II", data, offset)
        offset += 8
        for byte in data[offset : offset + length]:
            checksum ^= byte
        offset += length
    end = offset + 1 + (-(offset + 1) % 16)
    data[end - 1] = checksum
    digest = hashlib.sha256(data[:end]).digest() if data[23] else b""
    return bytes(data[:end]) + digest


type Change = Callable[[bytearray], None]


def edited(*changes: Change, chip: str = "esp32s3", payload: int = 4096) -> bytes:
    """Return a built image changed, its checksum and digest right."""
    data = bytearray(app_image(version="2.6.0", chip=chip, payload=payload))
    for change in changes:
        change(data)
    return reseal(data)


def set_u8(offset: int, value: int) -> Change:
    return lambda data: data.__setitem__(offset, value)


def set_u16(offset: int, value: int) -> Change:
    return lambda data: struct.pack_into("<H", data, offset, value)


def set_u32(offset: int, value: int) -> Change:
    return lambda data: struct.pack_into("<I", data, offset, value)


@pytest.mark.parametrize("chip", sorted(CHIP_IDS))
@pytest.mark.parametrize("digest", [True, False], ids=["sha256", "no-sha256"])
def test_every_built_image_passes_the_firmware_checks(chip: str, digest: bool) -> None:
    image = app_image(version="2.6.0", chip=chip, digest=digest)
    assert image[23] == digest
    assert len(image) % 16 == 0
    assert read_image(image, chip) == "2.6.0"
    assert reseal(image) == image  # what the tests' sealing makes, too


@pytest.mark.parametrize(
    ("image", "chip", "refused"),
    [
        (b"\xe8" + app_image(version="2.6.0")[1:], "esp32s3", "invalid magic byte"),
        (b"", "esp32s3", "invalid magic byte"),
        (app_image(version="2.6.0"), "esp32c3", "image for chip 9, not esp32c3"),
        (edited(set_u8(1, 0)), "esp32s3", "segment count 0"),
        # The count is read before any segment.
        (
            b"\xe9\x11" + app_image(version="2.6.0")[2:],
            "esp32s3",
            "segment count 17",
        ),
        (edited(set_u16(15, 3)), "esp32s3", r"needs chip revision >= v0.3, not v0.2"),
        (edited(set_u16(15, 0xFFFF)), "esp32s3", r"needs chip revision >= v655.35"),
        (edited(set_u16(17, 1)), "esp32s3", r"needs chip revision <= v0.1"),
        (
            edited(set_u16(DESC + 0xB0, 1)),
            "esp32s3",
            r"needs eFuse block revision >= v0.1, not v0.0",
        ),
        (
            edited(set_u32(SEGMENT + 4, 4096 + 256 - 2)),
            "esp32s3",
            "segment 0: invalid length 0x10fe",
        ),
        (
            edited(set_u32(SEGMENT + 4, 252), payload=0),
            "esp32s3",
            "segment 0 is too short for the app description",
        ),
        (
            edited(set_u32(SEGMENT, 0x3C000024)),
            "esp32s3",
            "segment 0 load address 0x3c000024 does not match data 0x20",
        ),
        (
            edited(set_u32(DESC, 0), chip="esp32c6"),
            "esp32c6",
            "no app description in segment 0",
        ),
        # The ESP32-C6 reads its MMU page from the descriptor: 64 KB unless set.
        (
            edited(set_u32(SEGMENT, 0x42008020), chip="esp32c6"),
            "esp32c6",
            "does not match data",
        ),
    ],
    ids=[
        "magic",
        "empty",
        "chip",
        "no-segment",
        "17-segments",
        "chip-from-v0.3",
        "chip-min-unset-is-checked",
        "chip-up-to-v0.1",
        "efuse-from-v0.1",
        "unaligned-length",
        "no-room-for-descriptor",
        "not-where-it-maps",
        "c6-without-descriptor",
        "c6-not-where-it-maps",
    ],
)
def test_what_esp_image_verify_refuses_is_refused(
    image: bytes, chip: str, refused: str
) -> None:
    with pytest.raises(ValueError, match=refused):
        read_image(image, chip)


@pytest.mark.parametrize(
    ("image", "chip"),
    [
        (edited(set_u16(17, 0)), "esp32s3"),  # max chip revision 0: unset
        (edited(set_u16(DESC + 0xB0, 1), chip="esp32"), "esp32"),  # no eFuse check
        (edited(set_u32(SEGMENT, 0x3FC88000)), "esp32s3"),  # RAM: not mapped
        (
            # A 32 KB page (log2 15) maps 0x42008020 at 0x20.
            edited(
                set_u32(SEGMENT, 0x42008020), set_u8(DESC + 0xB4, 15), chip="esp32c6"
            ),
            "esp32c6",
        ),
        # Any non-zero flag means a digest follows.
        (edited(set_u8(23, 2)), "esp32s3"),
    ],
    ids=["max-unset", "esp32-no-efuse", "ram-segment", "c6-32k-page", "flag-2"],
)
def test_what_esp_image_verify_accepts_is_accepted(image: bytes, chip: str) -> None:
    assert read_image(image, chip) == "2.6.0"


@pytest.mark.parametrize("digest", [True, False], ids=["sha256", "no-sha256"])
def test_a_changed_or_cut_image_is_refused_where_the_firmware_sees_it(
    digest: bool,
) -> None:
    """The checksum covers segment data; the digest covers every byte before it."""
    image = app_image(version="2.6.0", digest=digest)
    end = len(image) - (32 if digest else 0)  # the end of the checksum block

    def flipped(offset: int) -> bytes:
        data = bytearray(image)
        data[offset] ^= 0x01
        return bytes(data)

    with pytest.raises(ValueError, match="checksum failed"):
        read_image(flipped(DESC + 0x200), "esp32s3")
    with pytest.raises(ValueError, match="cut short"):
        read_image(image[:-32], "esp32s3")
    with pytest.raises(ValueError, match="cut short"):
        read_image(image[:-1], "esp32s3")
    # The SPI mode (header) and the checksum block's padding: not checksummed.
    for offset in (2, end - 2):
        if digest:
            with pytest.raises(ValueError, match="image hash failed"):
                read_image(flipped(offset), "esp32s3")
        else:
            assert read_image(flipped(offset), "esp32s3") == "2.6.0"
    if digest:
        with pytest.raises(ValueError, match="image hash failed"):
            read_image(flipped(len(image) - 1), "esp32s3")
    # What follows the image in its slot is not the image's.
    assert read_image(image + b"\xff" * 100, "esp32s3") == "2.6.0"


def test_the_next_slot_is_the_one_after_the_running_one() -> None:
    """As ``esp_ota_get_next_update_partition`` picks it."""
    assert next_ota_slot(DEFAULT_TABLE, "ota_0").label == "ota_1"
    assert next_ota_slot(DEFAULT_TABLE, "ota_1").label == "ota_0"
    assert next_ota_slot(DEFAULT_TABLE, "factory").label == "ota_0"
    with pytest.raises(ValueError, match="no OTA partition"):
        next_ota_slot(FACTORY_TABLE, "factory")
    only = [PartitionEntry("ota_0", 0, 0x10, 0x10000, APP_SLOT)]
    with pytest.raises(ValueError, match="ota_0 is the running partition"):
        next_ota_slot(only, "ota_0")


async def test_a_good_image_is_flashed_into_the_other_slot_and_booted(
    server: FakeServer, make_device: DeviceFactory
) -> None:
    server.firmware = app_image(version="2.6.0")
    device = make_device()
    assert device.config.running_label == "ota_0"
    await device.upgrade(server.url("/firmware.bin"))
    assert device.upgrades == [("2.6.0", "")]
    assert (device.config.firmware, device.config.running_label) == ("2.6.0", "ota_1")
    assert device.reboot_count == 1
    server.firmware = app_image(version="2.7.0")
    await device.upgrade(server.url("/firmware.bin"))
    assert (device.config.firmware, device.config.running_label) == ("2.7.0", "ota_0")


@pytest.mark.parametrize(
    ("config", "firmware", "failure", "requests"),
    [
        (
            {},
            app_image(version="2.6.0")[:-32],
            "cut short in the SHA-256",
            1,
        ),
        (
            {},
            app_image(version="2.6.0", payload=APP_SLOT),
            f"image larger than its {APP_SLOT}-byte slot",
            1,
        ),
        ({"ota_slots": False}, app_image(version="2.6.0"), "no OTA partition", 0),
    ],
    ids=["cut-short", "larger-than-its-slot", "factory-only"],
)
async def test_a_refused_image_is_an_upgrade_failed(
    server: FakeServer,
    make_device: DeviceFactory,
    config: dict[str, object],
    firmware: bytes,
    failure: str,
    requests: int,
) -> None:
    """The device says so and carries on with what it runs."""
    server.firmware = firmware
    device = make_device(**config)
    await device.upgrade(server.url("/firmware.bin"))
    [(version, why)] = device.upgrades
    assert version is None
    assert failure in why
    assert server.firmware_requests == requests
    assert device.config.firmware == "2.0.4"
    assert device.config.running_partition is None
    assert device.reboot_count == 0
