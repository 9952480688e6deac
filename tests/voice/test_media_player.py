"""The device as a speaker: files, live streams, stop, wake, replace, volume.

Sources are served by a real HTTP server on loopback; the simulated device
fetches ``notify`` streams over HTTP and plays them through its 20-packet
queue in real time, or plays what arrives on a conversation's audio.
"""

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from homeassistant.components import ffmpeg, persistent_notification, tts
from homeassistant.components.assist_satellite import websocket_api as satellite_ws
from homeassistant.components.media_player import MediaPlayerEntityFeature
from homeassistant.core import Event, EventStateChangedData, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.event import async_track_state_change_event
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.typing import WebSocketGenerator

from custom_components.xiaozhi.const import DOMAIN
from custom_components.xiaozhi.media import notify
from simulator import SimulatedDevice
from simulator.voice import dominant_frequency, mp3_bytes, silence, tone
from tests.conftest import LOOPBACK_OTA_URL, MAC, TOKEN, WS_URL, wait_for_runtime
from tests.voice.conftest import Voice, connected, satellite_id, state_reached
from tests.voice.test_turn import FRAME, texts

pytestmark = pytest.mark.mqtt_endpoint

RATE = 24000


def player_id(hass: HomeAssistant) -> str:
    """Return the device's media player entity."""
    entity_id = er.async_get(hass).async_get_entity_id(
        "media_player", DOMAIN, f"{MAC}-media_player"
    )
    assert entity_id is not None
    return entity_id


class Sources:
    """A media server: a song, a radio that never ends, a missing file."""

    def __init__(self, server: TestServer) -> None:
        """Serve from ``server``."""
        self.server = server
        self.radio_listeners = 0
        self.radio_closed = asyncio.Event()

    def url(self, path: str) -> str:
        """Return the absolute URL of ``path``."""
        return str(self.server.make_url(path))


