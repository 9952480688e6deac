"""Loading and unloading the integration."""

from typing import Any

from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.protocol import DeviceStatus


async def test_load_unload(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """An entry loads without its device and unloads cleanly."""
    entry = init_integration
    assert entry.state is ConfigEntryState.LOADED
    assert entry.runtime_data.connected is False

    assert await hass.config_entries.async_unload(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.NOT_LOADED


async def test_stored_data_of_another_layout_is_migrated(
    hass: HomeAssistant,
    hass_storage: dict[str, Any],
    setup_integration: None,
    mock_config_entry: MockConfigEntry,
) -> None:
    """Stored data of another minor version is read; missing keys get defaults."""
    key = f"{DOMAIN}.{mock_config_entry.entry_id}"
    hass_storage[key] = {
        "version": 1,
        "minor_version": 0,
        "key": key,
        "data": {"tools": [{"name": "self.dog.forward"}]},
    }
    mock_config_entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(mock_config_entry.entry_id)
    data = mock_config_entry.runtime_data.entry_data
    assert list(data.tools) == ["self.dog.forward"]
    assert data.status == DeviceStatus()
    assert data.board == mock_config_entry.data["board"]


async def test_stored_data_from_a_newer_release_is_refused(
    hass: HomeAssistant,
    hass_storage: dict[str, Any],
    setup_integration: None,
    mock_config_entry: MockConfigEntry,
) -> None:
    """Data written by a newer major version is not misread: setup fails."""
    key = f"{DOMAIN}.{mock_config_entry.entry_id}"
    hass_storage[key] = {"version": 2, "minor_version": 1, "key": key, "data": {}}
    mock_config_entry.add_to_hass(hass)
    assert not await hass.config_entries.async_setup(mock_config_entry.entry_id)
    assert mock_config_entry.state is ConfigEntryState.SETUP_ERROR
