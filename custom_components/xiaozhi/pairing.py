"""Pairing of new devices: codes shown on the device, checked in the UI."""

import asyncio
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

from .const import CODE_TTL, DOMAIN, LOGGER, MAX_CODE_ATTEMPTS, MAX_PENDING_DEVICES

_MAC = re.compile(r"^[0-9a-f]{2}([:-]?)[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")


def normalize_mac(value: str | None) -> str | None:
    """Return ``aa:bb:cc:dd:ee:ff`` for any common MAC spelling, else None."""
    if value is None:
        return None
    value = value.strip().lower()
    if not _MAC.match(value):
        return None
    digits = value.replace(":", "").replace("-", "")
    return ":".join(digits[i : i + 2] for i in range(0, 12, 2))


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
    """A device that checked in and waits to be paired."""

    mac: str
    board: str
    firmware: str
    code: str = field(default_factory=new_code)
    challenge: str = field(default_factory=lambda: secrets.token_hex(16))
    expires: float = 0.0
    attempts: int = 0
    timer: CALLBACK_TYPE | None = field(default=None, repr=False)

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
        self._pending: dict[str, PendingDevice] = {}
        self._waiters: list[asyncio.Future[PendingDevice]] = []

    def get(self, mac: str) -> PendingDevice | None:
        """Return the pending device with this MAC, if its code is still valid."""
        pending = self._pending.get(mac)
        if pending is not None and pending.remaining() <= 0:
            self._expire(mac)
            return None
        return pending

    @callback
    def check_in(self, mac: str, board: str, firmware: str) -> PendingDevice | None:
        """Register an unknown device; start pairing it if it is new.

        Returns None when too many devices already wait to be paired.
        """
        pending = self.get(mac)
        if pending is not None:
            pending.board, pending.firmware = board, firmware
            return pending
        if len(self._pending) >= MAX_PENDING_DEVICES:
            LOGGER.warning(
                "Not pairing %s: %d devices already wait to be paired",
                mac.upper(),
                len(self._pending),
            )
            return None
        pending = PendingDevice(mac=mac, board=board, firmware=firmware)
        self._arm(pending)
        self._pending[mac] = pending
        LOGGER.info("%s wants to pair", pending.name)
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(pending)
                return pending
        discovery_flow.async_create_flow(
            self._hass,
            DOMAIN,
            context={"source": SOURCE_INTEGRATION_DISCOVERY},
            data={"mac": mac, "board": board, "firmware": firmware},
        )
        return pending

    def _arm(self, pending: PendingDevice) -> None:
        if pending.timer is not None:
            pending.timer()
        pending.expires = time.monotonic() + CODE_TTL
        pending.timer = async_call_later(
            self._hass, CODE_TTL, lambda _now: self._expire(pending.mac)
        )

    @callback
    def _expire(self, mac: str) -> None:
        pending = self._pending.pop(mac, None)
        if pending is None:
            return
        if pending.timer is not None:
            pending.timer()
        LOGGER.info("Pairing code of %s expired", pending.name)
        flows = self._hass.config_entries.flow.async_progress_by_handler(
            DOMAIN, match_context={"unique_id": mac}
        )
        for flow in flows:
            if flow["context"].get("source") == SOURCE_INTEGRATION_DISCOVERY:
                self._hass.config_entries.flow.async_abort(flow["flow_id"])

    @callback
    def check_code(self, mac: str, code: str) -> CodeCheck:
        """Check a code typed by the user; rotate it after too many misses."""
        pending = self.get(mac)
        if pending is None:
            return CodeCheck.EXPIRED
        typed = code.strip().replace(" ", "")
        if hmac.compare_digest(typed.encode(), pending.code.encode()):
            return CodeCheck.OK
        pending.attempts += 1
        if pending.attempts < MAX_CODE_ATTEMPTS:
            return CodeCheck.INVALID
        LOGGER.warning("Too many wrong codes for %s; issuing a new code", pending.name)
        pending.code = new_code()
        pending.attempts = 0
        self._arm(pending)
        return CodeCheck.ROTATED

    @callback
    def complete(self, mac: str) -> None:
        """Forget a device that is now paired."""
        pending = self._pending.pop(mac, None)
        if pending is not None and pending.timer is not None:
            pending.timer()

    async def wait_for_device(self, exclude: set[str]) -> PendingDevice:
        """Return a pending device not in ``exclude``, waiting for one if needed."""
        candidates = [
            pending
            for mac in list(self._pending)
            if mac not in exclude and (pending := self.get(mac)) is not None
        ]
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
        for mac in list(self._pending):
            pending = self._pending.pop(mac)
            if pending.timer is not None:
                pending.timer()
        for waiter in self._waiters:
            waiter.cancel()
        self._waiters.clear()
