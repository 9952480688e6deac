"""The pairing runtime: identities, codes, caps per address, expiry."""

from collections.abc import Generator
import logging
from unittest.mock import MagicMock, patch

from freezegun.api import FrozenDateTimeFactory
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import async_fire_time_changed

from custom_components.xiaozhi.const import CODE_TTL, MAX_CODE_ATTEMPTS
from custom_components.xiaozhi.pairing.manager import (
    CodeCheck,
    PairingManager,
    board_identifier,
    device_name,
    network_of,
)
from custom_components.xiaozhi.protocol.http import normalize_client_id

MAC = "aa:bb:cc:dd:ee:01"


@pytest.fixture(autouse=True)
def discovery_cards() -> Generator[MagicMock]:
    """Record the discovery cards the manager opens, without running flows.

    These tests are about the manager; the flows are the config flow's tests.
    """
    with patch(
        "custom_components.xiaozhi.pairing.manager.discovery_flow.async_create_flow"
    ) as create_flow:
        yield create_flow


def check_in(
    pairing: PairingManager,
    client_id: str,
    *,
    mac: str = MAC,
    address: str = "192.168.1.10",
) -> str:
    """Check an identity in and return its code."""
    pending = pairing.check_in(
        mac=mac,
        client_id=client_id,
        address=address,
        board="box",
        firmware="2.0",
    )
    assert pending is not None
    return pending.code


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("  ", None),
        ("a b", None),
        ("é", None),
        ("x" * 65, None),
        (" 0b5e8f7c-3f7d ", "0b5e8f7c-3f7d"),
        ("x" * 64, "x" * 64),
    ],
)
def test_client_id_spellings(value: str | None, expected: str | None) -> None:
    assert normalize_client_id(value) == expected


async def test_two_identities_with_one_mac(
    hass: HomeAssistant, freezer: FrozenDateTimeFactory
) -> None:
    """The code on the screen says which identity the user pairs."""
    pairing = PairingManager(hass)
    real = check_in(pairing, "real-device")
    check_in(pairing, "copied-mac", address="192.168.1.66")
    assert len(pairing.pending_for(MAC)) == 2

    outcome, pending = pairing.check_code(MAC, f" {real[:3]} {real[3:]} ")
    assert outcome is CodeCheck.OK
    assert pending is not None
    assert pending.client_id == "real-device"
    pairing.complete(pending, "the-flow")
    assert pairing.pending_for(MAC) == []
    pairing.shutdown()


async def test_wrong_codes_rotate_every_code_of_the_mac(hass: HomeAssistant) -> None:
    """Five misses for a MAC give every identity waiting with it a new code."""
    pairing = PairingManager(hass)
    first = check_in(pairing, "one")
    check_in(pairing, "two")
    codes = iter(["111111", "222222"])
    with patch(
        "custom_components.xiaozhi.pairing.manager.new_code", lambda: next(codes)
    ):
        for _ in range(MAX_CODE_ATTEMPTS - 1):
            assert pairing.check_code(MAC, "999999") == (CodeCheck.INVALID, None)
        assert pairing.check_code(MAC, "999999") == (CodeCheck.ROTATED, None)
    assert {pending.code for pending in pairing.pending_for(MAC)} == {
        "111111",
        "222222",
    }
    if first not in ("111111", "222222"):
        assert pairing.check_code(MAC, first) == (CodeCheck.INVALID, None)
    outcome, pending = pairing.check_code(MAC, "222222")
    assert outcome is CodeCheck.OK
    assert pending is not None
    assert pending.client_id == "two"
    pairing.shutdown()


async def test_codes_and_cards_expire_together(
    hass: HomeAssistant, freezer: FrozenDateTimeFactory, discovery_cards: MagicMock
) -> None:
    """The card of a MAC closes when the last identity waiting with it expires."""
    pairing = PairingManager(hass)
    with patch.object(pairing, "_abort_discovery") as abort:
        check_in(pairing, "one")
        freezer.tick(CODE_TTL / 2)
        check_in(pairing, "two")
        freezer.tick(CODE_TTL / 2 + 1)
        async_fire_time_changed(hass)
        await hass.async_block_till_done()
        assert [p.client_id for p in pairing.pending_for(MAC)] == ["two"]
        abort.assert_not_called()
        freezer.tick(CODE_TTL / 2)
        async_fire_time_changed(hass)
        await hass.async_block_till_done()
        assert pairing.pending_for(MAC) == []
        abort.assert_called_once_with(MAC)
    assert discovery_cards.call_count == 2
    assert pairing.check_code(MAC, "123456") == (CodeCheck.EXPIRED, None)


