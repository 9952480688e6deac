"""Firmware images: cut out of a release, and refused unless right for the device."""

import hashlib

import pytest

from aioxiaozhi.ota_image import (
    FirmwareRefusedError,
    ImageHeader,
    Partition,
    Refusal,
    app_from_merged,
    check_image,
    is_plain_version,
    merged_binary,
    version_key,
)
from aioxiaozhi.testing.firmware_image import (
    APP_SLOT,
    DEFAULT_TABLE,
    app_image,
    merged_binary as build_merged,
    partition_table,
    release_zip,
)

SLOTS = [
    Partition("ota_0", 0, 0x10, 0x20000, APP_SLOT),
    Partition("ota_1", 0, 0x11, 0x20000 + APP_SLOT, APP_SLOT),
]


def refusal(call: object) -> Refusal:
    """Return why ``call()`` refused."""
    with pytest.raises(FirmwareRefusedError) as err:
        call()  # type: ignore[operator]
    return err.value.reason


def test_a_release_zip_gives_its_application_image() -> None:
    """The app image is cut out through the partition table, whole."""
    image = app_image(version="2.5.0")
    app = app_from_merged(merged_binary(release_zip(build_merged(image))))
    assert app.data == image
    assert (app.version, app.project, app.chip) == ("2.5.0", "xiaozhi", "esp32s3")
    check_image(app, version="2.5.0", chip="esp32s3", slots=SLOTS)


@pytest.mark.parametrize("digest", [True, False], ids=["sha256", "no-sha256"])
def test_the_appended_sha256_is_cut_out_with_the_image(digest: bool) -> None:
    """The header's byte 23 says a digest follows the checksum block: it is kept."""
    image = app_image(version="2.5.0", digest=digest)
    header = ImageHeader.read(image)
    assert header.hash_appended == digest
    assert header.max_chip_rev_full == 0xFFFF  # not the flag: the field before it
    merged = build_merged(image)
    app = app_from_merged(merged)
    assert app.data == image
    assert len(app.data) == len(app_image(version="2.5.0", digest=False)) + (
        32 if digest else 0
    )
    if digest:
        assert app.data[-32:] == hashlib.sha256(app.data[:-32]).digest()
    assert refusal(lambda: app_from_merged(merged[:-32])) is Refusal.NOT_AN_IMAGE


@pytest.mark.parametrize(
    ("archive", "reason"),
    [
        (b"not a zip", Refusal.NOT_A_ZIP),
        (release_zip(b"x", name="firmware.bin"), Refusal.NO_MERGED_BINARY),
    ],
    ids=["not-a-zip", "no-merged-binary"],
)
def test_what_is_not_a_release_zip_is_refused(archive: bytes, reason: Refusal) -> None:
    assert refusal(lambda: merged_binary(archive)) is reason


def test_what_is_not_a_merged_binary_is_refused() -> None:
    image = app_image(version="2.5.0")
    assert refusal(lambda: app_from_merged(b"\xff" * 0x10000)) is (
        Refusal.NO_PARTITION_TABLE
    )
    data_only = [entry for entry in DEFAULT_TABLE if entry[1] != 0]
    with_app = build_merged(image)
    no_app = bytearray(with_app)
    table = partition_table(data_only)
    no_app[0x8000 : 0x8000 + len(table)] = table
    assert refusal(lambda: app_from_merged(bytes(no_app))) is Refusal.NO_APP
    garbage = bytearray(with_app)
    garbage[0x20000:0x20010] = b"\0" * 16
    assert refusal(lambda: app_from_merged(bytes(garbage))) is Refusal.NOT_AN_IMAGE
    cut = with_app[: 0x20000 + 200]
    assert refusal(lambda: app_from_merged(cut)) is Refusal.NOT_AN_IMAGE


def test_another_project_is_refused() -> None:
    other = app_from_merged(build_merged(app_image(version="2.5.0", project="other")))
    assert (
        refusal(
            lambda: check_image(other, version="2.5.0", chip="esp32s3", slots=SLOTS)
        )
        is Refusal.NOT_XIAOZHI
    )
    bare = bytearray(build_merged(app_image(version="2.5.0")))
    bare[0x20020:0x20024] = b"\0\0\0\0"  # no descriptor magic
    assert refusal(lambda: app_from_merged(bytes(bare))) is Refusal.NOT_XIAOZHI


@pytest.mark.parametrize(
    ("chip", "version", "slots", "reason"),
    [
        ("esp32c3", "2.5.0", SLOTS, Refusal.WRONG_CHIP),
        (None, "2.5.0", SLOTS, Refusal.WRONG_CHIP),
        ("esp32s3", "2.5.1", SLOTS, Refusal.WRONG_VERSION),
        (
            "esp32s3",
            "2.5.0",
            [Partition("factory", 0, 0, 0x10000, APP_SLOT)],
            Refusal.NO_OTA_SLOT,
        ),
        (
            "esp32s3",
            "2.5.0",
            [Partition("ota_0", 0, 0x10, 0x10000, 2048)],
            Refusal.TOO_LARGE,
        ),
    ],
)
def test_an_image_not_for_this_device_is_refused(
    chip: str | None, version: str, slots: list[Partition], reason: Refusal
) -> None:
    app = app_from_merged(build_merged(app_image(version="2.5.0")))
    assert (
        refusal(lambda: check_image(app, version=version, chip=chip, slots=slots))
        is reason
    )


@pytest.mark.parametrize(
    ("version", "plain"),
    [
        ("2.5.0", True),
        ("1", True),
        ("2.0.4.1", True),
        ("v2.5.0", False),
        ("2.5.0-rc1", False),
        ("2..5", False),
        ("", False),
        ("2.5.0.1.2", False),
    ],
)
def test_only_plain_versions_are_safe_for_the_boot_check(
    version: str, plain: bool
) -> None:
    """The firmware compares with std::stoi: anything else aborts it at boot."""
    assert is_plain_version(version) is plain
    assert (version_key(version) is not None) is plain
