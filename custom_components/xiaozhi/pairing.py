"""Pairing of devices: codes shown on the device, checked in the UI.

A device is known by its identity: the MAC it sends as ``Device-Id`` and the
random UUID it generated and sends as ``Client-Id``. The OTA endpoint needs no
login, so a pairing waits per identity, a few per source address at most, and
codes expire together with their discovery cards.
"""

import asyncio
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import hmac
import re
import secrets
import time

from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import discovery_flow
from homeassistant.helpers.event import async_call_later

from .const import (
    CODE_TTL,
    DOMAIN,
    LOGGER,
    MAX_CLIENT_ID,
    MAX_CODE_ATTEMPTS,
    MAX_PENDING_DEVICES,
    MAX_PENDING_PER_ADDRESS,
)

_MAC = re.compile(r"^[0-9a-f]{2}([:-]?)[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")
_CLIENT_ID = re.compile(r"^[\x21-\x7e]+$")


def normalize_mac(value: str | None) -> str | None:
    """Return ``aa:bb:cc:dd:ee:ff`` for any common MAC spelling, else None."""
    if value is None:
        return None
    value = value.strip().lower()
    if not _MAC.match(value):
        return None
    digits = value.replace(":", "").replace("-", "")
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


def normalize_client_id(value: str | None) -> str | None:
    """Return a usable ``Client-Id`` (printable, no spaces, bounded), else None."""
    if value is None:
        return None
    value = value.strip()
    if not 0 < len(value) <= MAX_CLIENT_ID or not _CLIENT_ID.match(value):
        return None
    return value


def same_secret(stored: str | None, given: str | None) -> bool:
    """Compare two secrets in constant time; None never matches."""
    if stored is None or given is None:
        return False
    return hmac.compare_digest(stored.encode(), given.encode())


def new_code() -> str:
    """Return a random six-digit code."""
    return f"{secrets.randbelow(1_000_000):06d}"


def new_token() -> str:
    """Return a fresh random device token."""
    return secrets.token_urlsafe(32)


class CodeCheck(StrEnum):
    """Outcome of checking a code typed by the user."""

    OK = "ok"
    INVALID = "invalid_code"
    ROTATED = "code_rotated"
    EXPIRED = "code_expired"


@dataclass(slots=True, kw_only=True)
class PendingDevice:
    """A device identity that checked in and waits to be paired."""

    mac: str
    client_id: str
    address: str
    board: str
    firmware: str
    code: str = field(default_factory=new_code)
    challenge: str = field(default_factory=lambda: secrets.token_hex(16))
    # Handed out with the code: clients that connect before they are paired
    # (xiaozhi-sdk) get a restricted link with it; pairing makes it the
    # device's token.
    token: str = field(default_factory=new_token, repr=False)
    expires: float = 0.0
    timer: CALLBACK_TYPE | None = field(default=None, repr=False)
    ended: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        """Return the identity: MAC and Client-Id."""
        return self.mac, self.client_id

    @property
    def name(self) -> str:
        """Return how the device is called until it is paired."""
        return f"XiaoZhi {self.board} ({self.mac.upper()})"

    def remaining(self) -> float:
        """Return the seconds left before the code expires."""
        return max(0.0, self.expires - time.monotonic())


