"""A voice turn end to end: microphone to pipeline, reply to the speaker."""

import asyncio
from collections.abc import Callable
import logging

from homeassistant.const import EVENT_STATE_CHANGED
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.helpers import entity_registry as er
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import WebSocketGenerator

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.voice import turn as turn_module
from custom_components.xiaozhi.voice.typed import is_typed_question
from simulator import SimulatedDevice
from simulator.voice import MicEncoder, dominant_frequency, silence, tone
from tests.conftest import MAC, TOKEN, WS_URL, wait_for_runtime
from tests.voice.conftest import Voice, loud, satellite_id, state_reached

FRAME = 0.06
SPEECH = tone(440, 1.0) + silence(1.0)


def loud_seconds(pcm: bytes, rate: int = 16000) -> float:
    """Return how long the sound in 16-bit PCM lasts (10 ms resolution)."""
    step = rate // 100 * 2
    chunks = [pcm[i : i + step] for i in range(0, len(pcm), step)]
    return sum(1 for chunk in chunks if loud(chunk)) / 100


def texts(device: SimulatedDevice) -> list[str]:
    """Return what the device was told, without MCP and audio."""
    return [
        what for _when, what in device.timeline if what not in ("audio", "mcp", "hello")
    ]


async def closed(device: SimulatedDevice, links: int = 1, timeout: float = 15) -> None:
    """Wait until ``links`` links of the device have ended."""
    await device.wait_for(lambda: len(device.close_reasons) >= links, timeout=timeout)


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_tone_survives_the_round_trip(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    version: int,
) -> None:
    """What the device hears reaches speech-to-text intact; the reply plays whole.

    The two seconds of audio the firmware sends from before the wake word are
    not part of what the user said.
    """
    voice.tts.seconds = 1.2
    talker = simulators(
        ws_url=WS_URL, token=TOKEN, mic_speed=4.0, protocol_version=version
    )
    await talker.wake("你好小智", tone(440, 1.5) + silence(1.0))
    await closed(talker)

    heard = bytes(voice.stt.received)
    assert abs(loud_seconds(heard) - 1.5) <= FRAME
    assert abs(dominant_frequency(heard, 16000) - 440) <= 5

    record = talker.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - 1.2) <= FRAME
    played = bytes(record.played_pcm)
    assert abs(len(played) / 2 / 24000 - 1.2) <= FRAME
    assert abs(dominant_frequency(played, 24000) - 880) <= 5


async def test_reply_messages_in_order_and_paced(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    went_unavailable: list[str],
) -> None:
    """What it heard, tts start, faces, the text, paced audio, then tts stop.

    The reply plays in real time a few frames ahead, never near the device's
    40-packet queue, and ``tts stop`` comes once it has played; then Home
    Assistant ends the conversation and the entities stay available.
    """
    await voice.use_agent()
    voice.tts.seconds = 2.0
    await talker.wake("你好小智", SPEECH)
    await closed(talker)
    # The link closes once the reply should have played; the simulated
    # speaker, on a busy machine, may still be playing its last frame.
    await talker.wait_for(lambda: talker.speaker.idle)

    assert texts(talker) == [
        "stt",
        "tts:start",
        "llm",
        "llm",
        "tts:sentence_start",
        "tts:stop",
    ]
    assert talker.stt_texts == ["turn on the lights"]
    assert talker.tts_sentences == ["Sure, done 😊"]
    assert talker.state.emotion == "happy"  # from the reply's emoji
    # Clients that show the llm frame's text (xiaozhi-sdk) get the emoji too.
    faces = [frame for frame in talker.received if frame["type"] == "llm"]
    assert [(face["emotion"], face["text"]) for face in faces][-1] == ("happy", "😊")
    assert all(face["text"] for face in faces)
    record = talker.speaker.record
    assert record.dropped == 0
    assert abs(record.played * FRAME - 2.0) <= FRAME
    assert record.max_queue <= 7

    times = {what: when for when, what in talker.timeline}
    first_audio = min(when for when, what in talker.timeline if what == "audio")
    last_audio = max(when for when, what in talker.timeline if what == "audio")
    assert times["tts:start"] < first_audio
    assert times["tts:stop"] > last_audio
    assert record.finished_at is not None
    assert times["tts:stop"] >= record.finished_at - FRAME
    # Paced: about real time, not everything at once.
    assert last_audio - first_audio >= 2.0 - 7 * FRAME

    assert talker.close_reasons == ["server_closed"]
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.session is None)
    assert runtime.entry_data.expected_disconnect
    volume = er.async_get(hass).async_get_entity_id("number", DOMAIN, f"{MAC}-volume")
    assert volume is not None
    assert hass.states.get(volume).state == "70"  # not unavailable
    await hass.async_block_till_done()
    assert went_unavailable == []  # not even for a moment
    assert runtime.entry_data.last_heard == "turn on the lights"
    assert runtime.entry_data.last_reply == "Sure, done 😊"


