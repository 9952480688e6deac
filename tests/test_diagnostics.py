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

from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.transport.logins import MAX_FAILURES
from simulator import SimulatedDevice

from .conftest import MAC, TOKEN

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
    # Nor what locates the device: its MAC (the title ends with it), its address.
    assert MAC not in text
    assert "EE:01" not in text
    assert "127.0.0.1" not in text
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


async def test_server_diagnostics_show_networks_not_addresses(
    hass: HomeAssistant,
    hass_client: Any,
    setup_integration: None,
    server_entry: MockConfigEntry,
) -> None:
    """Wrong credentials are counted per network: IPv4 /24, IPv6 /64."""
    logins = hass.data[DATA_KEY].logins
    for _ in range(MAX_FAILURES):
        logins.failed("192.168.1.77", "WebSocket")
    logins.failed("192.168.1.78", "MQTT login")
    logins.failed("192.168.2.5", "MQTT login")
    logins.failed("2001:db8:1:2:3:4:5:6", "sound URL")
    logins.failed("::ffff:10.0.0.9", "sound URL")
    diagnostics = await get_diagnostics_for_config_entry(
        hass, hass_client, server_entry
    )
    assert diagnostics["logins"] == {
        "failures": {
            "192.168.1.0/24": 1,
            "192.168.2.0/24": 1,
            "2001:db8:1:2::/64": 1,
            "10.0.0.0/24": 1,
        },
        "blocked": ["192.168.1.0/24"],
    }
    assert "192.168.1.77" not in str(diagnostics)
