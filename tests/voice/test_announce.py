"""Home Assistant speaks first: announcements, conversations it starts, timers."""

import asyncio
from pathlib import Path
from typing import Any

from homeassistant.components import assist_satellite, persistent_notification
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError, ServiceNotSupported
from homeassistant.helpers import intent
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_capture_events,
)
from pytest_homeassistant_custom_component.test_util.aiohttp import AiohttpClientMocker

from custom_components.xiaozhi.const import CONF_KEEPALIVE, EVENT_XIAOZHI
from simulator import SimulatedDevice
from simulator.voice import dominant_frequency, read_audio
from tests.conftest import wait_for_runtime
from tests.voice.conftest import Voice, connected, satellite_id
from tests.voice.test_turn import FRAME, SPEECH, closed, texts

PREANNOUNCE = Path(assist_satellite.__file__).parent / "preannounce.mp3"


def preannounce_seconds() -> float:
    """Return how long the pre-announce chime lasts."""
    return len(read_audio(PREANNOUNCE, 24000)) / 2 / 24000


async def test_announce_plays_then_ends_the_conversation(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    went_unavailable: list[str],
) -> None:
    """The chime and the message play in full; the call returns once played.

    Home Assistant then hangs up, as planned: no entity flaps unavailable.
    """
    voice.tts.seconds = 1.0
    await connected(talker, init_integration)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": satellite_id(hass), "message": "Dinner is ready"},
        blocking=True,
    )
    took = loop.time() - started
    expected = preannounce_seconds() + 1.0
    record = talker.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - expected) <= 2 * FRAME
    assert took >= expected - 7 * FRAME  # blocks until played
    assert texts(talker) == ["tts:start", "tts:sentence_start", "tts:stop"]
    assert talker.tts_sentences == ["Dinner is ready"]
    assert voice.tts.messages == ["Dinner is ready"]
    # After tts stop the device would start listening: Home Assistant hangs up.
    await closed(talker)
    await wait_for_runtime(init_integration.runtime_data, lambda m: not m.connected)
    await hass.async_block_till_done()
    assert went_unavailable == []
    assert hass.states.get(satellite_id(hass)).state == "idle"


async def test_announce_without_chime(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """With ``preannounce: false`` only the message plays."""
    voice.tts.seconds = 0.6
    await connected(talker, init_integration)
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": satellite_id(hass), "message": "Hi", "preannounce": False},
        blocking=True,
    )
    played = bytes(talker.speaker.record.played_pcm)
    assert abs(len(played) / 2 / 24000 - 0.6) <= FRAME
    assert abs(dominant_frequency(played, 24000) - 880) <= 5


async def test_announce_a_media_url(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    aioclient_mock: AiohttpClientMocker,
) -> None:
    """A media URL is fetched and decoded (MP3 here) before it plays."""
    aioclient_mock.get("http://media.local/door.mp3", content=PREANNOUNCE.read_bytes())
    await connected(talker, init_integration)
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {
            "entity_id": satellite_id(hass),
            "media_id": "http://media.local/door.mp3",
            "preannounce": False,
        },
        blocking=True,
    )
    assert aioclient_mock.call_count == 1
    assert (
        abs(talker.speaker.record.played * FRAME - preannounce_seconds()) <= 2 * FRAME
    )


async def test_a_chime_that_cannot_be_fetched_leaves_the_message(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    aioclient_mock: AiohttpClientMocker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The chime only announces the message: without it the message plays."""
    aioclient_mock.get("http://media.local/chime.mp3", status=404)
    voice.tts.seconds = 1.0
    await connected(talker, init_integration)
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {
            "entity_id": satellite_id(hass),
            "message": "Dinner is ready",
            "preannounce_media_id": "http://media.local/chime.mp3",
        },
        blocking=True,
    )
    assert abs(talker.speaker.record.played * FRAME - 1.0) <= 2 * FRAME
    assert "no chime before the message" in caplog.text


async def test_announce_to_a_device_that_is_away(
    hass: HomeAssistant, voice: Voice, init_integration: MockConfigEntry
) -> None:
    """A WebSocket device cannot be reached between conversations.

    The satellite says so by what it supports now: an announcement to it is
    refused before anything is tried (and a broadcast leaves it out).
    """
    hass.config_entries.async_update_entry(
        init_integration, options={CONF_KEEPALIVE: False}
    )
    await hass.async_block_till_done()
    state = hass.states.get(satellite_id(hass))
    assert state.state == "idle"
    assert state.attributes["supported_features"] == 0
    with pytest.raises(ServiceNotSupported):
        await hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "message": "Hello"},
            blocking=True,
        )


async def test_abort_during_an_announcement(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A button press stops the announcement with tts stop; no error.

    The device listens again (auto mode); with nothing said, the
    conversation ends.
    """
    voice.tts.seconds = 5.0
    await connected(talker, init_integration)
    call = asyncio.create_task(
        hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "message": "Long", "preannounce": False},
            blocking=True,
        )
    )
    await talker.wait_for(lambda: talker.speaker.record.received >= 5, timeout=10)
    pressed = asyncio.get_running_loop().time()
    await talker.press_button()
    await asyncio.wait_for(call, 5)
    assert talker.speaker.record.received < 5.0 / FRAME
    await talker.wait_for(lambda: "tts:stop" in texts(talker))
    stopped = next(when for when, what in talker.timeline if what == "tts:stop")
    assert stopped - pressed < 0.5
    await talker.wait_for(lambda: talker.listen_starts == 1)
    await closed(talker)