async def test_tts_engine_failing_mid_reply_ends_the_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """An engine's own error (a cloud timeout) mid-stream: said, and over."""
    await voice.use_agent()
    voice.tts.seconds = 2.0
    voice.tts.break_midway = TimeoutError("the cloud did not answer")
    await talker.wake("你好小智", SPEECH)
    await closed(talker)
    assert texts(talker)[-3:] == ["llm", "tts:sentence_start", "tts:stop"]
    assert talker.tts_sentences[-1] == "Sorry, I cannot speak right now."
    assert talker.state.emotion == "sad"
    await hass.async_block_till_done()
    assert hass.states.get(satellite_id(hass)).state == "idle"


async def test_abort_stops_the_reply_within_a_frame(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """The wake word while speaking: the audio stops, tts stop, a new turn."""
    voice.tts.seconds = 5.0
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.speaker.record.received >= 10, timeout=15)
    received = talker.speaker.record.received
    aborted = asyncio.get_running_loop().time()
    await talker.interrupt()
    await talker.wait_for(lambda: "tts:stop" in texts(talker))
    late = [
        when for when, what in talker.timeline if what == "audio" and when > aborted
    ]
    assert len(late) <= 1
    assert talker.speaker.record.received <= received + 1
    # The device listens again by itself once its queue has played: a new turn.
    talker.say(SPEECH)
    await talker.wait_for(lambda: voice.stt.calls == 2, timeout=15)
    await closed(talker)


def stop_after(device: SimulatedDevice, since: float) -> float:
    """Return how long after ``since`` the device was told ``tts stop``."""
    return next(
        when - since
        for when, what in device.timeline
        if what == "tts:stop" and when >= since
    )


async def test_an_abort_and_a_listen_start_keep_the_new_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A client that aborts and listens at once (py-xiaozhi's abort key).

    It is told tts stop all the same (the firmware needs it to stop
    speaking), and answers it with one more listen start (py-xiaozhi in
    auto conversation): the turn it started goes on, hearing all of it.
    """
    voice.tts.seconds = 5.0
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.speaker.record.received >= 10, timeout=15)
    aborted = asyncio.get_running_loop().time()
    await talker.send_raw(
        f'{{"session_id":"{talker.outgoing_session_id}","type":"abort"}}'
    )
    await talker.send_listen("start", "auto")
    await talker.wait_for(lambda: "tts:stop" in texts(talker)[-3:])
    assert stop_after(talker, aborted) < 0.5
    await talker.send_listen("start", "auto")
    voice.tts.seconds = 0.3
    talker.say(SPEECH)
    await talker.wait_for(lambda: voice.stt.calls == 2, timeout=15)
    await closed(talker)
    assert voice.stt.calls == 2  # the second listen start was no new turn
    assert abs(loud_seconds(bytes(voice.stt.received)) - 1.0) <= 2 * FRAME


async def test_button_abort_stops_and_listens_again(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A button press while speaking: quiet at once, then "listen to me".

    The firmware stays Speaking until tts stop, then listens again (auto):
    the next turn belongs to the same conversation.
    """
    await voice.use_agent()
    voice.tts.seconds = 5.0
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.speaker.record.received >= 5, timeout=15)
    pressed = asyncio.get_running_loop().time()
    await talker.press_button()
    await talker.wait_for(lambda: talker.listen_starts == 2, timeout=5)
    assert stop_after(talker, pressed) < 0.5
    assert talker.speaker.record.received < 5.0 / FRAME
    voice.tts.seconds = 0.3
    talker.say(SPEECH)
    await closed(talker)
    assert voice.stt.calls == 2
    first, second = voice.agent.inputs
    assert first.conversation_id == second.conversation_id


