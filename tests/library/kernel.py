"""Wait until the kernel stamps UDP datagrams when they arrive.

Linux turns its receive timestamps on for the whole machine when the first
socket asks for them, and off when the last one closes, both a little later
(``net_enable_timestamp`` defers the switch to a work queue). Until it is on,
a datagram that asked for its receive time gets the time it was read. A
server running for hours never sees that; a test that has just opened its
socket can, on a busy machine.
"""

from collections.abc import Iterator
from contextlib import contextmanager
import socket
import time

import pytest

from aioxiaozhi.mqtt import udp

HELD = 0.02  # how long a probe waits in the kernel before it is read
GIVE_UP = 5.0


@contextmanager
def kernel_receive_times() -> Iterator[None]:
    """Hold receive timestamps on until the block ends, and wait until they are.

    The probe asks for them as the endpoint does. Skips the test where the
    kernel never stamps a datagram on arrival: there the endpoint's times
    are its read times, by design.
    """
    if udp._TIMESTAMPNS is None:
        pytest.skip("no receive timestamps on this system")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, udp._TIMESTAMPNS, 1)
        probe.bind(("127.0.0.1", 0))
        deadline = time.monotonic() + GIVE_UP
        while not _stamped_on_arrival(probe):
            if time.monotonic() > deadline:
                pytest.skip("the kernel does not stamp datagrams on arrival")
        yield
    finally:
        probe.close()


def _stamped_on_arrival(probe: socket.socket) -> bool:
    """Send the probe a datagram, read it late, and say when it was stamped."""
    probe.sendto(b"probe", probe.getsockname())
    time.sleep(HELD)
    _data, ancillary, _flags, _addr = probe.recvmsg(16, udp._ANCILLARY)
    read_at = time.time()
    stamped = udp._kernel_time(ancillary)
    return stamped is not None and stamped < read_at - HELD / 2
