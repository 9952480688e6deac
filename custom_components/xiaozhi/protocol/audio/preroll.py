"""Microphone audio that arrives before the turn it belongs to: the pre-roll.

On a wake word from idle the firmware sends about two seconds from before
the wake word (the pre-roll: at most 33 packets, ``wake_word_audio_cache.cc``)
back to back, then ``listen detect``, then ``listen start``; live audio comes
after a warm-up of at least 120 ms, one packet per frame (``application.cc``
``ContinueWakeWordInvoke``, ``audio_service.cc`` ``EnableVoiceProcessing``).
Nothing in a packet marks the boundary. What tells them apart is what the
wire says, never when the event loop got to a packet:

- over WebSocket everything shares one ordered stream: what came before
  ``detect`` is the pre-roll, what comes after ``listen start`` is live;
- over MQTT + UDP the audio travels apart from the messages, and a busy
  server can read ``listen start`` before the pre-roll. The UDP header's
  sequence orders the packets as the device sent them, and the kernel's
  receive time shows the burst: the pre-roll is the run of packets at the
  wake's start that came back to back (:data:`BURST_GAP` apart at most, in
  kernel time, and :data:`TAIL_GAP` once the run is a burst); live packets
  come a frame apart, after the warm-up. The device restarts its sequence
  at each hello (``mqtt_protocol.cc``), and a wake from idle opens the
  channel, so the pre-roll is packets 1 to 33 or so. A pre-roll read after
  the turn started is recognised the same way, and kept from the turn.
"""

from dataclasses import dataclass
from typing import Final

# Pre-roll packets leave the device back to back; live ones one per frame
# (60 ms). A burst starts with packets this close together...
BURST_GAP: Final = 0.03
# ...and goes on while they come this soon after its last packet: the first
# live one leaves after the warm-up and a frame, 180 ms after it at least.
TAIL_GAP: Final = 0.09
# A pre-roll is this many packets at least (fewer: a wake word too soon
# after the last to fill its cache), at most the firmware's cache of 33
# whole 60 ms frames (34 where the last one is padded).
PREROLL_PACKETS: Final = 3
FULL_PREROLL: Final = 33
MAX_PREROLL: Final = 34
# Live packets that reached the kernel further apart than this do not
# follow each other: the older ones are left over from before.
LIVE_GAP: Final = 0.5
# What is held at most while a turn waits to start: 30 s of 60 ms frames.
MAX_HELD: Final = 500


@dataclass(frozen=True, slots=True, order=True)
class Heard:
    """What the wire says about one microphone packet (UDP)."""

    sequence: int
    received: float  # when the kernel received it, in seconds


type _Packet = tuple[Heard, bytes]


@dataclass(slots=True, frozen=True)
class HeldAudio:
    """A turn's audio split in two: the wake word's pre-roll, and live audio."""

    preroll: list[bytes]
    live: list[bytes]


