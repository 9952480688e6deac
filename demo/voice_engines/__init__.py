"""Speech engines for the XiaoZhi demo: espeak-ng speaks, a stand-in listens.

Text-to-speech runs ``espeak-ng`` (a tone per word when it is not installed).
Speech-to-text is a stand-in: it waits for speech in the audio and answers
the sentence the demo console typed (``set_transcript``), because no speech
recognizer works offline out of the box. With real engines (Whisper and Piper
through Wyoming, or a cloud) the devices work the same way.

A conversation agent ("Demo agent") answers every question with one fixed
sentence after a delay (``set_agent_delay``, none at first): a stand-in for a
slow language model, which ``scripts/smoke`` interrupts while it thinks. The
demo's own pipeline uses Home Assistant's agent.
"""

from collections import deque
from dataclasses import dataclass, field
import logging

from homeassistant.config_entries import SOURCE_IMPORT, ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant, ServiceCall
from homeassistant.helpers import config_validation as cv
from homeassistant.helpers.typing import ConfigType
import voluptuous as vol

DOMAIN = "xiaozhi_demo_voice"
PLATFORMS = [Platform.CONVERSATION, Platform.STT, Platform.TTS]
CONFIG_SCHEMA = cv.empty_config_schema(DOMAIN)
SERVICE_SET_TRANSCRIPT = "set_transcript"
SERVICE_SET_AGENT_DELAY = "set_agent_delay"
MAX_AGENT_DELAY = 600.0

_LOGGER = logging.getLogger(__name__)


@dataclass(slots=True)
class DemoVoiceData:
    """What the services set: the next transcripts, and the agent's delay."""

    transcripts: deque[str] = field(default_factory=lambda: deque(maxlen=8))
    agent_delay: float = 0.0


type DemoVoiceConfigEntry = ConfigEntry[DemoVoiceData]


async def async_setup(hass: HomeAssistant, config: ConfigType) -> bool:
    """Create the config entry on the first start; register the services."""
    if DOMAIN in config and not hass.config_entries.async_entries(DOMAIN):
        hass.async_create_task(
            hass.config_entries.flow.async_init(
                DOMAIN, context={"source": SOURCE_IMPORT}
            )
        )

    async def set_transcript(call: ServiceCall) -> None:
        for entry in hass.config_entries.async_loaded_entries(DOMAIN):
            entry.runtime_data.transcripts.append(call.data["text"])

    async def set_agent_delay(call: ServiceCall) -> None:
        for entry in hass.config_entries.async_loaded_entries(DOMAIN):
            entry.runtime_data.agent_delay = call.data["seconds"]

    hass.services.async_register(
        DOMAIN,
        SERVICE_SET_TRANSCRIPT,
        set_transcript,
        schema=vol.Schema({vol.Required("text"): cv.string}),
    )
    hass.services.async_register(
        DOMAIN,
        SERVICE_SET_AGENT_DELAY,
        set_agent_delay,
        schema=vol.Schema(
            {
                vol.Required("seconds"): vol.All(
                    vol.Coerce(float), vol.Range(min=0, max=MAX_AGENT_DELAY)
                )
            }
        ),
    )
    return True


async def async_setup_entry(hass: HomeAssistant, entry: DemoVoiceConfigEntry) -> bool:
    """Set the engines up."""
    entry.runtime_data = DemoVoiceData()
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    return True


async def async_unload_entry(hass: HomeAssistant, entry: DemoVoiceConfigEntry) -> bool:
    """Unload the engines."""
    return await hass.config_entries.async_unload_platforms(entry, PLATFORMS)
