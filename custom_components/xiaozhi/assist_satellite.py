"""The device as an Assist satellite: its voice runs through the user's pipeline.

The entity adapts the device's conversation (``voice/conversation.py``, the
one owner of its voice path) to Home Assistant's pipeline: it runs the
pipeline a turn asks for, passes the pipeline's events back, and hands the
announce and ask-question API over (``voice/words.py``). Timers set through
the device are shown on it (``voice/timers.py``).
"""

from collections.abc import AsyncIterator
from typing import Final, override

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import PipelineEvent, PipelineStage
from homeassistant.components.assist_satellite import (
    AssistSatelliteAnnouncement,
    AssistSatelliteConfiguration,
    AssistSatelliteEntity,
    AssistSatelliteEntityDescription,
    AssistSatelliteEntityFeature,
    AssistSatelliteWakeWord,
)
from homeassistant.components.intent import async_register_timer_handler
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DOMAIN
from .entity import XiaozhiEntity
from .errors import translated_error
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime
from .voice.timers import DeviceTimers
from .voice.typed import async_answer
from .voice.wizard import async_connection_test, is_connection_test

PARALLEL_UPDATES = 0
IDLE: Final = "idle"  # the satellite's own idle state


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device's Assist satellite."""
    async_add_entities([XiaozhiAssistSatellite(entry.runtime_data)])


class XiaozhiAssistSatellite(XiaozhiEntity, AssistSatelliteEntity):
    """A XiaoZhi device speaking through the user's Assist pipeline."""

    entity_description = AssistSatelliteEntityDescription(
        key="assist_satellite", translation_key="assist_satellite"
    )
    _attr_name = None
    _attr_supported_features = (
        AssistSatelliteEntityFeature.ANNOUNCE
        | AssistSatelliteEntityFeature.START_CONVERSATION
    )
    # WAV leaves engines that make WAV (Piper, Wyoming) unconverted; asking for
    # a rate or channels would run ffmpeg. PyAV converts what arrives.
    _attr_tts_options = {tts.ATTR_PREFERRED_FORMAT: "wav"}  # noqa: RUF012

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the satellite of a device."""
        super().__init__(runtime, "assist_satellite")
        self._conversation = runtime.conversation

    @property
    @override
    def supported_features(self) -> AssistSatelliteEntityFeature:
        """Return what the satellite can do now: speak only to a connected device.

        A WebSocket device away as planned keeps its state, but nothing can
        reach it until it dials: an announcement to it says the action is
        not supported now, and Home Assistant's broadcast leaves it out.
        """
        if self.runtime.connected:
            return self._attr_supported_features
        return AssistSatelliteEntityFeature(0)

    @override
    async def async_added_to_hass(self) -> None:
        """Serve the device's conversation and its timers."""
        await super().async_added_to_hass()
        self.async_on_remove(self._conversation.attach(self))
        if self.registry_entry is not None and self.registry_entry.device_id:
            runtime = self.runtime
            timers = DeviceTimers(
                self.hass,
                runtime.entry,
                self.entry_data,
                channel=lambda: runtime.channel,
                fire=runtime.async_fire_event,
                announce=self.async_internal_announce,
            )
            self.async_on_remove(
                async_register_timer_handler(
                    self.hass, self.registry_entry.device_id, timers.handle
                )
            )

    # --- configuration -----------------------------------------------------

    def _own_select(self, key: str) -> str | None:
        """Return the entity id of one of the device's selects, if it has a state."""
        entity_id = er.async_get(self.hass).async_get_entity_id(
            Platform.SELECT, DOMAIN, f"{self.entry_data.mac}-{key}"
        )
        if entity_id is None or self.hass.states.get(entity_id) is None:
            return None
        return entity_id

    @property
    @override
    def pipeline_entity_id(self) -> str | None:
        """Return the device's pipeline select."""
        return self._own_select("pipeline")

    @property
    @override
    def vad_sensitivity_entity_id(self) -> str | None:
        """Return the device's "finished speaking" select."""
        return self._own_select("vad_sensitivity")

    @callback
    @override
    def async_get_configuration(self) -> AssistSatelliteConfiguration:
        """Report the wake word: it is built into the device's firmware."""
        words = [
            AssistSatelliteWakeWord(
                id=wake_word, wake_word=wake_word, trained_languages=[]
            )
            for wake_word in (self.entry_data.wake_word,)
            if wake_word
        ]
        return AssistSatelliteConfiguration(
            available_wake_words=words,
            active_wake_words=[word.id for word in words],
            max_active_wake_words=1,
        )

    @override
    async def async_set_configuration(
        self, config: AssistSatelliteConfiguration
    ) -> None:
        """Refuse another wake word: the firmware has its own."""
        if config.active_wake_words != self.async_get_configuration().active_wake_words:
            raise translated_error("wake_word_fixed", self.runtime.name)

    # --- the pipeline the conversation runs (VoiceHost) -----------------------

    async def async_run_pipeline(
        self, audio: AsyncIterator[bytes], wake_phrase: str | None
    ) -> None:
        """Run the pipeline from speech-to-text on the device's microphone."""
        await self.async_accept_pipeline_from_satellite(
            audio, start_stage=PipelineStage.STT, wake_word_phrase=wake_phrase
        )

    @override
    def on_pipeline_event(self, event: PipelineEvent) -> None:
        """Pass pipeline events on to the conversation's turn."""
        self._conversation.on_pipeline_event(event)

    @callback
    def response_finished(self) -> None:
        """Go back to idle once the reply has played (or was cut short)."""
        if self.state != IDLE:
            self.tts_response_finished()

    async def async_converse(self, text: str) -> str:
        """Return the answer of the pipeline's agent to a typed question."""
        return await async_answer(
            self.hass,
            text,
            pipeline_entity_id=self.pipeline_entity_id,
            device_id=self.entry_data.device_id,
            satellite_id=self.entity_id,
        )

    async def async_say(self, message: str) -> None:
        """Say ``message`` with the pipeline's text-to-speech, as an announcement."""
        await self.async_internal_announce(message=message, preannounce=False)

    async def async_say_media(self, media_id: str) -> None:
        """Announce a sound (the media player's announce)."""
        await self.async_internal_announce(media_id=media_id, preannounce=False)

    # --- Home Assistant's own words -----------------------------------------

    @override
    async def async_announce(self, announcement: AssistSatelliteAnnouncement) -> None:
        """Play an announcement; blocks until it has played.

        The setup wizard's connection test is one (``voice/wizard.py``).
        """
        words = self._conversation.words
        if is_connection_test(announcement):
            await async_connection_test(
                self.hass,
                self.runtime.name,
                self.entry_data.mac,
                words.async_announce(announcement),
                self.entry_data,
            )
        else:
            await words.async_announce(announcement)

    @override
    async def async_start_conversation(
        self, start_announcement: AssistSatelliteAnnouncement
    ) -> None:
        """Play the announcement; the device then listens and its turn continues it."""
        await self._conversation.words.async_ask(
            self._conversation.channel, start_announcement
        )
