"""Diagnostics carry what helps and never a secret."""

from __future__ import annotations

import logging
from typing import Any

from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)

from simulator import SimulatedDevice

from .conftest import TOKEN


async def test_diagnostics_redacted(
    hass: HomeAssistant,
    hass_client: Any,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Tokens and the Wi-Fi name are redacted; tools and status are there."""
    caplog.set_level(logging.DEBUG)
    session = init_integration.runtime_data.session
    assert session is not None
    vision_token = session.vision_token
    diagnostics = await get_diagnostics_for_config_entry(
        hass, hass_client, init_integration
    )
    text = str(diagnostics)
    assert TOKEN not in text
    assert vision_token not in text
    assert "home" not in text  # the simulated Wi-Fi's SSID
    assert diagnostics["entry"]["data"]["token"] == "**REDACTED**"
    assert diagnostics["session"]["vision_token"] == "**REDACTED**"
    assert diagnostics["device"]["status"]["network"]["ssid"] == "**REDACTED**"
    assert diagnostics["device"]["connected"] is True
    assert diagnostics["session"]["hello"]["features"] == {"mcp": True}
    names = {tool["name"] for tool in diagnostics["device"]["tools"]}
    assert "self.audio_speaker.set_volume" in names
    # Nothing the integration logged carries a token either.
    assert TOKEN not in caplog.text
    assert vision_token not in caplog.text


async def test_diagnostics_disconnected(
    hass: HomeAssistant, hass_client: Any, init_integration: MockConfigEntry
) -> None:
    """A device that is away has no session in its diagnostics."""
    diagnostics = await get_diagnostics_for_config_entry(
        hass, hass_client, init_integration
    )
    assert diagnostics["session"] is None
    assert diagnostics["device"]["connected"] is False
