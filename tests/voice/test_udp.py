"""A voice turn over MQTT + UDP: audio on the UDP channel, ``goodbye`` ends it.

The device stays connected over MQTT before, during and after the
conversation; each conversation opens an audio channel with its own key.
"""

import asyncio
from collections.abc import Callable

from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import intent
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.xiaozhi.domain_data import DATA_KEY
from custom_components.xiaozhi.media import notify
from custom_components.xiaozhi.protocol.audio.pacing import (
    LEAD_FRAMES,
    TTS_START_SETTLE,
)
from custom_components.xiaozhi.protocol.mqtt import udp
from custom_components.xiaozhi.protocol.mqtt.link import MqttLink
from custom_components.xiaozhi.runtime import XiaozhiRuntime
from simulator import SimulatedDevice
from simulator.voice import MicEncoder, dominant_frequency, silence, tone
from tests.conftest import LOOPBACK_OTA_URL, wait_for_runtime
from tests.library.kernel import kernel_receive_times
from tests.voice.conftest import Voice, satellite_id, state_reached
from tests.voice.test_turn import FRAME, SPEECH, loud_seconds, stop_after

pytestmark = pytest.mark.mqtt_endpoint


def audio_open(runtime: XiaozhiRuntime) -> bool:
    """Return True while the device's conversation audio is open."""
    return runtime.session is not None and runtime.session.audio_open


@pytest.fixture
async def mqtt_talker(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return the paired device, connected over MQTT and idle."""
    device = simulators(ota_url=LOOPBACK_OTA_URL, mic_speed=4.0)
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
    runtime = init_integration.runtime_data
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
    assert runtime.connected
    assert not runtime.session.audio_open
    assert isinstance(runtime.session.link, MqttLink)
    assert runtime.session.link.channel is None
    # The device may go back to listening after tts stop (auto mode) before
    # the goodbye reaches it: that late listen start opens no turn.
    await hass.async_block_till_done()
    assert hass.states.get(satellite_id(hass)).state == "idle"
    assert runtime.session.audio_open is False
    # ... and the goodbye leaves the device idle, its microphone off.
    assert mqtt_talker.state.activity == "idle"
    assert not mqtt_talker.audio_channel_open
    assert not mqtt_talker.microphone_on


async def test_a_pre_roll_read_after_listen_start_stays_out_of_the_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """A busy server reads detect and listen start before the pre-roll.

    The UDP datagrams wait in the kernel while the turn starts; read late,
    the pre-roll (its wake phrase a 440 Hz tone of 0.8 s) is still told from
    the live speech by its sequence and the kernel's receive times, and
    speech-to-text hears the speech alone.
    """
    endpoint = hass.data[DATA_KEY].endpoints.udp
    assert endpoint is not None
    assert endpoint._sock is not None
    fd, loop = endpoint._sock.fileno(), asyncio.get_running_loop()
    listening = state_reached(hass, satellite_id(hass), "listening")
    with kernel_receive_times():
        loop.remove_reader(fd)  # the loop is busy elsewhere: nothing read
        try:
            await mqtt_talker.wake("你好小智", tone(440, 1.5) + silence(1.0))
            await asyncio.wait_for(listening, 15)
        finally:
            loop.add_reader(fd, endpoint._read_ready)
    await conversation_over(mqtt_talker)
    heard = bytes(voice.stt.received)
    assert abs(loud_seconds(heard) - 1.5) <= FRAME
    assert abs(dominant_frequency(heard, 16000) - 440) <= 5
    assert mqtt_talker.udp_record.dropped == {}


async def test_button_abort_over_mqtt_stops_and_listens_again(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """The button while speaking: tts stop at once, the next turn, then goodbye."""
    voice.tts.seconds = 5.0
    await mqtt_talker.wake("你好小智", SPEECH)
    await mqtt_talker.wait_for(
        lambda: mqtt_talker.speaker.record.received >= 5, timeout=15
    )
    pressed = asyncio.get_running_loop().time()
    await mqtt_talker.press_button()
    await mqtt_talker.wait_for(lambda: mqtt_talker.listen_starts == 2, timeout=5)
    assert stop_after(mqtt_talker, pressed) < 0.5
    assert mqtt_talker.goodbyes_received == 0
    voice.tts.seconds = 0.3
    mqtt_talker.say(SPEECH)
    await conversation_over(mqtt_talker)
    assert voice.stt.calls == 2
    assert mqtt_talker.connected


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
    runtime = init_integration.runtime_data
    await mqtt_talker.wake("你好小智", tone(300, 3.0))
    await wait_for_runtime(
        runtime, lambda m: m.session is not None and m.session.audio_open
    )
    await mqtt_talker.close_audio_channel()
    await wait_for_runtime(
        runtime, lambda m: m.session is not None and not m.session.audio_open
    )
    assert runtime.connected
    events = hass.states.async_all("event")
    assert any(
        state.attributes.get("event_type") == "conversation_ended" for state in events
    )


async def test_wake_word_during_an_announcement_starts_a_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """The wake word cuts the announcement short and the user is heard."""
    await voice.use_agent()
    voice.tts.seconds = 0.4
    voice.agent.ask_back = True  # the conversation stays open
    await mqtt_talker.wake("你好小智", SPEECH)
    await mqtt_talker.wait_for(lambda: mqtt_talker.listen_starts == 2, timeout=15)
    voice.agent.ask_back = False
    voice.tts.seconds = 5.0
    call = asyncio.create_task(
        hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "message": "Long", "preannounce": False},
            blocking=True,
        )
    )
    await mqtt_talker.wait_for(
        lambda: mqtt_talker.speaker.record.received >= 5, timeout=15
    )
    heard = len(mqtt_talker.stt_texts)
    mqtt_talker.say(SPEECH)
    await mqtt_talker.interrupt()
    await asyncio.wait_for(call, 10)
    await mqtt_talker.wait_for(lambda: len(mqtt_talker.stt_texts) > heard, timeout=15)
    assert mqtt_talker.goodbyes_received == 0  # not before the user was heard
    await conversation_over(mqtt_talker)


@pytest.fixture
async def new_firmware(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return a device on firmware that plays ``notify`` sounds, on MQTT."""
    device = simulators(ota_url=LOOPBACK_OTA_URL, firmware="2.5.0")
    await device.provision()
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda m: m.connected)
    return device


