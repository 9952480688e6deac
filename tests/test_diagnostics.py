"""Diagnostics carry what helps and never a secret."""

import logging
from typing import Any

from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)
from syrupy.assertion import SnapshotAssertion
from syrupy.filters import props

from simulator import SimulatedDevice

from .conftest import TOKEN

# Values that differ from run to run.
VOLATILE = props("session_id", "connected_since", "created_at", "modified_at")


async def test_diagnostics_connected(
    hass: HomeAssistant,
    hass_client: Any,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
    snapshot: SnapshotAssertion,
) -> None:
    """A connected device: its link, session, tools and status, secrets redacted."""
    caplog.set_level(logging.DEBUG)
    session = init_integration.runtime_data.session
    assert session is not None
    vision_token = session.vision_token
    diagnostics = await get_diagnostics_for_config_entry(
        hass, hass_client, init_integration
    )
    assert diagnostics == snapshot(exclude=VOLATILE)
    text = str(diagnostics)
    assert TOKEN not in text
    assert vision_token not in text
    assert "home" not in text  # the simulated Wi-Fi's SSID
    assert diagnostics["connection"]["connected_since"] is not None
    # Nothing the integration logged carries a token either.
    assert TOKEN not in caplog.text
    assert vision_token not in caplog.text


async def test_diagnostics_disconnected(
    hass: HomeAssistant,
    hass_client: Any,
    init_integration: MockConfigEntry,
    snapshot: SnapshotAssertion,
) -> None:
    """A device that is away has no session and no link in its diagnostics."""
    diagnostics = await get_diagnostics_for_config_entry(
        hass, hass_client, init_integration
    )
    assert diagnostics == snapshot(exclude=VOLATILE)
