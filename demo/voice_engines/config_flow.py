"""The demo engines are created from configuration.yaml, without questions."""

from typing import Any

from homeassistant.config_entries import ConfigFlow, ConfigFlowResult

from . import DOMAIN


class DemoVoiceFlow(ConfigFlow, domain=DOMAIN):
    """Create the single entry of the demo engines."""

    VERSION = 1

    async def async_step_import(self, import_data: dict[str, Any]) -> ConfigFlowResult:
        """Create the entry."""
        return self.async_create_entry(title="Demo voice", data={})

    async def async_step_user(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Add the engines from the UI as well."""
        return self.async_create_entry(title="Demo voice", data={})