async def test_idle_announcement_is_fetched_and_played(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    new_firmware: SimulatedDevice,
) -> None:
    """No wake word: the device fetches the message as Ogg Opus and plays it."""
    voice.tts.seconds = 0.8
    loop = asyncio.get_running_loop()
    started = loop.time()
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": satellite_id(hass), "message": "Dinner is ready"},
        blocking=True,
    )
    took = loop.time() - started
    (sound,) = new_firmware.notify_sounds
    assert sound.status == 200
    assert sound.subtitles == ["Dinner is ready"]
    pcm = sound.pcm
    # The message alone (the device plays its own chime), whole, in tune.
    assert abs(len(pcm) / 2 / 24000 - 0.8) <= FRAME
    assert abs(dominant_frequency(pcm, 24000) - 880) <= 5
    assert took >= 0.8  # returns once it has played
    assert new_firmware.server_hello is None  # no conversation was opened
    # Nothing ends a conversation the user may have started meanwhile: a
    # request sent now arrives after anything sent before it.
    runtime = init_integration.runtime_data
    await runtime.commands.async_call_tool("self.get_device_status", {})
    assert "goodbye" not in [frame["type"] for frame in new_firmware.received]
    # The URL served once: asking again is refused.
    status, _body = await new_firmware.http_request("GET", sound.url)
    assert status == 404


