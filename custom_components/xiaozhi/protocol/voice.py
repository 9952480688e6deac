"""The voice path's timing and faces: downlink pacing and emotions.

A device queues at most 40 packets (2.4 s) and drops the rest, and plays
only while Speaking. The pacer keeps a few frames ahead of what the device
has played, one frame at a time in real time, and knows when playback ends.
"""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

# Frames sent ahead of playback: enough to ride out Wi-Fi jitter, far below
# the firmware's queue of 40 (20 after its notify change).
LEAD_FRAMES: Final = 5
# ``tts start`` takes effect one pass of the device's main loop later; audio
# sent sooner may be dropped.
TTS_START_SETTLE: Final = 0.1

# Emoji an agent puts in its reply, and the face they stand for.
_EMOJI_EMOTIONS: Final = {
    "😊": "happy",
    "🙂": "happy",
    "😀": "happy",
    "😃": "happy",
    "😄": "laughing",
    "😆": "laughing",
    "😂": "laughing",
    "🤣": "laughing",
    "😜": "funny",
    "🤪": "silly",
    "😢": "sad",
    "😞": "sad",
    "😭": "crying",
    "😠": "angry",
    "😡": "angry",
    "😍": "loving",
    "🥰": "loving",
    "❤": "loving",
    "😳": "embarrassed",
    "😲": "surprised",
    "😮": "surprised",
    "😱": "shocked",
    "🤔": "thinking",
    "😉": "winking",
    "😎": "cool",
    "😌": "relaxed",
    "😋": "delicious",
    "😘": "kissy",
    "😏": "confident",
    "😴": "sleepy",
    "😕": "confused",
}


def emotion_for(text: str, *, failed: bool = False, acted: bool = False) -> str:
    """Return the face for a reply.

    An emoji in the reply says it best; otherwise a failed request is
    ``confused``, an action done ``happy``, anything else ``neutral``.
    """
    for char in text:
        if (emotion := _EMOJI_EMOTIONS.get(char)) is not None:
            return emotion
    if failed:
        return "confused"
    return "happy" if acted else "neutral"


type SendAudio = Callable[[bytes, int], Awaitable[None]]


@dataclass(slots=True)
class PacingStats:
    """What a paced playback did."""

    frames: int = 0
    max_lead: float = 0.0
    leads: list[float] = field(default_factory=list)


class DownlinkPacer:
    """Send Opus frames no more than ``lead`` frames ahead of the device's playback.

    The device plays frames back to back as they arrive; when it runs dry it
    starts again with the next frame. ``playback_end`` is when it will have
    played everything sent so far.
    """

    def __init__(
        self,
        send: SendAudio,
        *,
        frame_duration: float = 0.06,
        lead: int = LEAD_FRAMES,
        not_before: float | None = None,
    ) -> None:
        """Send with ``send(packet, timestamp_ms)``, not before ``not_before``."""
        self._send = send
        self._frame = frame_duration
        self._lead = lead
        self._loop = asyncio.get_running_loop()
        self._not_before = not_before if not_before is not None else self._loop.time()
        self.playback_end = self._not_before
        self.stats = PacingStats()
        self._timestamp = 0

    @property
    def lead_seconds(self) -> float:
        """Return how much audio the device holds now, in seconds."""
        return max(0.0, self.playback_end - self._loop.time())

    async def send(self, packet: bytes) -> None:
        """Send one frame as soon as the device has room for it in the lead."""
        now = self._loop.time()
        wait = max(
            self._not_before - now,
            self.playback_end - now - self._lead * self._frame,
        )
        if wait > 0:
            await asyncio.sleep(wait)
            now = self._loop.time()
        await self._send(packet, self._timestamp)
        self._timestamp += round(self._frame * 1000)
        self.playback_end = max(self.playback_end, now) + self._frame
        lead = self.playback_end - now
        self.stats.frames += 1
        self.stats.leads.append(lead)
        self.stats.max_lead = max(self.stats.max_lead, lead)

    async def drain(self) -> None:
        """Wait until the device has played everything sent."""
        if (remaining := self.playback_end - self._loop.time()) > 0:
            await asyncio.sleep(remaining)


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
