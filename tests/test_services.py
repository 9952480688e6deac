"""Actions: call_tool and refresh, their answers and their errors."""

import base64
from collections.abc import Callable
from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError, ServiceValidationError
from homeassistant.helpers import device_registry as dr
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import TINY_JPEG, ImageResult, SimulatedDevice, ToolSpec, bool_tool

from .conftest import TOKEN, WS_URL, wait_for_runtime


async def call_tool(hass: HomeAssistant, **data: Any) -> Any:
    """Run xiaozhi.call_tool and return its response."""
    return await hass.services.async_call(
        DOMAIN, "call_tool", data, blocking=True, return_response=True
    )


async def test_call_tool_response(
    hass: HomeAssistant, init_integration: MockConfigEntry, simulator: SimulatedDevice
) -> None:
    """The action answers with the parsed result."""
    device_id = init_integration.runtime_data.entry_data.device_id
    response = await call_tool(
        hass,
        device_id=device_id,
        tool="self.audio_speaker.set_volume",
        arguments={"volume": 42},
    )
    assert response == {"is_error": False, "text": "true", "json": True, "images": []}
    assert simulator.state.volume == 42

    response = await call_tool(hass, device_id=device_id, tool="self.get_device_status")
    assert response["json"]["audio_speaker"] == {"volume": 42}

    response = await call_tool(
        hass,
        device_id=device_id,
        tool="self.screen.snapshot",
        arguments={"url": "http://192.168.1.10:8123/nowhere"},
    )
    assert response["is_error"] is True
    assert response["text"]
    assert response["json"] is None

    response = await call_tool(
        hass, device_id=device_id, tool="self.get_system_info", arguments=None
    )
    assert response["is_error"] is False
    assert response["json"]["mac_address"] == simulator.config.mac

    # Without asking for the response, the action still runs.
    await hass.services.async_call(
        DOMAIN,
        "call_tool",
        {
            "device_id": device_id,
            "tool": "self.audio_speaker.set_volume",
            "arguments": {"volume": 43},
        },
        blocking=True,
    )
    assert simulator.state.volume == 43


@pytest.mark.parametrize(
    ("tool", "arguments", "key"),
    [
        ("self.audio_speaker.set_volume", {"volume": 500}, "out_of_range"),
        ("self.audio_speaker.set_volume", {"volume": "loud"}, "invalid_type"),
        ("self.audio_speaker.set_volume", {}, "missing_argument"),
        ("self.audio_speaker.set_volume", {"volume": 5, "x": 1}, "unknown_argument"),
        ("self.nothing", {}, "unknown_tool"),
    ],
)
async def test_call_tool_validation(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    tool: str,
    arguments: dict[str, Any],
    key: str,
) -> None:
    """Bad arguments are refused with a translated message, before the device."""
    calls = len(simulator.calls)
    with pytest.raises(ServiceValidationError) as err:
        await call_tool(
            hass,
            device_id=init_integration.runtime_data.entry_data.device_id,
            tool=tool,
            arguments=arguments,
        )
    assert err.value.translation_domain == DOMAIN
    assert err.value.translation_key == key
    assert str(err.value)
    assert len(simulator.calls) == calls


async def test_unknown_and_unloaded_devices(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """The action names what is wrong with the device, in core's words."""
    with pytest.raises(ServiceValidationError) as err:
        await call_tool(hass, device_id="nope", tool="self.reboot")
    assert err.value.translation_domain == "homeassistant"
    assert err.value.translation_key == "service_device_not_found"

    other = MockConfigEntry(domain="other")
    other.add_to_hass(hass)
    foreign = dr.async_get(hass).async_get_or_create(
        config_entry_id=other.entry_id, identifiers={("other", "x")}
    )
    with pytest.raises(ServiceValidationError) as err:
        await call_tool(hass, device_id=foreign.id, tool="self.reboot")
    assert err.value.translation_key == "service_device_wrong_domain"

    device_id = init_integration.runtime_data.entry_data.device_id
    await hass.config_entries.async_unload(init_integration.entry_id)
    with pytest.raises(ServiceValidationError) as err:
        await call_tool(hass, device_id=device_id, tool="self.reboot")
    assert err.value.translation_key == "service_config_entry_not_loaded"


async def test_disconnected_device(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """A command for a device that is away is an error, not a silent drop."""
    device_id = init_integration.runtime_data.entry_data.device_id
    with pytest.raises(HomeAssistantError) as err:
        await call_tool(hass, device_id=device_id, tool="self.reboot")
    assert err.value.translation_key == "not_connected"
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            DOMAIN, "refresh", {"device_id": device_id}, blocking=True
        )
    assert err.value.translation_key == "not_connected"


async def test_refresh(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Refresh reads the tools and the status again."""
    device = simulators(ws_url=WS_URL, token=TOKEN)
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    device.tools.append(bool_tool())
    device.state.volume = 21
    await hass.services.async_call(
        DOMAIN, "refresh", {"device_id": runtime.entry_data.device_id}, blocking=True
    )
    assert "self.led.set_enabled" in runtime.entry_data.tools
    assert runtime.entry_data.status.raw["audio_speaker"]["volume"] == 21

    device.faults.silent_methods = {"tools/list"}
    runtime.session.request_timeout = 0.05
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            DOMAIN,
            "refresh",
            {"device_id": runtime.entry_data.device_id},
            blocking=True,
        )
    assert err.value.translation_key == "timeout"


async def test_call_tool_returns_images(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Pictures in a tool's result come back in the response."""
    device = simulators(
        ws_url=WS_URL,
        token=TOKEN,
        extra_tools=[
            ToolSpec(
                name="self.camera.thumbnail",
                handler=lambda _device, _arguments: ImageResult(data=TINY_JPEG),
            )
        ],
    )
    await device.connect()
    runtime: XiaozhiRuntime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.connected)
    response = await call_tool(
        hass, device_id=runtime.entry_data.device_id, tool="self.camera.thumbnail"
    )
    ((image),) = response["images"]
    assert image["mime_type"] == "image/jpeg"
    assert base64.b64decode(image["data"]) == TINY_JPEG


async def test_device_targets(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    simulator: SimulatedDevice,
    second_entry: MockConfigEntry,
) -> None:
    """Both actions take device targets; a tool is called on one device only."""
    first = init_integration.runtime_data.entry_data.device_id
    second = second_entry.runtime_data.entry_data.device_id
    with pytest.raises(ServiceValidationError) as err:
        await call_tool(hass, device_id=[first, second], tool="self.reboot")
    assert err.value.translation_key == "one_device_only"
    assert str(err.value)

    # Refresh runs on each device; the second is away, so it fails after the first.
    simulator.state.volume = 31
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            DOMAIN, "refresh", {"device_id": [first, second]}, blocking=True
        )
    assert err.value.translation_key == "not_connected"
    assert init_integration.runtime_data.entry_data.status.volume == 31