async def test_a_wake_during_an_idle_announcement_keeps_its_conversation(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    new_firmware: SimulatedDevice,
) -> None:
    """The user speaks while the sound plays: the announcement ends nothing."""
    voice.tts.seconds = 2.0
    announcing = hass.async_create_task(
        hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "message": "Dinner is ready"},
            blocking=True,
        )
    )
    await new_firmware.wait_for(
        lambda: (
            bool(new_firmware.notify_sounds)
            and new_firmware.notify_sounds[0].packets > 0
        )
    )
    voice.tts.seconds = 0.3
    await new_firmware.wake("你好小智", tone(440, 1.0) + silence(1.0))
    await announcing
    await new_firmware.wait_for(
        lambda: any(f.get("state") == "stop" for f in new_firmware.received), 15
    )
    assert voice.stt.calls == 1
    assert "goodbye" not in [frame["type"] for frame in new_firmware.received][:-1]


async def test_notify_is_learnt_from_behaviour_not_the_version(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Firmware 2.4.2 from main, with notify: the sound is fetched and played."""
    voice.tts.seconds = 0.4
    device = simulators(ota_url=LOOPBACK_OTA_URL, firmware="2.4.2", notify=True)
    await device.provision()
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda m: m.connected)
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": satellite_id(hass), "message": "Dinner is ready"},
        blocking=True,
    )
    (sound,) = device.notify_sounds
    assert abs(len(sound.pcm) / 2 / 24000 - 0.4) <= FRAME
    assert device.alerts == []
    assert runtime.entry_data.plays_notify is True
    # Remembered until the firmware changes.
    runtime.entry_data.async_set_identity(runtime.entry_data.board, "2.4.3")
    assert runtime.entry_data.plays_notify is None


async def test_idle_announcement_on_older_firmware_shows_the_text(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first announcement finds out (no fetch); later ones show text at once."""
    monkeypatch.setattr(notify, "NOTIFY_FETCH_TIMEOUT", 0.3)
    runtime = init_integration.runtime_data
    assert runtime.entry_data.plays_notify is None
    for message in ("Dinner is ready", "Tea is ready"):
        await hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "message": message},
            blocking=True,
        )
    await mqtt_talker.wait_for(lambda: len(mqtt_talker.alerts) == 2)
    assert [alert["message"] for alert in mqtt_talker.alerts] == [
        "Dinner is ready",
        "Tea is ready",
    ]
    asked = [frame for frame in mqtt_talker.received if frame["type"] == "notify"]
    assert len(asked) == 1  # tried once, then known
    assert runtime.entry_data.plays_notify is False
    assert "its firmware (2.0.4) plays sounds only in a conversation" in caplog.text
    assert "plays sounds only in a conversation (firmware 2.0.4)" in caplog.text
    with pytest.raises(HomeAssistantError, match="no text to show"):
        await hass.services.async_call(
            "assist_satellite",
            "announce",
            {"entity_id": satellite_id(hass), "media_id": "http://example.com/x.mp3"},
            blocking=True,
        )


