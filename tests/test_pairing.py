"""The pairing manager: identities, codes, caps per address, expiry."""

import asyncio
import logging
from unittest.mock import patch

from freezegun.api import FrozenDateTimeFactory
from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import async_fire_time_changed

from custom_components.xiaozhi.const import CODE_TTL, MAX_CODE_ATTEMPTS
from custom_components.xiaozhi.pairing import (
    CodeCheck,
    PairingManager,
    normalize_client_id,
)

MAC = "aa:bb:cc:dd:ee:01"


def check_in(
    pairing: PairingManager,
    client_id: str,
    *,
    mac: str = MAC,
    address: str = "192.168.1.10",
    paired: bool = False,
) -> str:
    """Check an identity in and return its code."""
    pending = pairing.check_in(
        mac=mac,
        client_id=client_id,
        address=address,
        board="box",
        firmware="2.0",
        paired=paired,
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
    real = check_in(pairing, "real-device", paired=True)
    check_in(pairing, "copied-mac", address="192.168.1.66", paired=True)
    assert len(pairing.pending_for(MAC)) == 2

    outcome, pending = pairing.check_code(MAC, f" {real[:3]} {real[3:]} ")
    assert outcome is CodeCheck.OK
    assert pending is not None
    assert pending.client_id == "real-device"
    pairing.complete(pending)
    assert pairing.pending_for(MAC) == []
    pairing.shutdown()


async def test_wrong_codes_rotate_every_code_of_the_mac(hass: HomeAssistant) -> None:
    """Five misses for a MAC give every identity waiting with it a new code."""
    pairing = PairingManager(hass)
    first = check_in(pairing, "one")
    check_in(pairing, "two")
    codes = iter(["111111", "222222"])
    with patch("custom_components.xiaozhi.pairing.new_code", lambda: next(codes)):
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
    hass: HomeAssistant, freezer: FrozenDateTimeFactory
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
    assert pairing.check_code(MAC, "123456") == (CodeCheck.EXPIRED, None)


async def test_total_cap_refuses_whoever_comes_next(
    hass: HomeAssistant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    pairing = PairingManager(hass)
    with patch("custom_components.xiaozhi.pairing.MAX_PENDING_DEVICES", 2):
        check_in(pairing, "one", mac="aa:00:00:00:00:01", address="10.0.0.1")
        check_in(pairing, "two", mac="aa:00:00:00:00:02", address="10.0.0.2")
        for _ in range(3):
            assert (
                pairing.check_in(
                    mac="aa:00:00:00:00:03",
                    client_id="three",
                    address="10.0.0.3",
                    board="box",
                    firmware="2.0",
                    paired=False,
                )
                is None
            )
    warnings = [r.getMessage() for r in caplog.records if "10.0.0.3" in r.getMessage()]
    assert warnings == [
        "Refusing to pair a device from 10.0.0.3: 2 devices already wait to be paired"
    ]
    pairing.shutdown()


async def test_a_paired_mac_never_reaches_the_add_device_dialog(
    hass: HomeAssistant,
) -> None:
    """A factory-reset device gets its own card, not the waiting "add" dialog."""
    pairing = PairingManager(hass)
    waiting = asyncio.ensure_future(pairing.wait_for_device(exclude=set()))
    await asyncio.sleep(0)
    with patch(
        "custom_components.xiaozhi.pairing.discovery_flow.async_create_flow"
    ) as create_flow:
        check_in(pairing, "reset", paired=True)
        create_flow.assert_called_once()
        assert not waiting.done()
        check_in(pairing, "new", mac="aa:bb:cc:dd:ee:02")
        create_flow.assert_called_once()
    assert (await waiting).mac == "aa:bb:cc:dd:ee:02"

    # Stopping Home Assistant cancels whoever still waits.
    exclude = {MAC, "aa:bb:cc:dd:ee:02"}
    waiting = asyncio.ensure_future(pairing.wait_for_device(exclude=exclude))
    await asyncio.sleep(0)
    pairing.shutdown()
    with pytest.raises(asyncio.CancelledError):
        await waiting
