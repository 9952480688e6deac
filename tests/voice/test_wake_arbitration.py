"""Several boxes hear one wake word: one answers per area; false wakes end quietly.

Real simulated devices wake over WebSocket and MQTT + UDP, with pre-rolls at
chosen loudness; Home Assistant's areas group them.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant.components import assist_pipeline
from homeassistant.core import Event, HomeAssistant
from homeassistant.helpers import area_registry as ar, device_registry as dr
import pytest
from pytest_homeassistant_custom_component.common import (
    MockConfigEntry,
    async_capture_events,
)

from custom_components.xiaozhi.const import (
    CONF_FALSE_WAKE_CHECK,
    EVENT_XIAOZHI,
)
from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.settings import CONF_WAKE_ARBITRATION
from custom_components.xiaozhi.voice import gate, wake_check
from custom_components.xiaozhi.voice.arbiter import ARBITRATION_WINDOW
from custom_components.xiaozhi.voice.gate import wake_group
from custom_components.xiaozhi.voice.stage import Stage
from simulator import SimulatedDevice
from simulator.voice import dominant_frequency, silence, tone
from tests.conftest import wait_for_runtime
from tests.voice.conftest import Voice
from tests.voice.test_turn import FRAME, loud_seconds

SPEECH = tone(660, 1.0) + silence(1.0)
# Both transports: the MQTT + UDP endpoint opens only where the mark says.
TRANSPORTS = [
    pytest.param(False, id="websocket"),
    pytest.param(True, id="mqtt", marks=pytest.mark.mqtt_endpoint),
]
WAKE_TONE = 440.0  # the wake phrase as the fake speech-to-text knows it
OTHER_TONE = 300.0  # something else that woke the box


def device_id(entry: MockConfigEntry) -> str:
    """Return the Home Assistant device of a box's entry."""
    return str(entry.runtime_data.entry_data.device_id)


def outcomes(events: list[Event[Any]]) -> dict[str, list[str]]:
    """Return the wake word outcomes fired, by device."""
    found: dict[str, list[str]] = {}
    for event in events:
        if event.data["type"] in ("wake_won", "wake_stood_down", "false_wake"):
            found.setdefault(event.data["device_id"], []).append(event.data["type"])
    return found


async def after(delay: float, wake: Awaitable[None]) -> None:
    """Wake a box ``delay`` seconds from now."""
    await asyncio.sleep(delay)
    await wake


async def answered(device: SimulatedDevice) -> None:
    """Wait until the box has spoken a reply and gone idle."""
    await device.wait_for(
        lambda: bool(device.tts_sentences) and device.state.activity == "idle",
        timeout=15,
    )


async def stood_down(device: SimulatedDevice, *, within: float) -> None:
    """Wait until Home Assistant has sent the box back to idle."""
    await device.wait_for(
        lambda: device.state.activity == "idle" and not device.audio_channel_open,
        timeout=within,
    )


def speech_heard(voice: Voice) -> None:
    """Assert the winner's first words reached speech-to-text whole."""
    heard = bytes(voice.stt.received)
    assert abs(loud_seconds(heard) - 1.0) <= 2 * FRAME
    assert abs(dominant_frequency(heard, 16000) - 660) <= 5


@pytest.mark.parametrize("mqtt", TRANSPORTS)
async def test_the_louder_box_wins_even_when_later(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
    mqtt: bool,
) -> None:
    """The far box detects first; the near one, later in the window, answers."""
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Kitchen", "Kitchen")
    far, near = await devices(entries, mqtt=mqtt)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(
        far.wake("你好小智", SPEECH, loudness=-42.0),
        after(ARBITRATION_WINDOW / 3, near.wake("你好小智", SPEECH, loudness=-18.0)),
    )
    await stood_down(far, within=1.0)
    assert loop.time() - started < 1.0
    await answered(near)

    assert far.tts_sentences == []
    assert far.state.emotion != "sad"
    speech_heard(voice)
    assert voice.stt.calls == 1
    found = outcomes(events)
    assert found == {
        device_id(entries[1]): ["wake_won"],
        device_id(entries[0]): ["wake_stood_down"],
    }
    won = next(e.data for e in events if e.data["type"] == "wake_won")
    lost = next(e.data for e in events if e.data["type"] == "wake_stood_down")
    assert won["stood_down"] == [device_id(entries[0])]
    assert lost["winner"] == device_id(entries[1])
    assert lost["winner_name"] == "Box 1"
    assert won["clarity"] > lost["clarity"] + 15
    # Stood down on purpose: every entity of the far box stays available.
    for entry in entries:
        assert entry.runtime_data.available
    await hass.async_block_till_done()
    for state in hass.states.async_all("assist_satellite"):
        assert state.state == "idle"


