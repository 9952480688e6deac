"""Images made by esptool itself: cut out whole, and checked as the firmware does.

Each test links a small ELF the way ESP-IDF lays out an app
(``.flash.appdesc`` at the start of the flash-mapped data, code in IRAM and
in mapped flash), has ``esptool elf2image`` turn it into an application
image (with its SHA-256 appended, as every xiaozhi build, or without:
``--dont-append-digest``, ``append_digest=False`` in its Python API) and
``esptool merge-bin`` put it behind a bootloader and a partition table.
esptool writes the flash-mapped sections first, ``.flash.appdesc`` leading,
and fills the gap before the code's 64 KB page with the RAM sections.
"""

from pathlib import Path
import struct

from esptool.cmds import elf2image, merge_bin
import pytest

from aioxiaozhi.ota_image import (
    app_from_merged,
    read_app_image,
    read_firmware_file,
)
from aioxiaozhi.testing.firmware_image import (
    APP_OFFSET,
    DEFAULT_TABLE,
    partition_table,
    read_image,
    release_zip,
)

VERSION = "2.6.0"
ELF_MACHINE = {"esp32s3": 0x5E, "esp32c3": 0xF3}  # Xtensa, RISC-V
IRAM = {"esp32s3": 0x40374000, "esp32c3": 0x40380000}
DRAM = {"esp32s3": 0x3FC88000, "esp32c3": 0x3FC80000}
DROM = 0x3C000020  # where ESP-IDF links .flash.appdesc: 0x20 into a 64 KB page
IROM = 0x42000020
SHT_PROGBITS = 1
SHT_STRTAB = 3
CHIPS = pytest.mark.parametrize("chip", ["esp32s3", "esp32c3"])
DIGEST = pytest.mark.parametrize("digest", [True, False], ids=["sha256", "no-sha256"])


def app_desc(version: str = VERSION, project: str = "xiaozhi") -> bytes:
    """Return an ``esp_app_desc_t`` as ESP-IDF 5.4 fills it for an ESP32-S3."""
    desc = bytearray(256)
    struct.pack_into("<II", desc, 0, 0xABCD5432, 0)
    desc[0x10 : 0x10 + len(version)] = version.encode()
    desc[0x30 : 0x30 + len(project)] = project.encode()
    desc[0x50:0x58] = b"12:00:00"
    desc[0x60:0x6B] = b"Jan  1 2026"
    desc[0x70:0x76] = b"v5.4.1"
    struct.pack_into("<HHB", desc, 0xB0, 0, 199, 16)  # eFuse block v0.0-v1.99, 64 KB
    return bytes(desc)


def section_header(name: int, kind: int, address: int, offset: int, size: int) -> bytes:
    """Return an ``Elf32_Shdr``; a section with an address is loaded (SHF_ALLOC)."""
    flags = 0x2 if address else 0
    return struct.pack("<10I", name, kind, flags, address, offset, size, 0, 0, 4, 0)


