"""Wrong device credentials, counted per address: a guesser is shut out.

Every way a device proves who it is (its WebSocket token, its MQTT login, a
vision, snapshot or sound URL) counts a wrong answer here. An address with
too many wrong answers in a window is refused there for a while, before its
credentials are even looked at. (The OTA check-in and activation hand out
nothing without the code on the screen, and stay open.)

A device gets it wrong only while it holds a token that was revoked (its
entry removed, or a new token it has not fetched yet). A right answer
clears its address's count, and pairing a device forgives its address, so
a device paired again is not shut out by its own old retries.

Home Assistant's own IP ban covers its web server only and offers no public
way to count a failed login from elsewhere; this limiter serves the MQTT
endpoint and the device views alike.
"""

from collections import Counter, OrderedDict, deque
import ipaddress
import time
from typing import Any, Final

from ..const import LOGGER

MAX_FAILURES: Final = 10  # wrong answers per address within the window
WINDOW: Final = 600.0  # seconds
BLOCK: Final = 600.0  # seconds an address is refused after too many
MAX_ADDRESSES: Final = 4096  # addresses remembered; the oldest go first


class FailedLogins:
    """Counts wrong credentials per address and blocks the worst."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window: float = WINDOW,
        block: float = BLOCK,
    ) -> None:
        """Block an address after ``max_failures`` within ``window`` seconds."""
        self._max_failures = max_failures
        self._window = window
        self._block = block
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._blocked: dict[str, float] = {}

    def failures(self, address: str) -> int:
        """Return the wrong answers of ``address`` remembered now."""
        return len(self._failures.get(address, ()))

    def as_dict(self) -> dict[str, Any]:
        """Return what is counted and blocked now, per network (diagnostics).

        An address is personal data; its network (IPv4 /24, IPv6 /64) still
        tells a flood from one host.
        """
        now = time.monotonic()
        failures: Counter[str] = Counter()
        for address, times in self._failures.items():
            failures[_network(address)] += len(times)
        blocked = {_network(a) for a, until in self._blocked.items() if until > now}
        return {"failures": dict(failures), "blocked": sorted(blocked)}

    def blocked(self, address: str | None) -> bool:
        """Return True while ``address`` is refused."""
        if not address or (until := self._blocked.get(address)) is None:
            return False
        if time.monotonic() < until:
            return True
        del self._blocked[address]
        return False

    def succeeded(self, address: str | None) -> None:
        """Forget the wrong answers of an address that answered right."""
        if address:
            self._failures.pop(address, None)

    def forgive(self, address: str | None) -> None:
        """Forget an address entirely: a device there was just paired."""
        if address:
            self._failures.pop(address, None)
            self._blocked.pop(address, None)

    def failed(self, address: str | None, what: str) -> None:
        """Count a wrong answer from ``address`` (``what`` it tried)."""
        if not address:
            return
        now = time.monotonic()
        times = self._failures.pop(address, None) or deque()
        times.append(now)
        while times and times[0] < now - self._window:
            times.popleft()
        self._failures[address] = times  # the most recent last
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)
        if len(times) < self._max_failures or self.blocked(address):
            LOGGER.debug("Wrong device credentials from %s (%s)", address, what)
            return
        if len(self._blocked) >= MAX_ADDRESSES:
            self._blocked = {
                blocked: until
                for blocked, until in self._blocked.items()
                if until > now
            }
            if len(self._blocked) >= MAX_ADDRESSES:
                del self._blocked[min(self._blocked, key=self._blocked.__getitem__)]
        self._blocked[address] = now + self._block
        self._failures.pop(address, None)
        LOGGER.warning(
            "Refusing %s on the device endpoints for %d minutes: %d wrong device "
            "credentials (last: %s)",
            address,
            self._block // 60,
            len(times),
            what,
        )


def _network(address: str) -> str:
    """Return the network an address belongs to: IPv4 /24, IPv6 /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "**REDACTED**"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return str(ipaddress.IPv4Network((int(ip), 24), strict=False))
    return str(ipaddress.IPv6Network((int(ip), 64), strict=False))
