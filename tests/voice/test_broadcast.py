"""Home Assistant's broadcast ("broadcast dinner is ready") through the boxes.

Home Assistant's own agent handles ``HassBroadcast``: it announces the
message on every other satellite that can announce. Boxes take part as they
can be reached: an idle MQTT box through ``notify``, a box in a conversation
through its open audio; a WebSocket box away between conversations cannot be
reached, and is left out without an error.
"""

import asyncio
from collections.abc import Awaitable, Callable
import logging

from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.voice.stage import Stage
from simulator import SimulatedDevice
from simulator.voice import dominant_frequency, silence, tone
from tests.conftest import LOOPBACK_OTA_URL, WS_URL, wait_for_runtime
from tests.voice.conftest import (
    Voice,
    mac_of,
    satellite_id,
    state_reached,
    token_of,
)
from tests.voice.test_turn import closed

pytestmark = pytest.mark.mqtt_endpoint

ASKED = 660.0  # the tone of the box that asks for the broadcast
MESSAGE = "dinner is ready"


def hears(pcm: bytes) -> str:
    """Transcribe: the asking box asks for a broadcast, any other a question."""
    if abs(dominant_frequency(pcm, 16000) - ASKED) <= 10:
        return f"broadcast {MESSAGE}"
    return "what time is it"


async def test_broadcast_reaches_every_box_that_can_be_reached(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    simulators: Callable[..., SimulatedDevice],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One box asks; an idle MQTT box and a box in a conversation hear it.

    A WebSocket box that hung up after its conversation is left out: no
    error, and the asking box hears that it was done.
    """
    voice.stt.text = hears
    entries = await boxes("Kitchen", "Bedroom", "Hall", "Study")
    asker, idle, away, busy = (
        simulators(ws_url=WS_URL, token=token_of(0), mac=mac_of(0), mic_speed=4.0),
        simulators(ota_url=LOOPBACK_OTA_URL, mac=mac_of(1), mic_speed=4.0, notify=True),
        simulators(ws_url=WS_URL, token=token_of(2), mac=mac_of(2), mic_speed=4.0),
        simulators(ota_url=LOOPBACK_OTA_URL, mac=mac_of(3), mic_speed=4.0),
    )
    for device, entry in ((idle, entries[1]), (busy, entries[3])):
        await device.provision()
        await device.connect()
        assert device.uses_mqtt
        await wait_for_runtime(entry.runtime_data, lambda r: r.connected)
    # The WebSocket box has its conversation; Home Assistant hangs up after.
    await away.wake("你好小智", tone(440, 0.5) + silence(1.0))
    await closed(away)
    await wait_for_runtime(entries[2].runtime_data, lambda r: r.session is None)
    assert entries[2].runtime_data.entry_data.expected_disconnect
    assert (
        hass.states.get(satellite_id(hass, mac_of(2))).attributes["supported_features"]
        == 0
    )
    # Another box is in a conversation: it speaks a long reply.
    voice.tts.seconds = 30.0
    responding = state_reached(hass, satellite_id(hass, mac_of(3)), "responding")
    await busy.wake("你好小智", tone(440, 0.5) + silence(1.0))
    await asyncio.wait_for(responding, 10)
    assert entries[3].runtime_data.conversation.stage is Stage.SPEAKING
    voice.tts.seconds = 1.0
    caplog.clear()

    await asker.wake("你好小智", tone(ASKED, 1.0) + silence(1.0))
    await idle.wait_for(lambda: bool(idle.notify_sounds), timeout=15)
    await busy.wait_for(lambda: MESSAGE in busy.tts_sentences, timeout=15)
    await closed(asker)

    assert idle.notify_sounds[0].subtitles == [MESSAGE]
    assert idle.tts_sentences == []
    assert away.tts_sentences == [away.tts_sentences[0]]  # its own reply only
    # The asking box heard Home Assistant's answer, not an error.
    assert asker.tts_sentences
    assert asker.state.emotion != "sad"
    assert MESSAGE not in asker.tts_sentences
    assert [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING
        and record.name.startswith(("homeassistant", "custom_components"))
        and "has not been tested by Home Assistant" not in record.getMessage()
    ] == []
