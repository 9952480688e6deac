"""Pairing of devices: codes shown on the device, checked in the UI.

A device is known by its identity: the MAC it sends as ``Device-Id`` and the
random UUID it generated and sends as ``Client-Id``. The OTA endpoint needs no
login, so a pairing waits per identity, a few per source address at most, and
codes expire together with their discovery cards. What a device calls itself
is its own choice: it is shown only as a cleaned board identifier.
"""

import asyncio
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
import hmac
import ipaddress
import logging
import re
import secrets
import time

from homeassistant.config_entries import SOURCE_INTEGRATION_DISCOVERY
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import discovery_flow
from homeassistant.helpers.event import async_call_later

from ..const import (
    CODE_TTL,
    DOMAIN,
    LOGGER,
    MAX_CODE_ATTEMPTS,
    MAX_PENDING_DEVICES,
    MAX_PENDING_PER_ADDRESS,
)

_BOARD_IDENTIFIER = re.compile(r"^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$")
_DIGIT_RUN = re.compile(r"[0-9]{3,}")
MAX_BOARD_IDENTIFIER = 32
# A board identifier holding this many digits could spell out a code.
MAX_BOARD_DIGITS = 5


def board_identifier(board: str | None) -> str | None:
    """Return a board name fit to show the user, or None.

    The device chooses its board name, so it may be a sentence meant for the
    user ("Type 123456 below"). Only an identifier is shown: letters, digits
    and hyphens (``.`` and ``_`` read as hyphens), 32 characters at most, with
    no run of three digits and at most five digits in all, so that it can
    never pass for a code.
    """
    if not board:
        return None
    candidate = re.sub(r"[._]", "-", board.strip())
    if (
        len(candidate) > MAX_BOARD_IDENTIFIER
        or not _BOARD_IDENTIFIER.match(candidate)
        or _DIGIT_RUN.search(candidate)
        or sum(char.isdigit() for char in candidate) > MAX_BOARD_DIGITS
    ):
        return None
    return candidate


def device_name(mac: str, board: str | None) -> str:
    """Return how a device is named in titles, dialogs and notifications."""
    name = f"XiaoZhi {mac.upper()}"
    if (identifier := board_identifier(board)) is not None:
        name += f" ({identifier})"
    return name


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


def network_of(address: str) -> str:
    """Return what counts as one sender: an IPv4 address, or an IPv6 /64.

    One host holds a whole IPv6 /64; counting its addresses one by one would
    let it pass for 64 senders.
    """
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


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
    # A client connected with the pairing token now: one link at a time.
    linked: bool = field(default=False, repr=False)

    @property
    def key(self) -> tuple[str, str]:
        """Return the identity: MAC and Client-Id."""
        return self.mac, self.client_id

    @property
    def name(self) -> str:
        """Return how the device is called until it is paired."""
        return device_name(self.mac, self.board)

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
        # When codes typed in the user's flow missed, any device.
        self._code_misses: deque[float] = deque()
        self._evicted_at = -CODE_TTL
        self._refused: dict[str, float] = {}

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
    ) -> PendingDevice | None:
        """Register an identity that wants to pair; start pairing it if new.

        Each new identity gets a discovery card. An identity with the MAC of a
        paired device may be that device after a factory reset: its card
        offers to pair it again.

        Returns None when its address already has too many devices waiting.
        When everyone together has, the oldest identity of the busiest
        address makes room: a flood from some addresses never locks out a
        device on another.
        """
        pending = self.get(mac, client_id)
        if pending is not None:
            pending.board, pending.firmware = board, firmware
            return pending
        waiting = Counter(network_of(item.address) for item in self._pending.values())
        if waiting[network_of(address)] >= MAX_PENDING_PER_ADDRESS:
            self._refuse(address, waiting[network_of(address)])
            return None
        if len(self._pending) >= MAX_PENDING_DEVICES:
            self._evict(waiting)
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
        LOGGER.warning(
            "Refusing to pair more devices from %s: %d from there already wait "
            "to be paired; more are refused until their codes expire",
            address,
            from_address,
        )

    def _evict(self, waiting: Counter[str]) -> None:
        """Forget the oldest identity of the network with the most waiting.

        Among networks with as many, the one that came last yields: when a
        flood spreads over many addresses, one each, the newest goes, not the
        device that has waited longest (likely the one being set up).
        """
        most = max(waiting.values())
        busiest = [
            item
            for item in self._pending.values()
            if waiting[network_of(item.address)] == most
        ]
        newest = max(busiest, key=lambda item: item.expires)
        address = network_of(newest.address)
        oldest = min(
            (item for item in busiest if network_of(item.address) == address),
            key=lambda item: item.expires,
        )
        now = time.monotonic()
        level = logging.DEBUG
        if self._evicted_at + CODE_TTL <= now:  # once per code lifetime
            self._evicted_at, level = now, logging.WARNING
        LOGGER.log(
            level,
            "%d devices wait to be paired; forgetting the oldest from %s, "
            "the address with the most",
            len(self._pending),
            address,
        )
        self._drop(oldest.key)
        if not any(other[0] == oldest.mac for other in self._pending):
            self._attempts.pop(oldest.mac, None)
            self._abort_discovery(oldest.mac)

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
    def _abort_discovery(self, mac: str, keep: str | None = None) -> None:
        """Close the discovery cards of a MAC (all but the flow ``keep``)."""
        flows = self._hass.config_entries.flow.async_progress_by_handler(
            DOMAIN, match_context={"unique_id": mac}
        )
        for flow in flows:
            if (
                flow["context"].get("source") == SOURCE_INTEGRATION_DISCOVERY
                and flow["flow_id"] != keep
            ):
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
    def complete(self, pending: PendingDevice, flow_id: str) -> None:
        """Forget the identities of a MAC once one of them is paired.

        Other discovery cards of that MAC close; ``flow_id`` is the flow that
        paired it.
        """
        for other in self.pending_for(pending.mac):
            self._drop(other.key)
        pending.ended.set()
        self._attempts.pop(pending.mac, None)
        self._abort_discovery(pending.mac, keep=flow_id)

    @callback
    def find_code(self, code: str) -> tuple[CodeCheck, PendingDevice | None]:
        """Find the waiting device that shows this code.

        The code on the user's own screen decides which device they pair;
        every code is compared, in constant time. Typed codes are matched
        against every waiting device, so the misses within a code's
        lifetime are counted across all flows: after too many, every waiting
        device gets a new code. A guess hits one of N waiting codes with a
        chance of N in a million, and five guesses at most per code.
        """
        typed = code.strip().replace(" ", "").encode()
        waiting = self._waiting(lambda _mac: True)
        found: PendingDevice | None = None
        for pending in waiting:
            if hmac.compare_digest(typed, pending.code.encode()):
                found = pending
        if found is not None:
            return CodeCheck.OK, found
        now = time.monotonic()
        misses = self._code_misses
        misses.append(now)
        while misses and misses[0] < now - CODE_TTL:
            misses.popleft()  # typos of days ago do not count
        if len(misses) < MAX_CODE_ATTEMPTS:
            return CodeCheck.INVALID, None
        LOGGER.warning("Too many wrong codes typed; issuing new codes")
        misses.clear()
        for pending in waiting:
            pending.code = new_code()
            self._arm(pending)
        return CodeCheck.ROTATED, None

    @callback
    def shutdown(self) -> None:
        """Cancel every timer."""
        for key in list(self._pending):
            self._drop(key)
