"""Downlink pacing: Opus frames to a device in real time.

A device queues at most 40 packets (2.4 s) and drops the rest, and plays
only while Speaking. The pacer keeps a few frames ahead of what the device
has played, one frame at a time in real time, and knows when playback ends.
Boards without PSRAM get no lead: every frame waits until the one before has
played.
"""

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

# Frames sent ahead of playback: enough to ride out Wi-Fi jitter, far below
# the firmware's queue of 40 (20 after its notify change).
LEAD_FRAMES: Final = 5
# ``tts start`` takes effect one pass of the device's main loop later; audio
# sent sooner may be dropped.
TTS_START_SETTLE: Final = 0.1
# Chips that cannot have PSRAM, as the OTA check names them
# (``chip_model_name``). An ESP32-C3 board (about 80 KB of heap) stopped after
# one syllable and rebooted when a server sent its first six frames within
# 10 ms, and played whole replies with every frame paced
# (xinnan-tech/xiaozhi-esp32-server issue 3349).
NO_PSRAM_CHIPS: Final = frozenset({"esp32c2", "esp32c3", "esp32c6"})


def lead_frames(chip: str | None) -> int:
    """Return the frames to send ahead of a device's playback, by its chip.

    None for a chip without PSRAM: frame n goes at start + n frames, and the
    first one as early as with a lead.
    """
    if chip is not None and chip.lower() in NO_PSRAM_CHIPS:
        return 0
    return LEAD_FRAMES


type SendAudio = Callable[[bytes, int], Awaitable[None]]


@dataclass(slots=True)
class PacingStats:
    """What a paced playback did."""

    frames: int = 0
    max_lead: float = 0.0


class DownlinkPacer:
    """Send Opus frames no more than ``lead`` frames ahead of the device's playback.

    The device plays frames back to back as they arrive; when it runs dry it
    starts again with the next frame. ``playback_end`` is when it will have
    played everything sent so far. The first ``lead`` + 1 frames go at once;
    with a lead of 0 every frame goes when the one before has played.
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

    async def send(self, packet: bytes, duration: float | None = None) -> None:
        """Send one frame as soon as the device has room for it in the lead.

        ``duration`` is the audio ``packet`` carries when it is not one frame
        (a page of an Ogg stream); the lead stays ``lead`` frames of time.
        """
        now = self._loop.time()
        wait = max(
            self._not_before - now,
            self.playback_end - now - self._lead * self._frame,
        )
        if wait > 0:
            await asyncio.sleep(wait)
        await self._send(packet, self._timestamp)
        # The frame plays from when it went out: a send can take a while (over
        # MQTT + UDP the first waits for the device's first audio).
        now = self._loop.time()
        length = self._frame if duration is None else duration
        self._timestamp += round(length * 1000)
        self.playback_end = max(self.playback_end, now) + length
        lead = self.playback_end - now
        self.stats.frames += 1
        self.stats.max_lead = max(self.stats.max_lead, lead)

    async def drain(self) -> None:
        """Wait until the device has played everything sent."""
        if (remaining := self.playback_end - self._loop.time()) > 0:
            await asyncio.sleep(remaining)
