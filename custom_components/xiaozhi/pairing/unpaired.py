"""Clients that connect before they are paired: they get their code, nothing else.

Some clients (xiaozhi-sdk) dial the WebSocket at once with the token handed
out with their code. Their link is a real session with this restricted
handler: no MCP, nobody listens to the microphone; the code is shown
(``alert``, the sentence) and, when the preferred voice assistant has
text-to-speech, said digit by digit; again when the user says the wake
word. The link ends when the code is entered (the client connects again
with the same token, now the device's) or expires.
"""

import asyncio
import contextlib
from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..protocol import CloseReason, DeviceEvent, DeviceEventType, DeviceSession
from ..protocol.audio.pacing import TTS_START_SETTLE
from ..protocol.audio.preroll import Heard
from ..speaker.channel import VoiceChannel
from ..speaker.speech import async_speech, play_audio, stream_pcm
from ..texts import async_device_text
from .manager import PendingDevice


class UnpairedHandler:
    """Serves the session of a client that is not paired yet."""

    def __init__(self, hass: HomeAssistant, pending: PendingDevice) -> None:
        """Show ``pending``'s code on the session that will be handed in."""
        self._hass = hass
        self._pending = pending
        self._channel: VoiceChannel | None = None
        self._speaker: asyncio.Task[None] | None = None
        self._ended: asyncio.Task[None] | None = None
        self._showing: asyncio.Task[None] | None = None

    def attach(self, session: DeviceSession) -> None:
        """Serve ``session``; it closes when pairing ends (paired, expired)."""
        self._channel = VoiceChannel(
            session, None, lambda _event: None, self._pending.name
        )
        self._ended = session.spawn(self._close_when_ended(session))

    def session_ready(self, session: DeviceSession) -> None:
        """Show the code once the hello is answered."""
        self._showing = session.spawn(self._show_code())

    def session_tools(self, session: DeviceSession) -> None:
        """Nothing to take: no MCP before pairing."""

    def session_status(self, session: DeviceSession, status: dict[str, Any]) -> None:
        """Nothing to take: no MCP before pairing."""

    def session_event(self, session: DeviceSession, event: DeviceEvent) -> None:
        """Show the code again when the user says the wake word.

        Not on ``listen start``: a client in auto mode sends it after every
        ``tts stop``, ours included, which would show and say the code for as
        long as it lives. One showing at a time, however many frames come.
        """
        if event.type is DeviceEventType.WAKE_WORD and (
            self._showing is None or self._showing.done()
        ):
            self._showing = session.spawn(self._show_code())

    def session_audio(
        self, session: DeviceSession, payload: bytes, heard: Heard | None
    ) -> None:
        """Nobody listens before pairing."""

    def session_closed(self, session: DeviceSession, reason: CloseReason) -> None:
        """Stop saying the code."""
        for task in (self._speaker, self._ended):
            if task is not None:
                task.cancel()

    async def _close_when_ended(self, session: DeviceSession) -> None:
        await self._pending.ended.wait()
        await session.close(CloseReason.SERVER_CLOSED, "pairing ended")

    async def _show_code(self) -> None:
        """Show the code; say it unless it is being said (once, whole)."""
        channel = self._channel
        if channel is None:  # pragma: no cover - attached before it starts
            return
        code = self._pending.code
        text = await async_device_text(self._hass, "pairing_code", {"code": code})
        try:
            await channel.async_show_alert("Home Assistant", text, "neutral")
        except HomeAssistantError as err:
            LOGGER.debug("%s: pairing code not shown: %s", channel.name, err)
            return
        if self._speaker is None or self._speaker.done():
            self._speaker = self._hass.async_create_background_task(
                self._say_code(channel, text),
                f"xiaozhi pairing code of {self._pending.mac}",
            )

    async def _say_code(self, channel: VoiceChannel, text: str) -> None:
        # Digit by digit: "1 2 3", not "one hundred and twenty-three".
        spoken = await async_device_text(
            self._hass, "pairing_code", {"code": " ".join(self._pending.code)}
        )
        try:
            await channel.async_start_speaking()
            await channel.async_show_sentence(text)
            if (speech := async_speech(self._hass, spoken)) is not None:
                await play_audio(
                    channel,
                    stream_pcm(self._hass, speech, channel.sample_rate),
                    not_before=self._hass.loop.time() + TTS_START_SETTLE,
                )
        except HomeAssistantError as err:
            LOGGER.debug("%s: pairing code not spoken: %s", channel.name, err)
        finally:
            with contextlib.suppress(HomeAssistantError):
                await channel.async_stop_speaking()