class PairingManager:
    """Keeps pending devices, their codes, and the flows waiting for them."""

    def __init__(self, hass: HomeAssistant) -> None:
        """Start with no pending device."""
        self._hass = hass
        self._pending: dict[tuple[str, str], PendingDevice] = {}
        self._attempts: defaultdict[str, int] = defaultdict(int)
        self._refused: dict[str, float] = {}
        self._waiters: list[asyncio.Future[PendingDevice]] = []

    def get(self, mac: str, client_id: str) -> PendingDevice | None:
        """Return the pending device with this identity, if its code is valid."""
        pending = self._pending.get((mac, client_id))
        if pending is not None and pending.remaining() <= 0:
            self._expire(pending.key)
            return None
        return pending

    def pending_with_token(
        self, token: str | None, mac: str | None, client_id: str | None
    ) -> PendingDevice | None:
        """Return the identity waiting with this token, MAC and Client-Id."""
        if token is None or mac is None or client_id is None:
            return None
        pending = self.get(mac, client_id)
        if pending is None or not same_secret(pending.token, token):
            return None
        return pending

    def pending_for(self, mac: str) -> list[PendingDevice]:
        """Return the identities with this MAC waiting to be paired."""
        return self._waiting(lambda other: other == mac)

    def _waiting(self, mac_matches: Callable[[str], bool]) -> list[PendingDevice]:
        """Return the identities still waiting whose MAC matches."""
        return [
            pending
            for key in list(self._pending)
            if mac_matches(key[0]) and (pending := self.get(*key)) is not None
        ]

    def _drop(self, key: tuple[str, str]) -> PendingDevice | None:
        """Forget an identity: its timer stops and its link ends."""
        pending = self._pending.pop(key, None)
        if pending is not None:
            if pending.timer is not None:
                pending.timer()
            pending.ended.set()
        return pending

    @callback
    def check_in(
        self,
        *,
        mac: str,
        client_id: str,
        address: str,
        board: str,
        firmware: str,
        paired: bool,
    ) -> PendingDevice | None:
        """Register an identity that wants to pair; start pairing it if new.

        ``paired`` says the MAC belongs to a paired device: this identity may
        be that device after a factory reset, and gets a discovery card of its
        own rather than the "add a device" dialog that waits for a new one.

        Returns None when its address, or everyone together, already has too
        many devices waiting: that address is refused, not the others.
        """
        pending = self.get(mac, client_id)
        if pending is not None:
            pending.board, pending.firmware = board, firmware
            return pending
        from_address = sum(
            1 for item in self._pending.values() if item.address == address
        )
        if (
            from_address >= MAX_PENDING_PER_ADDRESS
            or len(self._pending) >= MAX_PENDING_DEVICES
        ):
            self._refuse(address, from_address)
            return None
        pending = PendingDevice(
            mac=mac,
            client_id=client_id,
            address=address,
            board=board,
            firmware=firmware,
        )
        self._arm(pending)
        self._pending[pending.key] = pending
        LOGGER.info("%s wants to pair (from %s)", pending.name, address)
        while self._waiters and not paired:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(pending)
                return pending
        discovery_flow.async_create_flow(
            self._hass,
            DOMAIN,
            context={"source": SOURCE_INTEGRATION_DISCOVERY},
            data={"mac": mac},
        )
        return pending

    def _refuse(self, address: str, from_address: int) -> None:
        """Log a refused address once per code lifetime, not per request."""
        now = time.monotonic()
        if self._refused.get(address, -CODE_TTL) + CODE_TTL > now:
            return
        self._refused[address] = now
        if from_address >= MAX_PENDING_PER_ADDRESS:
            LOGGER.warning(
                "Refusing to pair more devices from %s: %d from there already wait "
                "to be paired; more are refused until their codes expire",
                address,
                from_address,
            )
        else:
            LOGGER.warning(
                "Refusing to pair a device from %s: %d devices already wait to be "
                "paired",
                address,
                len(self._pending),
            )

    def _arm(self, pending: PendingDevice) -> None:
        if pending.timer is not None:
            pending.timer()
        pending.expires = time.monotonic() + CODE_TTL
        pending.timer = async_call_later(
            self._hass, CODE_TTL, lambda _now: self._expire(pending.key)
        )

    @callback
    def _expire(self, key: tuple[str, str]) -> None:
        if (pending := self._drop(key)) is None:
            return
        LOGGER.info("Pairing code of %s expired", pending.name)
        if not any(other[0] == pending.mac for other in self._pending):
            self._attempts.pop(pending.mac, None)
            self._abort_discovery(pending.mac)

    @callback
    def _abort_discovery(self, mac: str) -> None:
        """Close the discovery card of a MAC that no identity waits with."""
        flows = self._hass.config_entries.flow.async_progress_by_handler(
            DOMAIN, match_context={"unique_id": mac}
        )
        for flow in flows:
            if flow["context"].get("source") == SOURCE_INTEGRATION_DISCOVERY:
                self._hass.config_entries.flow.async_abort(flow["flow_id"])

    @callback
    def check_code(self, mac: str, code: str) -> tuple[CodeCheck, PendingDevice | None]:
        """Check a code typed for a MAC; rotate its codes after too many misses.

        Several identities may wait with one MAC (a device reset to factory
        settings, or someone who copied its MAC): the code on the screen says
        which one the user has in front of them.
        """
        candidates = self.pending_for(mac)
        if not candidates:
            return CodeCheck.EXPIRED, None
        typed = code.strip().replace(" ", "").encode()
        found: PendingDevice | None = None
        for pending in candidates:  # every code is compared: constant time
            if hmac.compare_digest(typed, pending.code.encode()):
                found = pending
        if found is not None:
            return CodeCheck.OK, found
        self._attempts[mac] += 1
        if self._attempts[mac] < MAX_CODE_ATTEMPTS:
            return CodeCheck.INVALID, None
        LOGGER.warning("Too many wrong codes for %s; issuing new codes", mac.upper())
        self._attempts[mac] = 0
        for pending in candidates:
            pending.code = new_code()
            self._arm(pending)
        return CodeCheck.ROTATED, None

    @callback
    def complete(self, pending: PendingDevice) -> None:
        """Forget the identities of a MAC once one of them is paired."""
        for other in self.pending_for(pending.mac):
            self._drop(other.key)
        pending.ended.set()
        self._attempts.pop(pending.mac, None)

    async def wait_for_device(self, exclude: set[str]) -> PendingDevice:
        """Return a pending device with a MAC not in ``exclude``, or wait for one."""
        candidates = self._waiting(lambda mac: mac not in exclude)
        if candidates:
            return candidates[-1]
        waiter: asyncio.Future[PendingDevice] = self._hass.loop.create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    @callback
    def shutdown(self) -> None:
        """Cancel every timer and waiter."""
        for key in list(self._pending):
            self._drop(key)
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