@pytest.mark.parametrize("mqtt", TRANSPORTS)
async def test_the_round_ends_when_the_room_has_spoken(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
    mqtt: bool,
) -> None:
    """Every box that could take part has woken: decided, long before the window.

    A fourth box of the kitchen is not connected: nobody waits for it.
    """
    hass.data[DATA_KEY].arbiter.window = 5.0
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Kitchen", "Kitchen", "Kitchen", "Kitchen")
    far, farther, near = await devices(entries[:3], mqtt=mqtt)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(
        far.wake("你好小智", SPEECH, loudness=-35.0),
        farther.wake("你好小智", SPEECH, loudness=-42.0),
        after(0.1, near.wake("你好小智", SPEECH, loudness=-15.0)),
    )
    await stood_down(far, within=2.0)
    await stood_down(farther, within=2.0)
    assert loop.time() - started < 2.0
    await answered(near)
    speech_heard(voice)
    assert outcomes(events) == {
        device_id(entries[2]): ["wake_won"],
        device_id(entries[0]): ["wake_stood_down"],
        device_id(entries[1]): ["wake_stood_down"],
    }
    won = next(e.data for e in events if e.data["type"] == "wake_won")
    assert won["clarity"] is not None


async def test_a_silent_box_keeps_the_round_open_until_the_window_ends(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A connected, idle box of the area that did not wake: the window decides."""
    window = 1.0
    hass.data[DATA_KEY].arbiter.window = window
    entries = await boxes("Kitchen", "Kitchen", "Kitchen")
    far, near, _silent = await devices(entries)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(
        far.wake("你好小智", SPEECH, loudness=-35.0),
        near.wake("你好小智", SPEECH, loudness=-15.0),
    )
    await stood_down(far, within=window + 2.0)
    assert loop.time() - started >= window
    await answered(near)
    speech_heard(voice)


async def test_a_box_busy_elsewhere_is_not_waited_for(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A box of the area in its own conversation cannot take part."""
    hass.data[DATA_KEY].arbiter.window = 5.0
    voice.stt.max_seconds = 30.0
    entries = await boxes(None, "Kitchen", "Kitchen")
    busy, far, near = await devices(entries)
    await busy.wake("你好小智", tone(660, 30.0))  # alone in no area: at once
    await wait_for_runtime(
        entries[0].runtime_data,
        lambda r: r.conversation.stage is Stage.LISTENING,
    )
    dr.async_get(hass).async_update_device(
        device_id(entries[0]),
        area_id=ar.async_get(hass).async_get_area_by_name("Kitchen").id,
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(
        far.wake("你好小智", SPEECH, loudness=-35.0),
        near.wake("你好小智", SPEECH, loudness=-15.0),
    )
    await stood_down(far, within=2.0)
    assert loop.time() - started < 2.0
    assert near.state.activity == "listening"
    assert busy.state.activity == "listening"


async def test_a_start_without_detect_wins_and_the_first_of_them(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A button (or a board without pre-roll) beats any wake word; first wins."""
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Hall", "Hall", "Hall")
    loud, button, late_button = await devices(entries)
    await asyncio.gather(
        loud.wake("你好小智", SPEECH, loudness=-10.0),
        after(0.05, button.wake("你好小智", SPEECH, detect=False)),
        after(0.15, late_button.wake("你好小智", SPEECH, detect=False)),
    )
    await stood_down(loud, within=1.0)
    await stood_down(late_button, within=1.0)
    await answered(button)
    assert loud.tts_sentences == late_button.tts_sentences == []
    speech_heard(voice)
    assert outcomes(events) == {
        device_id(entries[1]): ["wake_won"],
        device_id(entries[0]): ["wake_stood_down"],
        device_id(entries[2]): ["wake_stood_down"],
    }


async def test_a_detect_without_pre_roll_comes_last(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A board that could not keep its pre-roll loses to a quiet one that did."""
    entries = await boxes("Hall", "Hall")
    bare, quiet = await devices(entries)
    await asyncio.gather(
        bare.wake("你好小智", SPEECH, preroll=0),
        after(0.05, quiet.wake("你好小智", SPEECH, loudness=-45.0)),
    )
    await stood_down(bare, within=1.0)
    await answered(quiet)
    assert bare.tts_sentences == []


async def test_other_areas_and_boxes_without_one_are_untouched(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """Kitchen, bedroom and a box with no area all answer the same wake word.

    Home Assistant's own cooldown (one run per wake phrase within 2 s,
    home-wide) does not silence any of them.
    """
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Kitchen", "Bedroom", None)
    kitchen, bedroom, nowhere = await devices(entries)
    await asyncio.gather(
        kitchen.wake("你好小智", SPEECH, loudness=-30.0),
        bedroom.wake("你好小智", SPEECH, loudness=-20.0),
        nowhere.wake("你好小智", SPEECH, loudness=-25.0),
    )
    for device in (kitchen, bedroom, nowhere):
        await answered(device)
    assert voice.stt.calls == 3
    assert outcomes(events) == {}


async def test_arbitration_off_leaves_home_assistant_s_cooldown(
    hass: HomeAssistant,
    voice: Voice,
    server_entry: MockConfigEntry,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """Turned off, boxes start at once and the pipeline's cooldown decides."""
    hass.config_entries.async_update_entry(
        server_entry, options={**server_entry.options, CONF_WAKE_ARBITRATION: False}
    )
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Kitchen", "Kitchen")
    first, second = await devices(entries)
    await first.wake("你好小智", SPEECH, loudness=-40.0)
    await second.wake("你好小智", SPEECH, loudness=-10.0)
    await first.wait_for(lambda: first.state.activity == "idle", timeout=15)
    await second.wait_for(lambda: second.state.activity == "idle", timeout=15)
    # The first to start answers, loud or not: the crude rule of the pipeline.
    await answered(first)
    assert second.tts_sentences == []
    assert outcomes(events) == {}


async def test_a_box_alone_in_its_area_is_not_arbitrated(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """No rival in the area: the pipeline starts as the device listens."""
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes("Study")
    (device,) = await devices(entries)
    assert wake_group(hass, entries[0].runtime_data.entry_data.device_id) is None
    await device.wake("你好小智", SPEECH)
    await answered(device)
    speech_heard(voice)
    assert outcomes(events) == {}


def hears(pcm: bytes) -> str:
    """Transcribe like an engine: the wake phrase, another sentence, a command."""
    frequency = dominant_frequency(pcm, 16000)
    if abs(frequency - WAKE_TONE) <= 10:
        return "你好，小志。"  # noqa: RUF001 - a homophone, as speech-to-text writes
    if abs(frequency - OTHER_TONE) <= 10:
        return "今天天气怎么样"
    return "turn on the lights"


@pytest.mark.parametrize("mqtt", TRANSPORTS)
async def test_the_false_wake_check_ends_a_turn_quietly(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
    mqtt: bool,
) -> None:
    """The pre-roll said something else: no answer, a false wake event."""
    voice.stt.text = hears
    events = async_capture_events(hass, EVENT_XIAOZHI)
    entries = await boxes(None, **{CONF_FALSE_WAKE_CHECK: True})
    (device,) = await devices(entries, mqtt=mqtt)
    await device.wake("你好小智", SPEECH, phrase_audio=tone(OTHER_TONE, 0.8))
    await stood_down(device, within=5.0)
    assert device.tts_sentences == []
    assert voice.stt.calls == 1  # the check only: no turn ran
    false_wakes = [e.data for e in events if e.data["type"] == "false_wake"]
    assert false_wakes == [
        {
            "device_id": device_id(entries[0]),
            "type": "false_wake",
            "heard": "今天天气怎么样",
            "wake_word": "你好小智",
        }
    ]
    assert entries[0].runtime_data.available

    # A real wake word passes, and the turn hears every word after it.
    await device.wake("你好小智", SPEECH, phrase_audio=tone(WAKE_TONE, 0.8))
    await answered(device)
    assert voice.stt.calls == 3
    speech_heard(voice)


async def test_the_check_lets_a_start_without_wake_word_through(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A button press or a board without pre-roll has nothing to check."""
    voice.stt.text = hears
    entries = await boxes(None, **{CONF_FALSE_WAKE_CHECK: True})
    (device,) = await devices(entries)
    await device.wake("你好小智", SPEECH, preroll=0)
    await answered(device)
    await device.wake("你好小智", SPEECH, detect=False)
    await device.wait_for(lambda: len(device.tts_sentences) >= 2, timeout=15)
    assert voice.stt.calls == 2  # the turns only


async def test_a_listen_start_said_twice_while_deciding(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """The second listen start of a box waiting for its area changes nothing."""
    entries = await boxes("Hall", "Hall")
    near, far = await devices(entries)
    await asyncio.gather(
        near.wake("你好小智", SPEECH, loudness=-15.0),
        far.wake("你好小智", SPEECH, loudness=-40.0),
    )
    await near.send_listen("start", "auto")
    await stood_down(far, within=1.0)
    await answered(near)
    assert voice.stt.calls == 1
    speech_heard(voice)


async def test_a_wake_word_during_a_turn_is_checked_and_starts_anew(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
) -> None:
    """A box that hears its wake word while listened to: the old turn is dropped.

    (A text client may do it; the firmware stops its wake word engine while
    it listens.) The new pre-roll is checked, and the new turn answers.
    """
    voice.stt.text = hears
    entries = await boxes(None, **{CONF_FALSE_WAKE_CHECK: True})
    (device,) = await devices(entries)
    await device.wake("你好小智", silence(3.0), phrase_audio=tone(WAKE_TONE, 0.8))
    await device.wait_for(lambda: voice.stt.calls == 2, timeout=5)  # the turn
    await device.wake("你好小智", SPEECH, phrase_audio=tone(WAKE_TONE, 0.8))
    await answered(device)
    assert voice.stt.calls == 4  # check, dropped turn, check, turn
    speech_heard(voice)


@pytest.mark.parametrize("failure", ["slow", "broken", "no engine"])
async def test_a_check_that_cannot_finish_lets_the_turn_go_on(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    """A check that times out or fails must not leave the user unanswered."""
    entries = await boxes(None, **{CONF_FALSE_WAKE_CHECK: True})
    (device,) = await devices(entries)
    if failure == "slow":
        monkeypatch.setattr(wake_check, "CHECK_TIMEOUT", 0.05)
        voice.stt.delay = 0.2
    elif failure == "broken":
        calls = voice.stt.calls

        def broken_once(pcm: bytes) -> str:
            if voice.stt.calls == calls + 1:
                raise ValueError("the engine broke")
            return "turn on the lights"

        voice.stt.text = broken_once
    else:
        pipeline = assist_pipeline.async_get_pipeline(hass)
        monkeypatch.setattr(
            wake_check.stt, "async_get_speech_to_text_engine", lambda *_: None
        )
        assert pipeline.stt_engine
    await device.wake("你好小智", SPEECH)
    if failure == "no engine":
        # Without an engine the pipeline cannot listen either: it says so.
        await device.wait_for(lambda: device.state.emotion == "sad", timeout=15)
        return
    await answered(device)
    speech_heard(voice)
    why = {"slow": "no text within 0.05 s", "broken": "the engine broke"}[failure]
    assert f"the wake word could not be checked: {why}" in caplog.text


async def test_a_detect_long_before_its_start_is_no_wake_word(
    hass: HomeAssistant,
    voice: Voice,
    boxes: Callable[..., Awaitable[list[MockConfigEntry]]],
    devices: Callable[..., Awaitable[list[SimulatedDevice]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """xiaozhi-sdk greets with a bare detect ("hi") after pairing.

    A start long after it is a start without a wake word: it wins at once.
    """
    monkeypatch.setattr(gate, "DETECT_TO_START", 0.2)
    entries = await boxes("Hall", "Hall")
    greeter, other = await devices(entries)
    await greeter.send_listen("detect", text="hi")
    await asyncio.sleep(0.3)  # time passes: the detect belongs to no start
    assert entries[0].runtime_data.entry_data.wake_word is None  # no wake word
    await asyncio.gather(
        other.wake("你好小智", SPEECH, loudness=-5.0),
        after(0.05, greeter.wake("你好小智", SPEECH, detect=False)),
    )
    await stood_down(other, within=1.0)
    await answered(greeter)
