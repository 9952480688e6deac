"""Repairs the user can fix from the repair itself."""

from typing import Any

from homeassistant.components.repairs import RepairsFlow, RepairsFlowResult
from homeassistant.core import HomeAssistant
from homeassistant.helpers import issue_registry as ir

from .config_flow import (
    SERVER_SCHEMA,
    async_try_settings,
    ota_url,
    server_form_values,
)
from .const import DOMAIN
from .settings import SERVER_UNIQUE_ID
from .transport.mqtt import async_delete_port_issues


class PortUnavailableFlow(RepairsFlow):
    """Choose ports the MQTT + UDP endpoint can open, or WebSocket only."""

    def __init__(self, placeholders: dict[str, str]) -> None:
        """Say which port failed, and why (the issue's placeholders)."""
        self._placeholders = placeholders

    async def async_step_init(
        self, user_input: dict[str, Any] | None = None
    ) -> RepairsFlowResult:
        """Start with the server's settings."""
        return await self.async_step_ports()

    async def async_step_ports(
        self, user_input: dict[str, Any] | None = None
    ) -> RepairsFlowResult:
        """Show the server's settings; apply them once every port is open."""
        server = self.hass.config_entries.async_entry_for_domain_unique_id(
            DOMAIN, SERVER_UNIQUE_ID
        )
        if server is None:
            return self.async_abort(reason="server_not_loaded")
        errors: dict[str, str] = {}
        placeholders = {**self._placeholders, "ota_url": ota_url(self.hass)}
        if user_input is not None:
            settings, errors = await async_try_settings(
                self.hass, server, user_input, placeholders
            )
            if not errors:
                self.hass.config_entries.async_update_entry(
                    server, options=settings.as_options()
                )
                async_delete_port_issues(self.hass)
                return self.async_create_entry(data={})
        return self.async_show_form(
            step_id="ports",
            data_schema=self.add_suggested_values_to_schema(
                SERVER_SCHEMA, server_form_values(server, user_input)
            ),
            errors=errors,
            description_placeholders=placeholders,
        )


async def async_create_fix_flow(
    hass: HomeAssistant, issue_id: str, data: dict[str, Any] | None
) -> RepairsFlow:
    """Return the flow that fixes an issue."""
    issue = ir.async_get(hass).async_get_issue(DOMAIN, issue_id)
    placeholders = dict(issue.translation_placeholders or {}) if issue else {}
    return PortUnavailableFlow(
        {"protocol": "", "port": "", "error": "", **placeholders}
    )