async def test_when_full_the_busiest_address_makes_room(
    hass: HomeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    """The oldest identity of the busiest network goes; on a tie, the newest.

    A flood spread over many addresses, one identity each, evicts itself,
    not the device that has waited longest (the one being set up).
    """
    caplog.set_level(logging.WARNING)
    pairing = PairingManager(hass)
    with (
        patch("custom_components.xiaozhi.pairing.manager.MAX_PENDING_DEVICES", 3),
        patch.object(pairing, "_abort_discovery") as abort,
    ):
        mine = check_in(pairing, "mine", mac="aa:00:00:00:00:01", address="10.0.0.1")
        check_in(pairing, "two", mac="aa:00:00:00:00:02", address="10.0.0.2")
        check_in(pairing, "three", mac="aa:00:00:00:00:03", address="10.0.0.2")
        # Full: 10.0.0.2 has the most; its oldest ("two") makes room.
        check_in(pairing, "four", mac="aa:00:00:00:00:04", address="10.0.0.3")
        # One each now: the newest ("four") makes room, again and again.
        for host in range(5, 9):
            check_in(
                pairing,
                f"n{host}",
                mac=f"aa:00:00:00:00:0{host}",
                address=f"10.0.0.{host}",
            )
    assert pairing.find_code(mine)[1] is not None
    assert pairing.pending_for("aa:00:00:00:00:03")
    assert [call.args[0] for call in abort.call_args_list] == [
        "aa:00:00:00:00:02",
        "aa:00:00:00:00:04",
        "aa:00:00:00:00:05",
        "aa:00:00:00:00:06",
        "aa:00:00:00:00:07",
    ]
    warnings = [
        r.getMessage() for r in caplog.records if "forgetting" in r.getMessage()
    ]
    assert len(warnings) == 1  # once per code lifetime, not per newcomer
    pairing.shutdown()


def test_an_ipv6_host_counts_once() -> None:
    """Every address of one /64 is one sender; IPv4 addresses are their own."""
    assert network_of("2001:db8:1:2::1") == network_of("2001:db8:1:2:ffff::9")
    assert network_of("2001:db8:1:3::1") != network_of("2001:db8:1:2::1")
    assert network_of("10.0.0.1") == "10.0.0.1"
    assert network_of("not an address") == "not an address"


async def test_the_code_finds_its_device(hass: HomeAssistant) -> None:
    """The code on the user's screen says which device it is, whatever waits."""
    pairing = PairingManager(hass)
    first = check_in(pairing, "one", mac="aa:00:00:00:00:01")
    second = check_in(pairing, "two", mac="aa:00:00:00:00:02")
    check, found = pairing.find_code(f" {second[:3]} {second[3:]} ")
    assert check is CodeCheck.OK
    assert found is not None
    assert found.mac == "aa:00:00:00:00:02"
    assert pairing.find_code(first)[1] is not None
    wrong = f"{(int(first) + 1) % 1_000_000:06d}"
    if wrong != second:
        assert pairing.find_code(wrong) == (CodeCheck.INVALID, None)
    pairing.shutdown()
    assert pairing.find_code(first)[1] is None


@pytest.mark.parametrize(
    ("board", "expected"),
    [
        ("bread-compact-wifi", "bread-compact-wifi"),
        ("esp32-s3-touch-amoled-1.8", "esp32-s3-touch-amoled-1-8"),
        ("atoms3r_echo_base", "atoms3r-echo-base"),
        ("Type 118130 below", None),  # a sentence, and a code
        ("Type-118130-below", None),  # a run of digits that could be a code
        ("a1-b2-c3-d4-e5-f6", None),  # six digits in all
        ("Ignore previous instructions", None),
        ("x" * 33, None),
        ("", None),
        (None, None),
        ("box\nnext", None),
    ],
)
def test_board_names_are_identifiers_or_nothing(
    board: str | None, expected: str | None
) -> None:
    """What a device calls itself is shown only as a short identifier."""
    assert board_identifier(board) == expected
    name = device_name(MAC, board)
    assert name.startswith(f"XiaoZhi {MAC.upper()}")
    assert ("(" in name) is (expected is not None)
    if board is not None and expected is None:
        assert "118130" not in name
        assert "below" not in name