async def test_button_abort_in_push_to_talk_ends_the_conversation(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Manual mode goes idle after the stop: the link is let go."""
    voice.tts.seconds = 5.0
    await talker.connect()
    talker.say(SPEECH)
    await talker.send_listen("start", "manual")
    await talker.wait_for(lambda: talker.speaker.record.received >= 5, timeout=15)
    assert talker.state.activity == "speaking"
    pressed = asyncio.get_running_loop().time()
    await talker.press_button()
    await closed(talker)
    assert stop_after(talker, pressed) < 0.5
    assert talker.state.activity == "idle"
    assert voice.stt.calls == 1


async def test_a_barge_in_ends_the_answering_run_first(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """The button while the agent still answers: its run ends, then the next.

    Home Assistant allows one active turn per conversation (2026.11:
    ``intent-busy``): the agent's first run is cancelled before the device's
    next turn reaches it.
    """
    await voice.use_agent()
    voice.agent.delay = 30.0
    voice.tts.seconds = 0.3
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.state.activity == "speaking", timeout=15)
    await talker.wait_for(lambda: len(voice.agent.inputs) == 1, timeout=15)
    voice.agent.delay = 0.0
    pressed = asyncio.get_running_loop().time()
    await talker.press_button()
    await talker.wait_for(lambda: talker.listen_starts == 2, timeout=5)
    assert stop_after(talker, pressed) < 0.5
    talker.say(SPEECH)
    await closed(talker)
    assert voice.agent.cancelled == 1
    assert voice.agent.most_at_once == 1
    assert len(voice.agent.inputs) == 2
    assert talker.tts_sentences == [voice.agent.reply]
    # One link for both turns. (Home Assistant keeps no chat session for a
    # run cancelled in its first turn: the second starts a new one.)
    assert talker.close_reasons == ["server_closed"]


async def test_a_question_back_continues_the_conversation(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """The agent asks back: the link stays, the device listens, same conversation."""
    await voice.use_agent()
    voice.agent.ask_back = True
    voice.agent.reply = "Which room?"
    voice.tts.seconds = 0.5
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.listen_starts == 2, timeout=15)
    assert talker.connected
    voice.agent.ask_back = False
    voice.agent.reply = "The kitchen it is."
    talker.say(SPEECH)
    await closed(talker)
    first, second = voice.agent.inputs
    assert first.conversation_id == second.conversation_id
    assert talker.tts_sentences == ["Which room?", "The kitchen it is."]


async def test_a_new_listen_start_replaces_the_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """``listen start`` in the middle of a turn starts over cleanly."""
    await talker.wake("你好小智", tone(440, 5.0))
    await talker.wait_for(lambda: talker.mic_frames_sent > 40, timeout=15)
    await talker.send_listen("start", "auto")
    talker.say(silence(1.0))
    await closed(talker)
    assert texts(talker).count("tts:stop") == 1
    assert talker.tts_sentences


@pytest.mark.parametrize(
    ("setup", "text"),
    [
        (lambda voice: setattr(voice.stt, "text", ""), "Sorry, I did not catch that."),
        (
            lambda voice: setattr(voice.tts, "fail", True),
            "Sorry, I cannot speak right now.",
        ),
    ],
    ids=["nothing-recognized", "tts-fails"],
)
async def test_an_error_is_shown_and_ends_the_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    setup: Callable[[Voice], None],
    text: str,
) -> None:
    """The device shows a sad face and a short text; it is not left listening."""
    setup(voice)
    await talker.wake("你好小智", SPEECH)
    await closed(talker)
    assert talker.tts_sentences[-1] == text
    assert talker.state.emotion == "sad"
    assert talker.state.activity != "speaking"
    assert init_integration.runtime_data.session is None


async def test_device_gone_mid_turn(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A drop during the reply cleans up; the next wake word is served."""
    voice.tts.seconds = 5.0
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.speaker.record.received >= 3, timeout=15)
    talker.drop_link()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await hass.async_block_till_done()
    # A WebSocket device that hangs up is away as planned: the satellite goes
    # idle (nobody is left listening or speaking) and stays available.
    assert hass.states.get(satellite_id(hass)).state == "idle"
    assert runtime.entry_data.expected_disconnect

    # Another phrase: the same one within 2 s is a duplicate wake-up.
    voice.tts.seconds = 0.3
    await talker.wake("Hi ESP", SPEECH)
    await closed(talker, links=2)
    assert talker.close_reasons == ["dropped", "server_closed"]
    assert voice.stt.calls == 2
    assert hass.states.get(satellite_id(hass)).state == "idle"