async def test_start_conversation_then_the_device_answers(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Home Assistant asks; the device listens by itself; the agent hears it."""
    await voice.use_agent()
    voice.tts.seconds = 0.4
    await connected(talker, init_integration)
    talker.say(SPEECH)
    await hass.services.async_call(
        "assist_satellite",
        "start_conversation",
        {
            "entity_id": satellite_id(hass),
            "start_message": "Shall I close the blinds?",
            "preannounce": False,
        },
        blocking=True,
    )
    await closed(talker)
    assert talker.tts_sentences[0] == "Shall I close the blinds?"
    assert voice.stt.calls == 1
    assert len(voice.agent.inputs) == 1
    assert talker.listen_starts == 1  # the device's own, after tts stop


async def test_abort_during_a_question_gives_no_answer(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """The button while the question plays: the caller hears so at once."""
    await voice.use_agent()
    voice.tts.seconds = 5.0
    await connected(talker, init_integration)
    call = asyncio.create_task(
        hass.services.async_call(
            "assist_satellite",
            "ask_question",
            {
                "entity_id": satellite_id(hass),
                "question": "Which?",
                "preannounce": False,
            },
            blocking=True,
            return_response=True,
        )
    )
    await talker.wait_for(lambda: talker.speaker.record.received >= 5, timeout=10)
    await talker.send_abort()
    with pytest.raises(HomeAssistantError) as err:
        await asyncio.wait_for(call, 5)
    assert err.value.translation_key == "no_answer"
    assert voice.stt.calls == 0


async def test_question_to_push_to_talk_is_refused(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """In manual mode the device waits for its button after speaking."""
    await voice.use_agent()
    await connected(talker, init_integration)
    await talker.send_listen("start", "manual")
    await talker.send_listen("stop")
    await wait_for_runtime(
        init_integration.runtime_data, lambda m: m.entry_data.listen_mode == "manual"
    )
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "assist_satellite",
            "start_conversation",
            {"entity_id": satellite_id(hass), "start_message": "Shall I?"},
            blocking=True,
        )
    assert err.value.translation_key == "no_answer"
    assert talker.tts_sentences == []


async def test_timers_show_and_finish(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A timer set for the device shows on it; when it ends it is said and fired."""
    voice.tts.seconds = 0.3
    await connected(talker, init_integration)
    device_id = init_integration.runtime_data.entry_data.device_id
    events = async_capture_events(hass, EVENT_XIAOZHI)
    await intent.async_handle(
        hass,
        "test",
        intent.INTENT_START_TIMER,
        {"seconds": {"value": 1}, "name": {"value": "tea"}},
        device_id=device_id,
    )
    await talker.wait_for(lambda: bool(talker.alerts))
    assert talker.alerts[0] == {
        "status": "Timer",
        "message": "tea 0:01",
        "emotion": "neutral",
    }
    await talker.wait_for(lambda: talker.tts_sentences == ["tea timer finished"])
    await hass.async_block_till_done()
    finished = [event for event in events if event.data["type"] == "timer_finished"]
    assert finished[0].data == {
        "device_id": device_id,
        "type": "timer_finished",
        "name": "tea",
        "seconds": 1,
    }
    await closed(talker)


async def test_timer_finishing_while_away_still_fires(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The device is away: nothing to show, the event fires all the same."""
    device_id = init_integration.runtime_data.entry_data.device_id
    events = async_capture_events(hass, EVENT_XIAOZHI)
    notified: dict[str, Any] = {}
    persistent_notification.async_register_callback(
        hass, lambda _kind, notes: notified.update(notes)
    )
    finished = asyncio.Event()
    init_integration.runtime_data.entry_data.async_subscribe_events(
        lambda event: finished.set() if event.type == "timer_finished" else None
    )
    await intent.async_handle(
        hass,
        "test",
        intent.INTENT_START_TIMER,
        {"seconds": {"value": 1}},
        device_id=device_id,
    )
    await asyncio.wait_for(finished.wait(), 5)
    await hass.async_block_till_done()
    assert [event.data["type"] for event in events] == ["timer_finished"]
    # Nobody heard it: the log and a notification say so (no leading space
    # for a timer without a name).
    assert "Timer finished, but the device could not be told" in caplog.text
    (notification,) = notified.values()
    assert notification["title"] == init_integration.title
    assert notification["message"].startswith("Timer finished on ")