async def test_idle_device_cannot_be_asked(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    await voice.use_agent()
    with pytest.raises(HomeAssistantError, match="only after its wake word"):
        await hass.services.async_call(
            "assist_satellite",
            "start_conversation",
            {"entity_id": satellite_id(hass), "start_message": "Lights off?"},
            blocking=True,
        )


async def test_timer_reaches_an_idle_device(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """Set from elsewhere, the timer shows on the idle device and is announced."""
    device_id = init_integration.runtime_data.entry_data.device_id
    await intent.async_handle(
        hass,
        "test",
        intent.INTENT_START_TIMER,
        {"seconds": {"value": 1}, "name": {"value": "tea"}},
        device_id=device_id,
    )
    await mqtt_talker.wait_for(lambda: len(mqtt_talker.alerts) >= 2, timeout=10)
    assert mqtt_talker.alerts[0]["message"] == "tea 0:01"
    assert mqtt_talker.alerts[1]["message"] == "tea timer finished"


QUESTION = "What time is it in Paris?"


def tts_stopped(device: SimulatedDevice) -> bool:
    """Return True once Home Assistant has said ``tts stop``."""
    return any(
        frame["type"] == "tts" and frame.get("state") == "stop"
        for frame in device.received
    )


async def test_a_question_typed_before_any_audio_is_played_once_audio_comes(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
) -> None:
    """py-xiaozhi types its first question before it sends any audio.

    Home Assistant learns the client's UDP address only from its first audio
    packet: the answer waits for it, and plays once it comes.
    """
    await voice.use_agent()
    voice.tts.seconds = 0.6
    await mqtt_talker.send_listen("detect", text=QUESTION)
    await mqtt_talker.wait_for(lambda: mqtt_talker.state.activity == "speaking")
    # The client's microphone starts a little later, when the answer's first
    # frame is already due (0.1 s after tts start).
    await asyncio.sleep(0.5)
    heard_at = asyncio.get_running_loop().time()
    silent = MicEncoder().frames(silence(0.06))[0]
    assert await mqtt_talker.send_audio_packet(silent)
    await mqtt_talker.wait_for(lambda: tts_stopped(mqtt_talker), timeout=15)
    await mqtt_talker.wait_for(lambda: mqtt_talker.speaker.idle)

    assert mqtt_talker.tts_sentences == ["Sure, done 😊"]
    record = mqtt_talker.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - 0.6) <= 2 * FRAME
    assert record.arrivals[0] > heard_at  # it waited for the client's audio


async def test_a_question_typed_with_no_audio_at_all_says_why_it_is_silent(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    mqtt_talker: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No audio at all: the answer is shown, and one log line says why it is silent."""
    monkeypatch.setattr(udp, "FIRST_AUDIO_WAIT", 0.3)
    await voice.use_agent()
    voice.tts.seconds = 0.6
    await mqtt_talker.send_listen("detect", text=QUESTION)
    await mqtt_talker.wait_for(lambda: tts_stopped(mqtt_talker), timeout=15)

    assert mqtt_talker.tts_sentences == ["Sure, done 😊"]
    assert mqtt_talker.speaker.record.received == 0
    lines = [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("custom_components.xiaozhi")
    ]
    why = [line for line in lines if "it has sent no audio yet" in line]
    assert len(why) == 1, lines
    assert not [line for line in lines if "?" in line.replace(QUESTION, "")]


@pytest.mark.parametrize("chip", ["esp32s3", "esp32c3"])
@pytest.mark.parametrize("websocket_only", [False, True], ids=["mqtt", "websocket"])
async def test_a_board_without_psram_gets_its_reply_without_a_burst(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    chip: str,
    websocket_only: bool,
) -> None:
    """An ESP32-C3 gets every frame paced from the first; its first sound is as early.

    Such a board stops after a syllable and reboots when the first frames
    arrive in a burst (the simulated one records it). Boards with PSRAM keep
    their lead of a few frames.
    """
    await voice.use_agent()  # answers at once: the first frame waits for nothing
    voice.tts.seconds = 1.2
    device = simulators(
        ota_url=LOOPBACK_OTA_URL,
        mic_speed=4.0,
        chip=chip,
        websocket_only=websocket_only,
        wake_preroll=chip != "esp32c3",
    )
    await device.provision()
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda r: r.connected)
    assert runtime.entry_data.hardware is not None
    assert runtime.entry_data.hardware.chip == chip
    await device.wake("你好小智", SPEECH)
    await device.wait_for(lambda: tts_stopped(device), timeout=15)
    await device.wait_for(lambda: device.speaker.idle)

    record = device.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - 1.2) <= FRAME
    tts_start = next(when for when, what in device.timeline if what == "tts:start")
    first_frame = record.arrivals[0] - tts_start
    # The first sound no later than with a lead, at most a frame of slack.
    assert first_frame <= TTS_START_SETTLE + FRAME
    assert record.bursts == 0
    if chip == "esp32c3":
        assert record.max_burst == 1  # no two frames within 10 ms
        assert record.max_queue <= 2
    else:  # its lead: the first frames at once, then as many queued
        assert record.max_queue >= LEAD_FRAMES
