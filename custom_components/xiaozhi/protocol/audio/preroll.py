"""Microphone audio that arrives before the turn it belongs to (the pre-roll)."""

from collections import deque
from typing import Final

# Microphone packets kept from before ``listen start``, and the gap that tells
# live audio (one packet per frame) from the wake word's pre-roll (a burst).
EARLY_PACKETS: Final = 8
EARLY_WINDOW: Final = 0.5
BURST_GAP: Final = 0.01


class EarlyAudio:
    """Microphone audio that arrived before the turn that it belongs to.

    Over WebSocket, audio and messages share one connection, so everything
    before ``listen start`` is the wake word's pre-roll. Over MQTT + UDP they
    travel apart: the first live packets can overtake ``listen start``. The
    pre-roll arrives as a burst, live audio one packet per frame; the live
    packets at the end of what came early belong to the turn.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._packets: deque[tuple[float, bytes]] = deque(maxlen=EARLY_PACKETS)

    def add(self, when: float, payload: bytes) -> None:
        """Keep a packet that came before the turn."""
        self._packets.append((when, payload))

    def take_live(self, now: float) -> list[bytes]:
        """Return the recent live packets at the end (oldest first); forget all."""
        packets = list(self._packets)
        self._packets.clear()
        live: list[bytes] = []
        for index in range(len(packets) - 1, 0, -1):
            when = packets[index][0]
            if now - when > EARLY_WINDOW or when - packets[index - 1][0] < BURST_GAP:
                break
            live.append(packets[index][1])
        live.reverse()
        return live

    def clear(self) -> None:
        """Forget what came early."""
        self._packets.clear()
