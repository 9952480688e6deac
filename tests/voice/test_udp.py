"""A voice turn over MQTT + UDP: audio on the UDP channel, ``goodbye`` ends it.

The device stays connected over MQTT before, during and after the
conversation; each conversation opens an audio channel with its own key.
"""

from collections.abc import Callable
from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.core_config import async_process_ha_core_config
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.endpoints import MqttLink
from simulator import SimulatedDevice
from simulator.voice import dominant_frequency, silence, tone
from tests.conftest import wait_for_runtime
from tests.voice.conftest import Voice
from tests.voice.test_turn import FRAME, loud_seconds

LOCAL_URL = "http://127.0.0.1:8123"
OTA_URL = LOCAL_URL + "/api/xiaozhi/v1/ota/"


@pytest.fixture
def endpoint_settings(socket_enabled: None) -> dict[str, Any]:
    """Open the MQTT + UDP endpoint on free ports."""
    return {"transport": "auto", "mqtt_port": 0, "udp_port": 0}


@pytest.fixture
async def internal_url(hass: HomeAssistant) -> str:
    """Devices reach Home Assistant on loopback."""
    await async_process_ha_core_config(hass, {"internal_url": LOCAL_URL})
    return LOCAL_URL


@pytest.fixture
async def mqtt_talker(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return the paired device, connected over MQTT and idle."""
    device = simulators(ota_url=OTA_URL, mic_speed=4.0)
    await device.provision()
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    return device


async def conversation_over(device: SimulatedDevice, count: int = 1) -> None:
    """Wait until Home Assistant has said goodbye ``count`` times."""
    await device.wait_for(lambda: device.goodbyes_received >= count, timeout=15)


async def test_turn_over_udp_ends_with_goodbye(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """The tone reaches speech-to-text, the reply plays whole, MQTT stays up."""
    voice.tts.seconds = 1.2
    manager = init_integration.runtime_data
    await mqtt_talker.wake("你好小智", tone(440, 1.5) + silence(1.0))
    assert mqtt_talker.server_hello is not None
    assert mqtt_talker.server_hello["transport"] == "udp"
    await conversation_over(mqtt_talker)

    heard = bytes(voice.stt.received)
    assert abs(loud_seconds(heard) - 1.5) <= FRAME
    assert abs(dominant_frequency(heard, 16000) - 440) <= 5
    record = mqtt_talker.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - 1.2) <= FRAME
    played = bytes(record.played_pcm)
    assert abs(dominant_frequency(played, 24000) - 880) <= 5
    assert mqtt_talker.udp_record.dropped == {}

    # The link stays: the device is idle, connected, and its entities live.
    assert mqtt_talker.connected
    assert not mqtt_talker.audio_channel_open
    assert mqtt_talker.state.activity == "idle"
    assert mqtt_talker.close_reasons == []
    assert manager.connected
    assert not manager.voice_ready
    assert isinstance(manager.session.link, MqttLink)
    assert manager.session.link.channel is None


async def test_each_conversation_gets_a_fresh_key(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    voice.tts.seconds = 0.3
    keys = []
    for count in (1, 2):
        await mqtt_talker.wake("你好小智", tone(300, 0.5) + silence(1.0))
        assert mqtt_talker.server_hello is not None
        keys.append(mqtt_talker.server_hello["udp"]["key"])
        await conversation_over(mqtt_talker, count)
    assert keys[0] != keys[1]
    assert mqtt_talker.speaker.record.dropped == 0


async def test_device_goodbye_ends_the_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """The button while listening: the device says goodbye, the turn stops."""
    voice.stt.quiet_after = 30.0  # still listening when the button is pressed
    manager = init_integration.runtime_data
    await mqtt_talker.wake("你好小智", tone(300, 3.0))
    await wait_for_runtime(manager, lambda m: m.voice_ready)
    await mqtt_talker.close_audio_channel()
    await wait_for_runtime(manager, lambda m: not m.voice_ready)
    assert manager.connected
    events = hass.states.async_all("event")
    assert any(
        state.attributes.get("event_type") == "conversation_ended" for state in events
    )
