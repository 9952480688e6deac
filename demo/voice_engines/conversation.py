"""A conversation agent that answers one fixed sentence, when it is ready.

It stands in for a slow language model: every question waits the delay
``set_agent_delay`` last set (none at first), then gets ``ANSWER``. Its
attributes tell what it is doing: the last question and its conversation,
whether it is thinking about it, and how many questions it answered and how
many were taken away from it (its run was cancelled) while it thought.
"""

import asyncio
import logging
from typing import Any, Literal, override

from homeassistant.components import conversation
from homeassistant.const import MATCH_ALL
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from . import DemoVoiceConfigEntry, DemoVoiceData

_LOGGER = logging.getLogger(__name__)

ANSWER = "This is the demo agent's answer."


async def async_setup_entry(
    hass: HomeAssistant,
    entry: DemoVoiceConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the agent."""
    async_add_entities([DemoConversationAgent(entry.entry_id, entry.runtime_data)])


class DemoConversationAgent(conversation.ConversationEntity):
    """Answers ``ANSWER`` after the configured delay."""

    _attr_name = "Demo agent"

    def __init__(self, entry_id: str, data: DemoVoiceData) -> None:
        """Read the delay from ``data`` at every question."""
        self._data = data
        self._attr_unique_id = f"{entry_id}-conversation"
        self.question: str | None = None
        self.conversation_id: str | None = None
        self.thinking = False
        self.answers = 0
        self.interrupted = 0

    @property
    @override
    def supported_languages(self) -> list[str] | Literal["*"]:
        """Return every language: the answer does not depend on it."""
        return MATCH_ALL

    @property
    @override
    def extra_state_attributes(self) -> dict[str, Any]:
        """Return what the agent is doing."""
        return {
            "question": self.question,
            "conversation_id": self.conversation_id,
            "thinking": self.thinking,
            "answers": self.answers,
            "interrupted": self.interrupted,
        }

    def _changed(self) -> None:
        if self.hass is not None and self.entity_id is not None:
            self.async_write_ha_state()

    @override
    async def _async_handle_message(
        self,
        user_input: conversation.ConversationInput,
        chat_log: conversation.ChatLog,
    ) -> conversation.ConversationResult:
        """Think for the delay, then answer."""
        delay = self._data.agent_delay
        self.question = user_input.text
        self.conversation_id = chat_log.conversation_id
        self.thinking = True
        self._changed()
        _LOGGER.info("Thinking %.1f s about %r", delay, user_input.text)
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.interrupted += 1
            _LOGGER.info("Interrupted while thinking about %r", user_input.text)
            raise
        else:
            self.answers += 1
        finally:
            self.thinking = False
            self._changed()
        chat_log.async_add_assistant_content_without_tools(
            conversation.AssistantContent(agent_id=user_input.agent_id, content=ANSWER)
        )
        return conversation.async_get_result_from_chat_log(user_input, chat_log)
