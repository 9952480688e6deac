"""Bad input on the voice path: nothing crashes, leaks or floods the log."""

import logging
import struct

from homeassistant.core import HomeAssistant
import pytest
from pytest_homeassistant_custom_component.common import MockConfigEntry

from simulator import SimulatedDevice
from simulator.protocol import encode_audio
from tests.voice.conftest import Voice, connected
from tests.voice.test_turn import SPEECH, closed, texts

NOT_OPUS = [b"\xff" * 40, b"\x00", bytes(range(256)) * 3, b"\xfc\xff\xfe"]


def voice_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Return what the integration logged above debug about audio.

    The device's first connection is logged, and is not about audio.
    """
    return [
        record
        for record in caplog.records
        if record.name.startswith("custom_components.xiaozhi")
        and record.levelno > logging.DEBUG
        and record.msg != "%s connected (%d tools, firmware %s)"
    ]


async def test_garbage_audio_while_listening(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Packets that are not Opus count as silence; the turn goes on."""
    caplog.set_level(logging.DEBUG)
    voice.tts.seconds = 0.3
    await talker.wake("你好小智", b"")
    for packet in NOT_OPUS * 10:
        await talker.send_bytes(packet)
    talker.say(SPEECH)
    await closed(talker)
    assert voice.stt.calls == 1
    assert talker.tts_sentences
    assert voice_logs(caplog) == []


@pytest.mark.parametrize(
    ("version", "frames"),
    [
        (2, [b"\x00\x02", b"\x00\x02\x00\x00" + b"\x00" * 8 + struct.pack(">I", 999)]),
        (3, [b"\x00", b"\x00\x00\x00\x09abc", b"\x01\x00\x00\x01x"]),
    ],
    ids=["v2", "v3"],
)
async def test_wrong_headers(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    simulators: object,
    caplog: pytest.LogCaptureFixture,
    version: int,
    frames: list[bytes],
) -> None:
    """Short headers, wrong sizes, other types: dropped, one debug line."""
    caplog.set_level(logging.DEBUG)
    voice.tts.seconds = 0.3
    talker: SimulatedDevice = simulators(  # type: ignore[operator]
        ws_url="ws://192.168.1.10:8123/api/xiaozhi/v1/",
        token="device-token-for-tests-0123456789abcdef",
        mic_speed=4.0,
        protocol_version=version,
    )
    await talker.wake("你好小智", b"")
    for _ in range(20):
        for frame in frames:
            await talker.send_bytes(frame)
    talker.say(SPEECH)
    await closed(talker)
    session_logs = [r for r in caplog.records if "malformed audio" in r.getMessage()]
    assert len(session_logs) == 1
    assert session_logs[0].levelno == logging.DEBUG
    assert voice.stt.calls == 1
    assert voice_logs(caplog) == []


async def test_audio_while_not_listening_is_dropped(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Audio with no turn goes nowhere; no turn starts from it."""
    await connected(talker, init_integration)
    for _ in range(30):
        await talker.send_bytes(encode_audio(b"\xf8\xff\xfe", 1))
    await talker.send_abort()  # abort with no turn: nothing to stop
    await talker.send_notification("notifications/ping")
    await talker.wait_for(lambda: True)
    assert voice.stt.calls == 0
    assert texts(talker) == []
    assert talker.connected


async def test_oversized_frame_ends_the_link(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """A binary frame over the limit closes the link; the turn is dropped."""
    await talker.wake("你好小智", b"")
    await talker.send_bytes(b"\x00" * (2 * 1024 * 1024))
    await closed(talker)
    await hass.async_block_till_done()
    assert init_integration.runtime_data.session is None


async def test_flood_of_listen_start_and_stop(
    hass: HomeAssistant,
    voice: Voice,
    init_integration: MockConfigEntry,
    talker: SimulatedDevice,
) -> None:
    """Hundreds of starts and stops leave one turn at most, nothing running."""
    voice.tts.seconds = 0.2
    await connected(talker, init_integration)
    for _ in range(100):
        await talker.send_listen("start", "manual")
        await talker.send_listen("stop")
    await talker.send_listen("start", "auto")
    talker.say(SPEECH)
    await closed(talker)
    assert voice.stt.calls <= 101
    assert texts(talker).count("tts:stop") <= 1