def elf(machine: int, entry: int, sections: list[tuple[str, int, bytes]]) -> bytes:
    """Return a 32-bit little-endian ELF executable of (name, address, data)."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name, _a, _d in sections)
    body = bytearray()
    headers = [bytes(40)]  # section 0 is null
    for name, address, data in sections:
        name_at = names.index(b"\0" + name.encode() + b"\0") + 1
        headers.append(
            section_header(name_at, SHT_PROGBITS, address, 52 + len(body), len(data))
        )
        body += data
    strtab = names + b".shstrtab\0"
    headers.append(
        section_header(len(names), SHT_STRTAB, 0, 52 + len(body), len(strtab))
    )
    body += strtab + bytes(-len(strtab) % 4)
    header = struct.pack(
        "<16sHHIIIIIHHHHHH",
        b"\x7fELF\x01\x01\x01".ljust(16, b"\0"),  # 32-bit, little-endian
        2,  # ET_EXEC
        machine,
        1,
        entry,
        0,  # no program headers: elf2image reads sections
        52 + len(body),
        0,
        52,
        0,
        0,
        40,
        len(headers),
        len(headers) - 1,
    )
    return header + bytes(body) + b"".join(headers)


def esptool_image(
    tmp_path: Path, chip: str, *, digest: bool = True, **options: int
) -> bytes:
    """Return the application image ``esptool elf2image`` makes for ``chip``."""
    pattern = bytes((7 * i + 3) % 251 for i in range(256))
    source = tmp_path / "xiaozhi.elf"
    source.write_bytes(
        elf(
            ELF_MACHINE[chip],
            IRAM[chip],
            [
                (".flash.appdesc", DROM, app_desc()),
                (".flash.rodata", DROM + 256, pattern * 4),
                (".iram0.text", IRAM[chip], pattern * 8),
                (".dram0.data", DRAM[chip], pattern * 2),
                (".flash.text", IROM, pattern * 16),
            ],
        )
    )
    output = tmp_path / "xiaozhi.bin"
    elf2image(
        str(source),
        chip,
        str(output),
        flash_size="16MB",
        append_digest=digest,
        **options,
    )
    return output.read_bytes()


def esptool_merged(tmp_path: Path, chip: str, image: bytes) -> bytes:
    """Return ``merged-binary.bin`` as the firmware's build makes it with esptool."""
    loader = tmp_path / "bootloader.elf"
    loader.write_bytes(
        elf(ELF_MACHINE[chip], IRAM[chip], [(".iram0.text", IRAM[chip], bytes(64))])
    )
    bootloader = tmp_path / "bootloader.bin"
    elf2image(str(loader), chip, str(bootloader))
    output = tmp_path / "merged-binary.bin"
    merge_bin(
        [
            (0x0, bootloader.read_bytes()),
            (0x8000, partition_table(DEFAULT_TABLE)),
            (APP_OFFSET, image),
        ],
        chip,
        str(output),
    )
    return output.read_bytes()


@CHIPS
@DIGEST
def test_the_image_cut_out_is_the_one_esptool_made(
    tmp_path: Path, chip: str, digest: bool
) -> None:
    """Byte for byte, its SHA-256 included; the firmware's checks pass."""
    image = esptool_image(tmp_path, chip, digest=digest)
    assert image[23] == digest  # the hash-appended byte of the header
    # Descriptor and rodata, two RAM sections, padding, then the code.
    assert image[1] == 5
    merged = esptool_merged(tmp_path, chip, image)
    assert merged[APP_OFFSET:] == image
    app = app_from_merged(merged)
    assert app.data == image
    assert (app.chip, app.version, app.project) == (chip, VERSION, "xiaozhi")
    assert read_firmware_file(release_zip(merged)).data == image
    # An app image read out of its partition: the erased flash after it is cut.
    assert read_app_image(image + b"\xff" * 4096).data == image
    assert read_firmware_file(image).data == image
    assert read_image(app.data, chip) == VERSION


@CHIPS
@DIGEST
def test_a_changed_or_cut_esptool_image_is_refused(
    tmp_path: Path, chip: str, digest: bool
) -> None:
    """One byte of a segment or of the digest, or its last 32 bytes."""
    image = esptool_image(tmp_path, chip, digest=digest)
    changed = bytearray(image)
    changed[0x20 + 0x100] ^= 0x01  # the first segment, past the descriptor
    with pytest.raises(ValueError, match="checksum failed"):
        read_image(bytes(changed), chip)
    with pytest.raises(ValueError, match="cut short"):
        read_image(image[:-32], chip)
    if digest:
        changed = bytearray(image)
        changed[-1] ^= 0x80
        with pytest.raises(ValueError, match="image hash failed"):
            read_image(bytes(changed), chip)
        # A header byte the checksum leaves out: the digest covers it.
        changed = bytearray(image)
        changed[2] ^= 0x01  # the SPI mode
        with pytest.raises(ValueError, match="image hash failed"):
            read_image(bytes(changed), chip)


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        ({"min_rev_full": 0, "max_rev_full": 99}, None),
        ({"min_rev_full": 3}, "needs chip revision >= v0.3, not v0.2"),
        ({"min_rev_full": 0, "max_rev_full": 1}, "needs chip revision <= v0.1"),
    ],
    ids=["v0.0-v0.99", "from-v0.3", "up-to-v0.1"],
)
def test_the_chip_revisions_esptool_writes_are_checked(
    tmp_path: Path, options: dict[str, int], refused: str | None
) -> None:
    """The simulated chip is v0.2: an app for other revisions is refused."""
    image = esptool_image(tmp_path, "esp32s3", **options)
    if refused is None:
        assert read_image(image, "esp32s3") == VERSION
    else:
        with pytest.raises(ValueError, match=refused):
            read_image(image, "esp32s3")