class EarlyAudio:
    """One wake's microphone audio until its turn starts, and just after.

    Packets are held (:meth:`add`) until the turn starts; :meth:`split`
    returns its pre-roll and its live audio. After that, :meth:`after_start`
    keeps a pre-roll that came late (UDP) from the turn.
    """

    def __init__(self) -> None:
        """Start empty."""
        self.clear()

    def clear(self) -> None:
        """Forget everything: the device's audio is gone, or a new wake came."""
        self._detected = False
        self._started = False
        # WebSocket: packets by where they came in the stream.
        self._before: list[bytes] = []  # before detect (or start)
        self._after: list[bytes] = []  # after detect
        # UDP: the pre-roll, the run not told apart yet, and what is not
        # pre-roll (live, or left over from before it).
        self._preroll: list[_Packet] = []
        self._tail: Heard | None = None  # the pre-roll's last packet so far
        self._pending: list[_Packet] = []
        self._rest: list[_Packet] = []
        self._settled = False  # no more pre-roll can come

    @property
    def preroll(self) -> list[bytes]:
        """Return the wake word's pre-roll found so far."""
        if self._tail is not None:
            return _payloads(self._preroll)
        return self._before[-MAX_PREROLL:] if self._detected else []

    @property
    def preroll_whole(self) -> bool:
        """Return True when no more of the pre-roll can come.

        Over WebSocket it came before ``detect``; over UDP once the burst
        holds the firmware's whole cache, or live audio followed it.
        """
        if self._settled:
            return True
        if self._tail is not None:
            return len(self._preroll) >= FULL_PREROLL
        return self._detected and bool(self._before)

    def mark_detect(self) -> None:
        """Note ``listen detect``: the pre-roll, if any, was sent before it."""
        self._detected = True

    def forget_detect(self) -> None:
        """Forget a ``detect`` that belonged to no start (it came long before)."""
        self._detected = False

    def mark_start(self) -> None:
        """Note ``listen start``: what the device says from now on is the turn's."""
        self._started = True

    def add(self, payload: bytes, heard: Heard | None) -> None:
        """Keep a packet that came before the turn started."""
        if heard is None:
            held = self._after if self._detected or self._started else self._before
            held.append(payload)
            if len(held) > MAX_HELD:
                del held[0]
            return
        self._rest.extend(self._feed((heard, payload)))
        if len(self._rest) > MAX_HELD:
            del self._rest[0]

    def split(self) -> HeldAudio:
        """Return the pre-roll and the live audio held, oldest first.

        Call it when the turn starts. A burst still coming stays for
        :meth:`after_start`.
        """
        if not self._started:
            return HeldAudio([], [])
        if self._tail is None and not self._pending and not self._rest:
            # WebSocket (or nothing yet): by where the messages came. Before
            # a listen start without detect: left over from before the turn.
            held = HeldAudio(self.preroll, self._after)
            self._before, self._after = [], []
            return held
        rest, self._rest = self._rest, []
        if not self._detected:
            # No wake word, no pre-roll: the run that overtook listen start
            # is the turn's (a burst too: live packets bunched on the way).
            rest += self._preroll + self._pending
            self._preroll, self._pending, self._tail = [], [], None
            self._settled = True
        elif (tail := self._tail) is not None:
            # Sent after the pre-roll: live; before it: left over.
            live = [packet for packet in rest if packet[0].sequence > tail.sequence]
            return HeldAudio(self.preroll, _payloads(live))
        # (With detect and no pre-roll yet, a run still coming may be it.)
        return HeldAudio([], _payloads(_last_run(rest)))

    def after_start(self, payload: bytes, heard: Heard | None) -> list[bytes]:
        """Return what of a packet that came after the turn started is the turn's.

        Over UDP a pre-roll read after ``listen start`` comes as a burst: it
        is kept from the turn (and added to the pre-roll). A packet is held
        until it is told apart (a live one one frame at most).
        """
        if heard is None or self._settled:
            return [payload]
        return _payloads(self._feed((heard, payload)))

    def _feed(self, packet: _Packet) -> list[_Packet]:
        """Take a UDP packet in; return the packets that are not pre-roll."""
        if self._settled:
            return [packet]
        heard = packet[0]
        if (tail := self._tail) is not None:
            if heard.sequence < tail.sequence or (
                heard.received - tail.received <= TAIL_GAP
                and len(self._preroll) < MAX_PREROLL
            ):
                # Sent before a pre-roll packet, or right after it: pre-roll.
                self._preroll.append(packet)
                if heard.sequence > tail.sequence:
                    self._tail = heard
                return []
            self._settled = True  # the burst is over: live from here on
            return [packet]
        pending = self._pending
        if not pending or (
            heard.received - pending[-1][0].received <= BURST_GAP
            and len(pending) < MAX_PREROLL
        ):
            pending.append(packet)
            if len(pending) >= PREROLL_PACKETS:
                # A burst: the wake word's pre-roll.
                self._preroll, self._pending = pending, []
                self._tail = max(heard for heard, _ in pending)
            return []
        # A gap after fewer than a pre-roll's packets: no pre-roll. Once the
        # turn started none comes any more: what follows is live.
        self._pending = [packet]
        if self._started:
            self._settled = True
            self._pending = []
            return [*pending, packet]
        return pending


def _payloads(packets: list[_Packet]) -> list[bytes]:
    """Return the packets' payloads in the order the device sent them."""
    return [payload for _, payload in sorted(packets, key=lambda p: p[0].sequence)]


def _last_run(packets: list[_Packet]) -> list[_Packet]:
    """Return the packets that follow each other up to the newest one."""
    packets = sorted(packets, key=lambda packet: packet[0].received)
    start = len(packets)
    while start > 1 and (
        packets[start - 1][0].received - packets[start - 2][0].received <= LIVE_GAP
    ):
        start -= 1
    return packets[start - 1 :] if packets else []
