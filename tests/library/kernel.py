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
import struct
import time

import pytest

# SO_TIMESTAMPNS (asm-generic/socket.h), as aioxiaozhi.mqtt.udp asks for it.
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("@ll")
HELD = 0.02  # how long a probe waits in the kernel before it is read
GIVE_UP = 5.0


@contextmanager
def kernel_receive_times() -> Iterator[None]:
    """Hold receive timestamps on until the block ends, and wait until they are.

    Skips the test on a kernel that never stamps a datagram on arrival: there
    the endpoint's times are its read times, by design.
    """
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
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
    _data, ancillary, _flags, _addr = probe.recvmsg(16, socket.CMSG_SPACE(16))
    read_at = time.time()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESPEC.unpack_from(data)
            return seconds + nanoseconds / 1e9 < read_at - HELD / 2
    return False
