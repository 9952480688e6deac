"""Device triggers: pick "wake word detected" in the automation editor."""

import asyncio

from homeassistant.components import automation
from homeassistant.components.device_automation import DeviceAutomationType
from homeassistant.core import HomeAssistant, ServiceCall
from homeassistant.helpers import config_validation as cv
from homeassistant.setup import async_setup_component
import probatio
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_get_device_automations,
)

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.device_trigger import (
    TRIGGER_SCHEMA,
    TRIGGER_TYPES,
    async_get_trigger_capabilities,
)
from simulator import SimulatedDevice


async def test_triggers_listed(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """Every trigger type is offered for the device."""
    device_id = init_integration.runtime_data.entry_data.device_id
    triggers = await async_get_device_automations(
        hass, DeviceAutomationType.TRIGGER, device_id
    )
    ours = {t["type"] for t in triggers if t["domain"] == DOMAIN}
    assert ours == set(TRIGGER_TYPES)
    # What the event entity can show, automations can start on.
    assert {"speaking_started", "speaking_stopped", "message"} <= ours


async def test_wake_word_trigger_offers_a_phrase(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """The wake word trigger has an optional phrase field; others have none."""
    device_id = init_integration.runtime_data.entry_data.device_id
    base = {"platform": "device", "domain": DOMAIN, "device_id": device_id}
    capabilities = await async_get_trigger_capabilities(
        hass, {**base, "type": "wake_word"}
    )
    assert probatio.to_field_list(
        capabilities["extra_fields"], custom_serializer=cv.custom_serializer
    ) == [{"name": "text", "optional": True, "required": False, "type": "string"}]
    assert await async_get_trigger_capabilities(hass, {**base, "type": "aborted"}) == {}


async def test_wake_word_trigger_fires(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    service_calls: list[ServiceCall],
) -> None:
    """An automation on the wake word runs when the device hears it.

    One that names another phrase does not.
    """
    device_id = init_integration.runtime_data.entry_data.device_id
    assert await async_setup_component(
        hass,
        automation.DOMAIN,
        {
            automation.DOMAIN: [
                {
                    "trigger": {
                        "platform": "device",
                        "domain": DOMAIN,
                        "device_id": device_id,
                        "type": "wake_word",
                    },
                    "action": {
                        "service": "test.automation",
                        "data_template": {"text": "{{ trigger.event.data.text }}"},
                    },
                },
                {
                    "trigger": {
                        "platform": "device",
                        "domain": DOMAIN,
                        "device_id": device_id,
                        "type": "wake_word",
                        "text": "Hey Jarvis",
                    },
                    "action": {"service": "test.automation", "data": {"text": "!"}},
                },
                {
                    "trigger": {
                        "platform": "device",
                        "domain": DOMAIN,
                        "device_id": device_id,
                        "type": "aborted",
                    },
                    "action": {"service": "test.automation", "data": {"text": "x"}},
                },
            ]
        },
    )
    aborted = asyncio.Event()
    init_integration.runtime_data.entry_data.async_subscribe_events(
        lambda event: aborted.set() if event.type == "aborted" else None
    )
    await simulator.send_listen("detect", text="你好小智")
    await simulator.send_listen("start")
    await simulator.send_abort()
    async with asyncio.timeout(5):
        await aborted.wait()
    await hass.async_block_till_done()
    assert [call.data["text"] for call in service_calls] == ["你好小智", "x"]


@pytest.mark.parametrize("trigger_type", ["nope"])
async def test_invalid_trigger_type(
    hass: HomeAssistant, init_integration: MockConfigEntry, trigger_type: str
) -> None:
    """An unknown trigger type is refused by the schema."""
    with pytest.raises(Exception, match="type"):
        TRIGGER_SCHEMA(
            {
                "platform": "device",
                "domain": DOMAIN,
                "device_id": "abc",
                "type": trigger_type,
            }
        )
