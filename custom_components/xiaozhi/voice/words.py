"""Home Assistant's own words on a device: announcements and questions.

Both take the device from whatever turn it is in (the conversation gives it
up, ``take``), stop the media that plays, and play through the announcer
(``media/announce.py``): on the open audio in a conversation, or fetched as a
sound (or shown as text) by an idle device on MQTT. An announcement that
played to its end ends the conversation (the device would listen again); a
question waits for the device to listen again by itself, and its next turn
answers.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from homeassistant.components.assist_satellite import AssistSatelliteAnnouncement
from homeassistant.core import HomeAssistant, callback

from ..entry_data import XiaozhiEntryData
from ..errors import translated_error
from ..media.announce import Announcer
from ..media.player import MediaPlayback
from ..speaker.channel import VoiceChannel
from .stage import Stage

# After a question the device listens again by itself (auto mode).
ANSWER_START_TIMEOUT: Final = 10.0

type Take = Callable[[Stage], VoiceChannel]


class Words:
    """Home Assistant's announcements and questions on one device."""

    def __init__(
        self,
        hass: HomeAssistant,
        name: str,
        device: XiaozhiEntryData,
        player: MediaPlayback,
        *,
        take: Take,
        release: Callable[[Stage], None],
        end: Callable[[], Awaitable[None]],
    ) -> None:
        """Speak on the device ``name``.

        ``take(stage)`` takes the device from its turn for Home Assistant's
        words and returns the live channel (or raises the announcement's
        error); ``release(stage)`` gives it back when it is still in
        ``stage``; ``end`` ends the conversation.
        """
        self._hass = hass
        self._name = name
        self._device = device
        self._player = player
        self._take = take
        self._release = release
        self._end = end
        self.announcer = Announcer(hass, name, device)
        self._asked: asyncio.Future[bool] | None = None

    @property
    def asking(self) -> bool:
        """Return True while a question waits for the device to listen."""
        return self._asked is not None

    @callback
    def answered(self, *, listening: bool) -> bool:
        """Resolve the question that waits; return True when one did."""
        asked = self._asked
        if asked is None:
            return False
        if not asked.done():
            asked.set_result(listening)
        return True

    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Play an announcement; return once it has played.

        Media that plays stops first, and does not resume.
        """
        await self._player.async_stop(end_conversation=False)
        channel = self._take(Stage.ANNOUNCING)
        try:
            played = await self.announcer.async_announce(channel, announcement)
        finally:
            self._release(Stage.ANNOUNCING)
        if played and not self._device.push_to_talk:
            # After tts stop the device would start listening. (Aborted, it
            # is the abort's: a wake word goes on to a turn of its own.)
            await self._end()

    async def async_ask(
        self, channel: VoiceChannel | None, announcement: AssistSatelliteAnnouncement
    ) -> None:
        """Play the announcement; the device then listens, and its turn answers."""
        channel = Announcer.channel(channel, self._name)
        if not channel.open and channel.idle_reachable:
            # The firmware opens its microphone only for its own conversations.
            raise translated_error("conversation_needs_wake", self._name)
        listening = False
        # Push-to-talk waits for its button after the announcement: not asked.
        if not self._device.push_to_talk:
            channel = self._take(Stage.ANNOUNCING)
            asked = self._asked = self._hass.loop.create_future()
            try:
                if await self.announcer.async_play(channel, announcement):
                    self._release(Stage.ANNOUNCING)
                    async with asyncio.timeout(ANSWER_START_TIMEOUT):
                        listening = await asked
            except TimeoutError:
                pass  # it did not listen again
            finally:
                self._asked = None
                self._release(Stage.ANNOUNCING)
        if not listening:
            # Push-to-talk, aborted, gone or not listening: nobody can answer.
            raise translated_error("no_answer", self._name)