@pytest.fixture
async def sources(socket_enabled: None) -> AsyncGenerator[Sources]:
    """Serve a 2 s song, an endless radio (both MP3) and a 404."""
    song = mp3_bytes(440, 2.0)
    second = mp3_bytes(660, 1.0)

    async def file(request: web.Request) -> web.Response:
        body = song if request.path == "/song.mp3" else second
        return web.Response(body=body, content_type="audio/mpeg")

    async def radio(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "audio/mpeg"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        holder.radio_listeners += 1
        try:
            while True:  # a server sends ahead, then as fast as it is read
                await response.write(second)
        finally:
            holder.radio_closed.set()

    async def missing(_request: web.Request) -> web.Response:
        return web.Response(status=404)

    async def garbage(_request: web.Request) -> web.Response:
        return web.Response(body=b"not audio at all " * 4000, content_type="audio/mpeg")

    app = web.Application()
    app.router.add_get("/song.mp3", file)
    app.router.add_get("/other.mp3", file)
    app.router.add_get("/radio.mp3", radio)
    app.router.add_get("/missing.mp3", missing)
    app.router.add_get("/garbage.mp3", garbage)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    holder = Sources(server)
    yield holder
    await server.close()


@pytest.fixture
async def speaker(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return an idle device on MQTT whose firmware plays ``notify``."""
    device = simulators(ota_url=LOOPBACK_OTA_URL, firmware="2.5.0", decode_queue=20)
    await device.provision()
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    return device


async def play(hass: HomeAssistant, media_id: str, **data: Any) -> None:
    """Call ``media_player.play_media`` on the device."""
    await hass.services.async_call(
        "media_player",
        "play_media",
        {
            "entity_id": player_id(hass),
            "media_content_id": media_id,
            "media_content_type": "music",
            **data,
        },
        blocking=True,
    )


def state(hass: HomeAssistant) -> str:
    """Return the media player's state."""
    current = hass.states.get(player_id(hass))
    assert current is not None
    return current.state


async def until_state(hass: HomeAssistant, wanted: str, timeout: float = 5) -> None:
    """Wait until the media player's state is ``wanted``."""
    if state(hass) != wanted:
        await asyncio.wait_for(state_reached(hass, player_id(hass), wanted), timeout)


async def test_a_song_plays_whole_on_an_idle_device(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """The device fetches the song as Ogg Opus and plays all of it, in tune."""
    url = sources.url("/song.mp3")
    await play(hass, url, extra={"metadata": {"title": "A song", "artist": "Someone"}})
    current = hass.states.get(player_id(hass))
    assert current is not None
    assert current.state == "playing"
    assert current.attributes["media_content_id"] == url  # echoed as sent
    assert current.attributes["media_title"] == "A song"
    assert current.attributes["media_position"] == 0
    (sound,) = speaker.notify_sounds
    assert sound.subtitles == ["A song"]
    await until_state(hass, "idle")
    idle_at = hass.loop.time()
    await speaker.wait_for(lambda: sound.complete is not None)
    assert sound.complete is True
    assert sound.max_queue <= 20
    pcm = bytes(sound.pcm)
    assert abs(len(pcm) / 2 / RATE - 2.0) <= 2 * FRAME
    assert abs(dominant_frequency(pcm, RATE) - 440) <= 5
    # Playing ended when the device had played it, not when it was sent.
    assert sound.finished_at is not None
    assert abs(sound.finished_at - idle_at) < 0.5
    assert speaker.server_hello is None  # no conversation was opened


@pytest.fixture
def no_ffmpeg(hass: HomeAssistant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run Home Assistant without the ffmpeg binary, as the demo machine does."""
    manager = ffmpeg.get_ffmpeg_manager(hass)
    monkeypatch.setattr(manager, "binary", "/nonexistent/ffmpeg")


async def test_tts_speak_plays_without_ffmpeg_and_shows_its_text(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
    no_ffmpeg: None,
) -> None:
    """``tts.speak`` on the speaker: WAV from the engine, played as it is.

    The default (MP3 through Home Assistant's proxy) needs the ffmpeg
    binary, which this machine lacks: asking for WAV needs no conversion.
    """
    voice.tts.seconds = 1.5
    shown: list[tuple[str, Any, Any]] = []

    @callback
    def follow(event: Event[EventStateChangedData]) -> None:
        if (new := event.data["new_state"]) is not None:
            shown.append(
                (
                    new.state,
                    new.attributes.get("media_title"),
                    new.attributes.get("media_duration"),
                )
            )

    unsubscribe = async_track_state_change_event(hass, player_id(hass), follow)
    await hass.services.async_call(
        "tts",
        "speak",
        {
            "entity_id": voice.tts.entity_id,
            "media_player_entity_id": player_id(hass),
            "message": "Dinner is ready",
        },
        blocking=True,
    )
    unsubscribe()
    # An announcement: shown while it plays, with its text and length.
    assert shown == [("playing", "Dinner is ready", 2), ("idle", None, None)]
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.complete is not None)
    pcm = bytes(sound.pcm)
    assert abs(len(pcm) / 2 / RATE - 1.5) <= 2 * FRAME
    assert abs(dominant_frequency(pcm, RATE) - 880) <= 5


async def test_spoken_text_played_as_media_shows_its_text(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
    no_ffmpeg: None,
) -> None:
    """Played (not announced): the text is the title, its length the duration."""
    voice.tts.seconds = 1.5
    await play(
        hass, tts.generate_media_source_id(hass, "Dinner is ready", voice.tts.entity_id)
    )
    current = hass.states.get(player_id(hass))
    assert current is not None
    assert current.state == "playing"
    assert current.attributes["media_title"] == "Dinner is ready"
    assert current.attributes["media_duration"] == 2
    (sound,) = speaker.notify_sounds
    assert sound.subtitles == ["Dinner is ready"]
    await until_state(hass, "idle")
    await speaker.wait_for(lambda: sound.complete is not None)
    assert abs(len(sound.pcm) / 2 / RATE - 1.5) <= 2 * FRAME


async def test_tts_speak_that_fails_names_the_text_to_speech(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
) -> None:
    """The engine makes nothing: the error says text-to-speech, not HTTP 500."""
    voice.tts.fail = True
    with pytest.raises(HomeAssistantError) as err:
        await hass.services.async_call(
            "media_player",
            "play_media",
            {
                "entity_id": player_id(hass),
                "media_content_id": tts.generate_media_source_id(
                    hass, "Dinner is ready", voice.tts.entity_id
                ),
                "media_content_type": "music",
            },
            blocking=True,
        )
    assert err.value.translation_key == "tts_failed"
    assert speaker.notify_sounds == []


async def test_a_live_stream_plays_until_stopped(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """A radio never ends: it plays at the device's pace; stop is heard at once."""
    await play(hass, sources.url("/radio.mp3"))
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.packets >= 25, timeout=5)
    assert state(hass) == "playing"
    loop = hass.loop
    stopped = loop.time()
    await hass.services.async_call(
        "media_player", "media_stop", {"entity_id": player_id(hass)}, blocking=True
    )
    assert state(hass) == "idle"
    await speaker.wait_for(lambda: sound.complete is not None, timeout=2)
    # The device dropped what it held: silent within a second.
    assert sound.complete is False
    assert sound.finished_at is not None
    assert sound.finished_at - stopped < 1.0
    played = len(sound.pcm) / 2 / RATE
    assert played < 4.0  # about a second ahead, not the radio's burst
    assert abs(dominant_frequency(bytes(sound.pcm), RATE) - 660) <= 5
    # The radio is let go.
    async with asyncio.timeout(5):
        await sources.radio_closed.wait()


async def test_play_media_replaces_what_plays(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """A second song stops the first; the device plays the second whole."""
    await play(hass, sources.url("/radio.mp3"))
    first = speaker.notify_sounds[0]
    await speaker.wait_for(lambda: first.packets >= 5, timeout=5)
    await play(hass, sources.url("/other.mp3"))
    await speaker.wait_for(lambda: first.complete is not None)
    assert first.complete is False
    assert len(speaker.notify_sounds) == 2
    second = speaker.notify_sounds[1]
    await until_state(hass, "idle")
    await speaker.wait_for(lambda: second.complete is not None)
    assert second.complete is True
    assert abs(dominant_frequency(bytes(second.pcm), RATE) - 660) <= 5


async def test_a_wake_word_cancels_the_music(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """The user speaks over the music: it stops, and the conversation is theirs."""
    voice.tts.seconds = 0.3
    await play(hass, sources.url("/radio.mp3"))
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.packets >= 5, timeout=5)
    await speaker.wake("你好小智", tone(440, 1.0) + silence(1.0))
    assert sound.complete is False
    await until_state(hass, "idle")
    await speaker.wait_for(lambda: speaker.goodbyes_received >= 1, timeout=15)
    assert voice.stt.calls == 1


async def test_an_announcement_interrupts_the_music(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """An announcement stops the music, plays, and the music does not resume."""
    voice.tts.seconds = 0.5
    await play(hass, sources.url("/radio.mp3"))
    music = speaker.notify_sounds[0]
    await speaker.wait_for(lambda: music.packets >= 5, timeout=5)
    await hass.services.async_call(
        "assist_satellite",
        "announce",
        {"entity_id": satellite_id(hass), "message": "Dinner is ready"},
        blocking=True,
    )
    await speaker.wait_for(lambda: music.complete is not None)
    assert music.complete is False
    assert state(hass) == "idle"
    announcement = speaker.notify_sounds[1]
    await speaker.wait_for(lambda: announcement.complete is not None)
    assert announcement.complete is True
    assert abs(dominant_frequency(bytes(announcement.pcm), RATE) - 880) <= 5
    assert len(speaker.notify_sounds) == 2


async def test_the_media_players_announce_goes_through_the_satellite(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """``announce: true`` (Music Assistant's announcements) plays as one."""
    await play(hass, sources.url("/other.mp3"), announce=True)
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.complete is not None)
    assert sound.complete is True
    assert abs(len(sound.pcm) / 2 / RATE - 1.0) <= 2 * FRAME
    assert state(hass) == "idle"


async def test_firmware_without_notify_is_learnt_then_refused_at_once(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first try waits for a fetch that never comes; the next fails at once."""
    monkeypatch.setattr(notify, "NOTIFY_FETCH_TIMEOUT", 0.3)
    device = simulators(ota_url=LOOPBACK_OTA_URL, firmware="2.4.2", notify=False)
    await device.provision()
    await device.connect()
    runtime = init_integration.runtime_data
    await wait_for_runtime(runtime, lambda m: m.connected)
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, sources.url("/song.mp3"))
    assert err.value.translation_key == "play_needs_conversation"
    assert runtime.entry_data.plays_notify is False
    assert state(hass) == "idle"
    started = hass.loop.time()
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, sources.url("/song.mp3"))
    assert err.value.translation_key == "play_needs_conversation"
    assert hass.loop.time() - started < 0.2
    assert device.notify_sounds == []


async def test_a_missing_source_is_a_clear_error(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """The device fetched, the source did not answer: the error says so."""
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, sources.url("/missing.mp3"))
    assert err.value.translation_key == "media_unavailable"
    assert "404" in str(err.value.translation_placeholders)
    assert state(hass) == "idle"
    (sound,) = speaker.notify_sounds
    assert sound.complete is False  # the device got an error, not audio


async def test_volume_goes_through_the_devices_tool(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
) -> None:
    """Volume set and step call the device's volume tool; the level follows."""
    current = hass.states.get(player_id(hass))
    assert current is not None
    features = current.attributes["supported_features"]
    assert features & MediaPlayerEntityFeature.VOLUME_SET
    assert features & MediaPlayerEntityFeature.VOLUME_STEP
    assert not features & MediaPlayerEntityFeature.PAUSE  # the firmware cannot
    assert not features & MediaPlayerEntityFeature.VOLUME_MUTE
    since = len(speaker.calls)
    await hass.services.async_call(
        "media_player",
        "volume_set",
        {"entity_id": player_id(hass), "volume_level": 0.35},
        blocking=True,
    )
    call = await speaker.wait_for_call("self.audio_speaker.set_volume", since=since)
    assert call.arguments == {"volume": 35}
    await hass.async_block_till_done()
    current = hass.states.get(player_id(hass))
    assert current is not None
    assert current.attributes["volume_level"] == 0.35
    since = len(speaker.calls)
    await hass.services.async_call(
        "media_player", "volume_up", {"entity_id": player_id(hass)}, blocking=True
    )
    call = await speaker.wait_for_call("self.audio_speaker.set_volume", since=since)
    assert call.arguments == {"volume": 45}


async def test_media_sources_can_be_browsed(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
    hass_ws_client: WebSocketGenerator,
) -> None:
    """The media browser shows Home Assistant's media sources."""
    client = await hass_ws_client(hass)
    await client.send_json_auto_id(
        {"type": "media_player/browse_media", "entity_id": player_id(hass)}
    )
    response = await client.receive_json()
    assert response["success"]
    assert response["result"]["title"]


async def test_the_wizards_connection_test_passes_when_the_device_fetches(
    hass: HomeAssistant,
    voice: Voice,
    speaker: SimulatedDevice,
    hass_ws_client: WebSocketGenerator,
) -> None:
    """The "Set up voice assistant" wizard: the device itself fetches the sound."""
    client = await hass_ws_client(hass)
    await client.send_json_auto_id(
        {"type": "assist_satellite/test_connection", "entity_id": satellite_id(hass)}
    )
    response = await client.receive_json()
    assert response["result"] == {"status": "success"}
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.complete is not None, timeout=5)
    assert sound.complete is True


async def test_the_connection_test_says_why_a_device_cannot_play(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    hass_ws_client: WebSocketGenerator,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A device that cannot play while idle: a notification says why, no traceback."""
    monkeypatch.setattr(notify, "NOTIFY_FETCH_TIMEOUT", 0.3)
    monkeypatch.setattr(satellite_ws, "CONNECTION_TEST_TIMEOUT", 1.5)
    device = simulators(ota_url=LOOPBACK_OTA_URL, firmware="2.4.2", notify=False)
    await device.provision()
    await device.connect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: m.connected)
    client = await hass_ws_client(hass)
    await client.send_json_auto_id(
        {"type": "assist_satellite/test_connection", "entity_id": satellite_id(hass)}
    )
    response = await client.receive_json()
    assert response["result"] == {"status": "timeout"}
    await hass.async_block_till_done()
    notifications = persistent_notification._async_get_or_create_notifications(hass)
    (shown,) = [item for key, item in notifications.items() if key.startswith(DOMAIN)]
    assert "conversation" in shown["message"]
    # It says what to do: wake the box and retry, or update it.
    assert "2.4.2" in shown["message"]
    assert "Retry" in shown["message"]
    assert "Firmware" in shown["message"]
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("chip", ["esp32s3", "esp32c3"])
async def test_music_plays_after_the_reply_in_a_conversation(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
    chip: str,
) -> None:
    """Asked during a reply, the song waits for it, then plays on the open audio.

    A board without PSRAM gets the song, as the reply, with no burst.
    """
    voice.tts.seconds = 1.0
    device = simulators(
        ota_url=LOOPBACK_OTA_URL,
        mic_speed=4.0,
        notify=False,
        chip=chip,
        wake_preroll=chip != "esp32c3",
    )
    await device.provision()
    await connected(device, init_integration)
    await device.wake("你好小智", tone(440, 1.0) + silence(1.0))
    await device.wait_for(lambda: device.state.activity == "speaking", timeout=10)
    await play(hass, sources.url("/other.mp3"))
    assert state(hass) == "buffering"  # the reply goes first
    await until_state(hass, "playing", timeout=10)
    await until_state(hass, "idle", timeout=10)
    await device.wait_for(lambda: device.goodbyes_received >= 1, timeout=10)
    played = bytes(device.speaker.record.played_pcm)
    # The reply (880 Hz, 1 s), then the song (660 Hz, 1 s), nothing dropped.
    assert abs(len(played) / 2 / RATE - 2.0) <= 3 * FRAME
    assert abs(dominant_frequency(played[-RATE:], RATE) - 660) <= 5
    assert device.speaker.record.dropped == 0
    # The song follows the reply with the device Speaking throughout: a stop
    # and a start between them would have it Listening (a listen start) and
    # dropping audio in the meantime.
    assert tts_states(device) == ["tts:start", "tts:stop"]
    assert device.notify_sounds == []
    assert device.speaker.record.bursts == 0
    if chip == "esp32c3":
        assert device.speaker.record.max_burst == 1


async def test_what_does_not_decode_is_a_clear_error(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """A source that is not audio: the device gets an error, the user a reason."""
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, sources.url("/garbage.mp3"))
    assert err.value.translation_key == "play_failed"
    assert state(hass) == "idle"
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.complete is not None)
    assert sound.complete is False


async def test_an_idle_websocket_device_cannot_play(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Not connected until woken: the error says what would work."""
    device = simulators(ws_url=WS_URL, token=TOKEN)
    await connected(device, init_integration)
    await device.disconnect()
    await wait_for_runtime(init_integration.runtime_data, lambda m: not m.connected)
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, sources.url("/song.mp3"))
    assert err.value.translation_key == "play_not_connected"


def tts_states(device: SimulatedDevice) -> list[str]:
    """Return the ``tts`` starts and stops the device was sent, in order."""
    return [what for what in texts(device) if what in ("tts:start", "tts:stop")]


async def conversation_device(
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Return a device on MQTT without ``notify``, connected and idle."""
    device = simulators(ota_url=LOOPBACK_OTA_URL, mic_speed=4.0, notify=False)
    await device.provision()
    await connected(device, init_integration)
    return device


async def radio_in_a_conversation(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    entry: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> SimulatedDevice:
    """Ask for the radio during a reply; return the device once it plays."""
    voice.tts.seconds = 0.3
    device = await conversation_device(entry, simulators)
    await device.wake("你好小智", tone(440, 1.0) + silence(1.0))
    await device.wait_for(lambda: device.state.activity == "speaking", timeout=10)
    await play(hass, sources.url("/radio.mp3"))
    await until_state(hass, "playing", timeout=10)
    return device


async def test_music_in_a_conversation_stops_on_request(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """Stop: the device is told tts stop, and the conversation ends."""
    device = await radio_in_a_conversation(
        hass, voice, sources, init_integration, simulators
    )
    record = device.speaker.record
    played = record.played
    await device.wait_for(lambda: record.played > played + 10, timeout=10)
    dropped = record.dropped
    await hass.services.async_call(
        "media_player", "media_stop", {"entity_id": player_id(hass)}, blocking=True
    )
    assert state(hass) == "idle"
    await device.wait_for(lambda: device.goodbyes_received >= 1, timeout=5)
    # Nothing was sent after the stop (the device drops audio once it is not
    # Speaking), and the stop came once.
    assert record.dropped == dropped
    assert tts_states(device) == ["tts:start", "tts:stop"]
    async with asyncio.timeout(5):
        await sources.radio_closed.wait()


async def test_the_button_silences_music_in_a_conversation(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """An abort (its button) while music plays: quiet, and the conversation ends."""
    device = await radio_in_a_conversation(
        hass, voice, sources, init_integration, simulators
    )
    await device.send_abort()
    await until_state(hass, "idle")
    await device.wait_for(lambda: device.goodbyes_received >= 1, timeout=5)


async def test_music_waiting_for_a_reply_is_dropped_with_its_conversation(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    init_integration: MockConfigEntry,
    simulators: Callable[..., SimulatedDevice],
) -> None:
    """The device goes away before the reply ends: nothing plays later."""
    voice.tts.seconds = 3.0
    device = await conversation_device(init_integration, simulators)
    await device.wake("你好小智", tone(440, 1.0) + silence(1.0))
    await device.wait_for(lambda: device.state.activity == "speaking", timeout=10)
    await play(hass, sources.url("/radio.mp3"))
    assert state(hass) == "buffering"
    await device.disconnect()
    async with asyncio.timeout(5):
        await sources.radio_closed.wait()
    assert init_integration.runtime_data.player.now is None


async def test_without_a_satellite_nothing_announces(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    speaker: SimulatedDevice,
    entity_registry: er.EntityRegistry,
) -> None:
    """The media player's announce needs the device's Assist satellite."""
    entity_registry.async_update_entity(
        satellite_id(hass), disabled_by=er.RegistryEntryDisabler.USER
    )
    await hass.async_block_till_done()
    with pytest.raises(HomeAssistantError) as err:
        await play(hass, "http://example.invalid/a.mp3", announce=True)
    assert err.value.translation_key == "announce_voice_off"
    assert init_integration.runtime_data.conversation.busy is False
    assert speaker.notify_sounds == []


async def test_the_button_during_idle_music_starts_a_conversation(
    hass: HomeAssistant,
    voice: Voice,
    sources: Sources,
    speaker: SimulatedDevice,
) -> None:
    """The device drops the stream itself: the player follows, the user talks."""
    voice.tts.seconds = 0.3
    await play(hass, sources.url("/radio.mp3"))
    (sound,) = speaker.notify_sounds
    await speaker.wait_for(lambda: sound.packets >= 5, timeout=5)
    await speaker.press_button()
    await speaker.wait_for(lambda: sound.complete is not None)
    assert sound.complete is False
    await until_state(hass, "idle")
    async with asyncio.timeout(5):
        await sources.radio_closed.wait()