async def test_device_gone_mid_sentence_asks_the_agent_nothing(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Half a sentence never reaches the agent: the run is cancelled."""
    await voice.use_agent()
    listening = state_reached(hass, satellite_id(hass), "listening")
    await talker.wake("你好小智", tone(440, 6.0))
    await asyncio.wait_for(listening, 15)
    talker.drop_link()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await hass.async_block_till_done()
    assert voice.agent.inputs == []
    assert hass.states.get(satellite_id(hass)).state == "idle"


async def test_a_device_that_stops_sending_audio_is_not_left_listening(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No audio for a while: the turn ends, the device is let go, all idle."""
    monkeypatch.setattr(turn_module, "NO_AUDIO_TIMEOUT", 0.5)
    await voice.use_agent()
    mute = simulators(ws_url=WS_URL, token=TOKEN, microphone=False)
    await mute.wake("你好小智")
    await closed(mute)
    assert mute.close_reasons == ["server_closed"]
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda d: d.session is None)
    await hass.async_block_till_done()
    assert hass.states.get(satellite_id(hass)).state == "idle"
    assert voice.agent.inputs == []
    assert "stopped sending audio while listened to" in caplog.text


async def test_push_to_talk(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Manual mode: ``listen stop`` ends what the user says."""
    voice.stt.quiet_after = 60  # only the end of the stream ends it
    voice.tts.seconds = 0.3
    await talker.connect()
    talker.say(tone(440, 0.6))
    await talker.send_listen("start", "manual")
    await talker.wait_for(lambda: talker.mic_frames_sent >= 10, timeout=15)
    await talker.send_listen("stop")
    await closed(talker)
    assert 0.5 <= loud_seconds(bytes(voice.stt.received)) <= 0.7
    assert talker.tts_sentences


async def test_reply_plays_while_it_is_synthesized(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Audio starts before the engine has finished: the stream is read as it comes."""
    voice.tts.seconds = 2.0
    voice.tts.gate = asyncio.Event()
    await talker.wake("你好小智", SPEECH)
    await talker.wait_for(lambda: talker.speaker.record.played >= 5, timeout=15)
    assert "tts:stop" not in texts(talker)
    voice.tts.gate.set()
    await closed(talker)
    assert talker.speaker.record.dropped == 0


async def test_listening_without_a_satellite_is_ended(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the satellite disabled, a listening device is told and let go."""
    caplog.set_level(logging.INFO)
    er.async_get(hass).async_update_entity(
        satellite_id(hass), disabled_by=er.RegistryEntryDisabler.USER
    )
    await hass.async_block_till_done()
    await talker.wake("你好小智", SPEECH)
    await closed(talker)
    message = talker.alerts[-1]["message"]
    assert message == "The voice assistant is off in Home Assistant."
    assert voice.stt.calls == 0
    assert "its Assist satellite is disabled" in caplog.text


async def test_the_wake_word_is_reported(
    hass: HomeAssistant,
    hass_ws_client: WebSocketGenerator,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """The satellite says which wake word the device has; it cannot be changed."""
    voice.tts.seconds = 0.2
    await talker.wake("Hi ESP", SPEECH)
    await closed(talker)
    wake_word = er.async_get(hass).async_get_entity_id(
        "sensor", DOMAIN, f"{MAC}-wake_word"
    )
    assert wake_word is not None
    assert hass.states.get(wake_word).state == "Hi ESP"
    client = await hass_ws_client(hass)
    await client.send_json_auto_id(
        {"type": "assist_satellite/get_configuration", "entity_id": satellite_id(hass)}
    )
    config = (await client.receive_json())["result"]
    assert config["active_wake_words"] == ["Hi ESP"]
    assert config["available_wake_words"] == [
        {"id": "Hi ESP", "wake_word": "Hi ESP", "trained_languages": []}
    ]
    await client.send_json_auto_id(
        {
            "type": "assist_satellite/set_wake_words",
            "entity_id": satellite_id(hass),
            "wake_word_ids": ["Hi ESP"],
        }
    )
    assert (await client.receive_json())["success"]
    await client.send_json_auto_id(
        {
            "type": "assist_satellite/set_wake_words",
            "entity_id": satellite_id(hass),
            "wake_word_ids": [],
        }
    )
    answer = await client.receive_json()
    assert not answer["success"]
    assert "built into its firmware" in answer["error"]["message"]


async def test_one_exchange_is_a_few_logbook_lines(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """An exchange reads like a Voice PE's in the logbook, plus what woke it.

    The logbook lists state changes (not attribute changes) of entities
    without a unit; the satellite's four and the wake word's event remain.
    """
    voice.tts.seconds = 0.3
    await talker.wake("你好小智", SPEECH)  # the first link learns the device
    await closed(talker)
    await wait_for_runtime(init_integration.runtime_data, lambda d: d.session is None)
    await hass.async_block_till_done()
    changes: list[tuple[str, str]] = []

    @callback
    def record(event: Event[EventStateChangedData]) -> None:
        old, new = event.data["old_state"], event.data["new_state"]
        if old is None or new is None or old.state == new.state:
            return
        if "unit_of_measurement" in new.attributes or "xiaozhi" not in new.entity_id:
            return
        changes.append((new.entity_id, new.state))

    stop = hass.bus.async_listen(EVENT_STATE_CHANGED, record)
    await talker.wake("Hi ESP", SPEECH)  # HA drops the same phrase within 2 s
    await closed(talker, links=2)
    await wait_for_runtime(init_integration.runtime_data, lambda d: d.session is None)
    await hass.async_block_till_done()
    stop()
    assert [state for entity, state in changes if entity == satellite_id(hass)] == [
        "listening",
        "processing",
        "responding",
        "idle",
    ]
    # The wake word's event, and the wake word sensor (it changed here).
    assert len(changes) == 6, changes


async def test_a_typed_question_is_answered_aloud(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A text client's detect with a sentence: the agent answers, it is spoken.

    xiaozhi-sdk's send_text and py-xiaozhi's text box send the typed question
    as a detect; no speech-to-text runs, and it is no wake word.
    """
    await voice.use_agent()
    voice.tts.seconds = 0.6
    await talker.connect()
    await talker.send_listen("detect", text="What time is it in Paris?")
    await closed(talker)
    assert voice.stt.calls == 0
    assert [turn.text for turn in voice.agent.inputs] == ["What time is it in Paris?"]
    assert talker.stt_texts == ["What time is it in Paris?"]
    assert talker.tts_sentences == ["Sure, done 😊"]
    assert abs(talker.speaker.record.played * FRAME - 0.6) <= 2 * FRAME
    runtime = init_integration.runtime_data
    assert runtime.entry_data.wake_word is None  # a question is no wake word
    assert runtime.entry_data.last_heard == "What time is it in Paris?"
    assert runtime.entry_data.last_reply == "Sure, done 😊"


@pytest.mark.parametrize(
    ("seconds", "gap"),
    [
        # Live audio: one packet per frame, not a burst.
        pytest.param(0.3, 0.02, id="paced"),
        # 15 packets read back to back: Home Assistant was busy.
        pytest.param(0.9, 0.0, id="bunched"),
    ],
)
async def test_a_question_typed_while_the_microphone_streams(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    seconds: float,
    gap: float,
) -> None:
    """py-xiaozhi starts listening and streams before its typed detect.

    Live audio is no pre-roll, however bunched it arrives: what came after
    ``listen start`` is the turn's. The sentence is still a question,
    answered, and it does not become the device's wake word.
    """
    await voice.use_agent()
    voice.tts.seconds = 0.3
    voice.stt.delay = 1.0  # whatever it heard, it is still listening
    await talker.wake("你好小智", b"", detect=False)
    for packet in MicEncoder().frames(tone(440, seconds)):
        await talker.send_audio_packet(packet)
        if gap:
            await asyncio.sleep(gap)
    await talker.send_listen("detect", text="What time is it in Paris?")
    await talker.wait_for(lambda: "Sure, done 😊" in talker.tts_sentences, timeout=15)
    # Only the typed question reached the agent, not what the mic heard.
    assert [turn.text for turn in voice.agent.inputs] == ["What time is it in Paris?"]
    assert init_integration.runtime_data.entry_data.wake_word is None


@pytest.mark.parametrize(
    ("text", "typed"),
    [
        ("你好小智", False),
        ("Hi ESP", False),
        ("Hey Jarvis", False),
        ("现在几点了", True),
        ("turn on the light", True),
        ("lights?", True),
        ("  ", False),
    ],
)
def test_what_reads_as_a_typed_question(text: str, typed: bool) -> None:
    assert is_typed_question(text, None) is typed
    assert is_typed_question(text, text) is False  # the device's own wake word


async def test_a_long_wake_word_after_its_pre_roll_is_a_wake_word(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A custom wake word that reads like a sentence, heard by the firmware.

    The firmware sends its pre-roll first: a detect right after microphone
    audio is a wake word, and the turn listens as usual.
    """
    voice.tts.seconds = 0.3
    await talker.wake("小智小智你好呀", SPEECH)
    await closed(talker)
    assert voice.stt.calls == 1
    assert init_integration.runtime_data.entry_data.wake_word == "小智小智你好呀"
