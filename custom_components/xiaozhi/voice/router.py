"""Where a device's voice goes: its Assist satellite, or a polite refusal.

The runtime passes voice events and microphone audio here. The satellite
entity registers as the handler while it exists; with no handler (the entity
is disabled) a device that starts listening is told so and its conversation
ends, rather than streaming its microphone to nobody.
"""

from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from homeassistant.core import CALLBACK_TYPE, callback
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..protocol import DeviceEvent, DeviceEventType
from ..speaker.channel import VoiceChannel

VOICE_EVENTS: Final = frozenset(
    {
        DeviceEventType.WAKE_WORD,
        DeviceEventType.LISTENING_STARTED,
        DeviceEventType.LISTENING_STOPPED,
        DeviceEventType.ABORTED,
    }
)


class VoiceHandler(Protocol):
    """What serves a device's voice (the Assist satellite entity)."""

    def voice_event(self, event: DeviceEvent) -> None:
        """Take a wake word, listen start/stop or abort."""

    def voice_audio(self, payload: bytes) -> None:
        """Take one Opus packet from the microphone."""

    def voice_closed(self) -> None:
        """Learn that the device's audio is gone (link closed, or goodbye)."""

    def voice_typed(self, text: str) -> None:
        """Answer a question the user typed on a text client."""

    @property
    def voice_busy(self) -> bool:
        """Return True while a reply or announcement is spoken."""

    async def async_announce_media(self, media_id: str) -> None:
        """Play a sound as an announcement (the media player's announce)."""


type TextLookup = Callable[[str], Coroutine[Any, Any, str]]
type BackgroundRunner = Callable[[Coroutine[Any, Any, None], str], None]


class VoiceRouter:
    """Passes one device's voice to its handler."""

    def __init__(self, name: str, text: TextLookup, run: BackgroundRunner) -> None:
        """Route for the device ``name``; ``run`` starts background work."""
        self._name = name
        self._text = text
        self._run = run
        self._handler: VoiceHandler | None = None

    @callback
    def async_set_handler(self, handler: VoiceHandler) -> CALLBACK_TYPE:
        """Have ``handler`` serve the device's voice until the callback is called."""
        self._handler = handler

        @callback
        def remove() -> None:
            if self._handler is handler:
                self._handler = None

        return remove

    @callback
    def event(self, event: DeviceEvent, channel: VoiceChannel) -> None:
        """Take a voice event of the device."""
        if event.type is DeviceEventType.CONVERSATION_ENDED:
            self.closed()
        elif event.type not in VOICE_EVENTS:
            return
        elif self._handler is not None:
            self._handler.voice_event(event)
        elif event.type is DeviceEventType.LISTENING_STARTED:
            # Nobody serves it: a listening device would stream its microphone
            # for as long as the link stays open.
            self._run(self._refuse(channel), "xiaozhi refuse voice")

    @callback
    def typed(self, text: str, channel: VoiceChannel) -> None:
        """Take a question the user typed (a ``detect`` with a sentence)."""
        if self._handler is not None:
            self._handler.voice_typed(text)
        else:
            self._run(self._refuse(channel), "xiaozhi refuse voice")

    @property
    def busy(self) -> bool:
        """Return True while the handler speaks a reply or an announcement."""
        return self._handler is not None and self._handler.voice_busy

    async def async_announce(self, media_id: str) -> None:
        """Play a sound as an announcement; raise when nobody can."""
        if self._handler is None:
            raise HomeAssistantError(
                translation_domain=DOMAIN,
                translation_key="announce_voice_off",
                translation_placeholders={"name": self._name},
            )
        await self._handler.async_announce_media(media_id)

    @callback
    def audio(self, payload: bytes) -> None:
        """Take one Opus packet of the device's microphone."""
        if self._handler is not None:
            self._handler.voice_audio(payload)

    @callback
    def closed(self) -> None:
        """Tell the handler the device's audio is gone (link closed, or goodbye)."""
        if self._handler is not None:
            self._handler.voice_closed()

    async def _refuse(self, channel: VoiceChannel) -> None:
        LOGGER.info(
            "%s started listening, but its Assist satellite is disabled; ending "
            "the conversation",
            self._name,
        )
        try:
            await channel.async_show_alert(
                "Home Assistant", await self._text("voice_off"), "sad"
            )
        except HomeAssistantError as err:
            LOGGER.debug("Could not tell %s: %s", self._name, err)
        await channel.async_end_conversation()
