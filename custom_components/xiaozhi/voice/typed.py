"""Typed questions: a ``listen detect`` whose text is a sentence, not a wake word.

Told apart here, and answered by the agent of the device's pipeline.

The firmware sends ``detect`` with the wake word it heard. Text clients
(xiaozhi-sdk's ``send_text``, py-xiaozhi's text box) send the user's typed
question the same way. A text is taken as a question when it is not the
device's known wake word and reads like a sentence: three words or more,
five Chinese, Japanese or Korean characters or more, or question or sentence
punctuation. Wake words are short names ("你好小智", "Hi ESP", "Hey Jarvis");
the runtime also takes any detect that follows microphone audio (the
firmware's pre-roll) as a wake word, so a longer custom one is kept too.
"""

import re
from typing import Final

from homeassistant.components import assist_pipeline, conversation
from homeassistant.core import Context, HomeAssistant

_CJK: Final = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_PUNCTUATION: Final = ("?", "\uff1f", "\u3002", "!", "\uff01", ".")  # and full-width
MIN_WORDS: Final = 3
MIN_CJK: Final = 5
MAX_QUESTION: Final = 1000  # characters of a typed question the agent gets


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
