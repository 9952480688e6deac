"""What a device may bring into Home Assistant: text cleaned, counts capped.

A device chooses its tools' names and descriptions. They become entities, and
(when the device's option allows) tools offered to the conversation agent,
where their text reaches a language model next to Home Assistant's own
instructions. Nobody reviewed that text, so it is data: control characters
and line breaks go, each description is cut, and a device brings at most so
many tools and so much text. When a cap cuts, the log says so once and a
repair issue names the device.
"""

from itertools import islice
import re
from typing import Final

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir

from .const import DOMAIN, LOGGER
from .protocol import Tool

# Tools a device brings: its entities are made from these, and the agent is
# offered these (fewer than 200 entities with the fixed ones).
MAX_DEVICE_TOOLS: Final = 128
# One tool's description for the agent, and all of a device's together.
MAX_DESCRIPTION: Final = 1024
MAX_AGENT_TEXT: Final = 64 * 1024
# Tool names that pass for Home Assistant's own intents.
_SHADOWING = re.compile(r"^(self\.)?hass", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")

ISSUE_TOO_MANY_TOOLS: Final = "too_many_tools"
ISSUE_AGENT_TEXT: Final = "agent_text_cut"


def clean_text(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """Return ``text`` on one line, without control characters, cut to ``limit``."""
    flat = " ".join(_CONTROL.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def shadows_home_assistant(name: str) -> bool:
    """Return True for a tool name that passes for one of Home Assistant's."""
    return bool(_SHADOWING.match(name))


@callback
def async_report_cut(
    hass: HomeAssistant,
    entry_id: str,
    name: str,
    issue: str,
    placeholders: dict[str, str],
) -> None:
    """Say once that a cap cut what the device brought, and raise a repair."""
    issue_id = f"{issue}_{entry_id}"
    if ir.async_get(hass).async_get_issue(DOMAIN, issue_id) is None:
        LOGGER.warning(
            "%s brings more than Home Assistant uses (%s); the rest is left out",
            name,
            ", ".join(f"{key} {value}" for key, value in placeholders.items()),
        )
    ir.async_create_issue(
        hass,
        DOMAIN,
        issue_id,
        is_fixable=False,
        is_persistent=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=issue,
        translation_placeholders={"name": name, **placeholders},
    )


@callback
def async_clear_cut(hass: HomeAssistant, entry_id: str, issue: str) -> None:
    """Remove the repair once the device brings no more than is used."""
    ir.async_delete_issue(hass, DOMAIN, f"{issue}_{entry_id}")


@callback
def async_clear_all(hass: HomeAssistant, entry_id: str) -> None:
    """Remove every repair of a removed device."""
    for issue in (ISSUE_TOO_MANY_TOOLS, ISSUE_AGENT_TEXT):
        async_clear_cut(hass, entry_id, issue)


@callback
def async_capped_tools(
    hass: HomeAssistant, entry_id: str, name: str, tools: dict[str, Tool]
) -> dict[str, Tool]:
    """Return a device's first tools, as many as a device may bring.

    More raise a repair that says so; it goes once the device brings fewer.
    """
    if len(tools) <= MAX_DEVICE_TOOLS:
        async_clear_cut(hass, entry_id, ISSUE_TOO_MANY_TOOLS)
        return tools
    async_report_cut(
        hass,
        entry_id,
        name,
        ISSUE_TOO_MANY_TOOLS,
        {"count": str(len(tools)), "limit": str(MAX_DEVICE_TOOLS)},
    )
    return dict(islice(tools.items(), MAX_DEVICE_TOOLS))
