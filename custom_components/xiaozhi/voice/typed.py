"""Typed questions: a ``listen detect`` whose text is a sentence, not a wake word.

Told apart here, and answered by the agent of the device's pipeline.

The firmware sends ``detect`` with the wake word it heard. Text clients
(xiaozhi-sdk's ``send_text``, py-xiaozhi's text box) send the user's typed
question the same way. A text is taken as a question when it is not the
device's known wake word and reads like a sentence: three words or more,
five Chinese, Japanese or Korean characters or more, or question or sentence
punctuation. Wake words are short names ("你好小智", "Hi ESP", "Hey Jarvis");
any detect that follows microphone audio (the firmware's pre-roll,
:class:`PrerollWatch`) is a wake word too, so a longer custom one is kept.
"""

from collections.abc import Awaitable, Callable
import re
from typing import Final

from homeassistant.components import assist_pipeline, conversation
from homeassistant.core import Context, HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..speaker.channel import VoiceChannel
from ..texts import async_device_text

_CJK: Final = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_PUNCTUATION: Final = ("?", "\uff1f", "\u3002", "!", "\uff01", ".")  # and full-width
MIN_WORDS: Final = 3
MIN_CJK: Final = 5
MAX_QUESTION: Final = 1000  # characters of a typed question the agent gets
# A detect within this many seconds of a pre-roll (a burst of microphone
# packets) is a wake word, whatever its text.
PREROLL_WINDOW: Final = 3.0
# A burst: this many packets at least, each within this many seconds of the
# last (live audio: one per 60 ms frame).
BURST_PACKETS: Final = 8
BURST_GAP: Final = 0.01


class PrerollWatch:
    """Whether a wake word's pre-roll came just now (a burst of packets)."""

    def __init__(self, now: Callable[[], float]) -> None:
        """Tell the time with ``now`` (the event loop's clock)."""
        self._now = now
        self._burst = 0
        self._heard_at = -PREROLL_WINDOW
        self._preroll_at = -PREROLL_WINDOW

    def heard(self, received: float | None = None) -> None:
        """Count a microphone packet: live audio comes one per frame.

        ``received``: when the kernel received it (UDP), which a busy event
        loop does not bunch up; otherwise when it is read.
        """
        now = self._now()
        at = now if received is None else received
        self._burst = self._burst + 1 if at - self._heard_at < BURST_GAP else 1
        self._heard_at = at
        if self._burst >= BURST_PACKETS:
            self._preroll_at = now

    @property
    def recent(self) -> bool:
        """Return True when a pre-roll came within the last few seconds."""
        return self._now() - self._preroll_at <= PREROLL_WINDOW


def is_typed_question(text: str, wake_word: str | None) -> bool:
    """Return True when ``text`` of a ``detect`` is a question, not a wake word."""
    phrase = text.strip()
    if not phrase or (wake_word and phrase.casefold() == wake_word.casefold()):
        return False
    return (
        len(phrase.split()) >= MIN_WORDS
        or len(_CJK.findall(phrase)) >= MIN_CJK
        or phrase.endswith(_PUNCTUATION)
    )


async def async_answer(
    hass: HomeAssistant,
    text: str,
    *,
    pipeline_entity_id: str | None,
    device_id: str | None,
    satellite_id: str | None,
) -> str:
    """Return the answer of the device's pipeline's agent to ``text``."""
    pipeline = chosen_pipeline(hass, pipeline_entity_id)
    language = pipeline.conversation_language
    if language == "*":  # any language: the one the pipeline speaks
        language = pipeline.language
    result = await conversation.async_converse(
        hass,
        text[:MAX_QUESTION],
        None,
        Context(),
        language=language,
        agent_id=pipeline.conversation_engine,
        device_id=device_id,
        satellite_id=satellite_id,
    )
    return str(result.response.speech.get("plain", {}).get("speech", ""))


def chosen_pipeline(
    hass: HomeAssistant, pipeline_entity_id: str | None
) -> assist_pipeline.Pipeline:
    """Return the pipeline chosen in the device's select (or the preferred)."""
    if (
        pipeline_entity_id is not None
        and (state := hass.states.get(pipeline_entity_id)) is not None
    ):
        for pipeline in assist_pipeline.async_get_pipelines(hass):
            if pipeline.name == state.state:
                return pipeline
    return assist_pipeline.async_get_pipeline(hass)


async def async_answer_typed(
    channel: VoiceChannel | None,
    name: str,
    text: str,
    converse: Callable[[str], Awaitable[str]],
    say: Callable[[str], Awaitable[None]],
) -> None:
    """Answer a typed question aloud: shown as heard, said like an announcement."""
    if channel is None:
        LOGGER.info("%s: the typed question came on a link that is gone", name)
        return
    try:
        await channel.async_show_heard(text)
        reply = await converse(text)
        channel.record_reply(reply)
        await say(reply)
    except (HomeAssistantError, ValueError) as err:
        # ValueError: the pipeline's agent is gone.
        LOGGER.warning("%s: the typed question was not answered: %s", name, err)


async def async_refuse(hass: HomeAssistant, channel: VoiceChannel, name: str) -> None:
    """Tell a device that nobody serves its voice (its satellite is off); end."""
    LOGGER.info(
        "%s started listening, but its Assist satellite is disabled; ending the "
        "conversation",
        name,
    )
    try:
        text = await async_device_text(hass, "voice_off")
        await channel.async_show_alert("Home Assistant", text, "sad")
    except HomeAssistantError as err:
        LOGGER.debug("Could not tell %s: %s", name, err)
    await channel.async_end_conversation()
