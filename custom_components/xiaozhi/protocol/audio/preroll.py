"""Microphone audio that arrives before the turn it belongs to (the pre-roll)."""

from dataclasses import dataclass
from typing import Final

# Live packets that came just before ``listen start`` belong to the turn when
# they are this recent; older audio is the pre-roll or left over.
EARLY_WINDOW: Final = 0.5
# Live audio comes one packet per frame (60 ms); the pre-roll comes as a
# burst, packets closer together than this.
BURST_GAP: Final = 0.01
# A pre-roll is a burst this long at least, and this long at most: the
# firmware's two seconds of 60 ms frames are 33 or 34 packets.
PREROLL_PACKETS: Final = 8
MAX_PREROLL: Final = 34
# A pre-roll's end that travelled apart from detect (UDP against MQTT) comes
# this soon after it; the first live frame is captured 60 ms after listen
# start, which follows detect at once.
LATE_PREROLL: Final = 0.04
# How far back the pre-roll may reach from ``listen start`` (firmware: 2 s).
PREROLL_SPAN: Final = 3.0
# What is held at most while a turn waits to start: 30 s of 60 ms frames.
MAX_HELD: Final = 500
# Where a packet came: before ``detect``, after it, after ``listen start``.
_BEFORE, _DETECTED, _STARTED = 0, 1, 2


@dataclass(slots=True, frozen=True)
class HeldAudio:
    """A turn's audio split in two: the wake word's pre-roll, and live audio."""

    preroll: list[bytes]
    live: list[bytes]


class EarlyAudio:
    """Microphone audio that arrived before the turn that it belongs to.

    The firmware sends about two seconds from before the wake word (the
    pre-roll) as a burst, then ``listen detect`` and ``listen start``, then
    live audio one packet per frame. Over WebSocket it all shares one
    connection and arrives in that order: what came before ``detect`` is the
    pre-roll. Over MQTT + UDP the audio travels apart from the messages: the
    first live packets can overtake ``listen start``, and the pre-roll can
    come after ``detect``, as a burst. Packets are held until the turn
    starts; :meth:`split` tells the two apart.
    """

    def __init__(self) -> None:
        """Start empty."""
        self._held: list[tuple[float, int, bytes]] = []  # when, phase, payload
        self._phase = _BEFORE
        self._detected_at: float | None = None
        self._started_at: float | None = None

    def add(self, when: float, payload: bytes) -> None:
        """Keep a packet that came before the turn started."""
        self._held.append((when, self._phase, payload))
        if len(self._held) > MAX_HELD:
            del self._held[0]

    def mark_detect(self, when: float) -> None:
        """Note ``listen detect``: the pre-roll, if any, came before it."""
        if self._phase == _BEFORE:
            self._phase = _DETECTED
            self._detected_at = when

    def forget_detect(self) -> None:
        """Forget a ``detect`` that belonged to no start (it came long before)."""
        self._detected_at = None

    def mark_start(self, when: float) -> None:
        """Note ``listen start``: what comes from now on is the turn's."""
        self._phase = _STARTED
        self._started_at = when

    @property
    def started(self) -> bool:
        """Return True once ``listen start`` was marked."""
        return self._started_at is not None

    def split(self) -> HeldAudio:
        """Return the pre-roll and the live audio (oldest first)."""
        start, detected = self._started_at, self._detected_at
        if start is None:
            return HeldAudio([], [])
        before = [(when, payload) for when, phase, payload in self._held if not phase]
        rest = [(when, payload) for when, phase, payload in self._held if phase]
        preroll: list[bytes] = []
        if detected is not None:
            timed = [
                payload for when, payload in before if detected - when <= PREROLL_SPAN
            ]
            # Over MQTT + UDP the pre-roll's end can come after detect: the
            # packets right after it, back to back, up to two seconds' worth.
            tail, previous, gap = 0, detected, LATE_PREROLL
            while (
                tail < len(rest)
                and len(timed) + tail < MAX_PREROLL
                and rest[tail][0] - previous < gap
            ):
                previous, gap = rest[tail][0], BURST_GAP
                tail += 1
            if tail < 2:
                tail = 0  # one packet is no burst: the first live frame
            preroll = timed + [payload for _, payload in rest[:tail]]
            rest = rest[tail:]
            if len(preroll) < PREROLL_PACKETS:
                preroll = []  # a packet or two, not a wake word's pre-roll
        else:
            # No wake word: live packets that overtook listen start are at
            # the end of what came before it; older ones are left over.
            live_from = len(before)
            while live_from > 1:
                when, previous = before[live_from - 1][0], before[live_from - 2][0]
                if start - when > EARLY_WINDOW or when - previous < BURST_GAP:
                    break
                live_from -= 1
            rest = before[live_from:] + rest
        return HeldAudio(preroll, [payload for _, payload in rest])

    def clear(self) -> None:
        """Forget what came early."""
        self._held = []
        self._phase = _BEFORE
        self._detected_at = None
        self._started_at = None
