"""A client that connects before it is paired hears its code, digit by digit."""

import asyncio
from typing import Any

from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient
from homeassistant.core import HomeAssistant
import pytest

from simulator.voice import SpeakerDecoder, dominant_frequency
from tests.test_sdk_pairing import OTA, SDK_BODY, SDK_HELLO, connect_sdk, sdk_headers
from tests.voice.conftest import Voice
from tests.voice.test_turn import FRAME


async def test_the_code_is_spoken_with_the_preferred_voice(
    hass: HomeAssistant, voice: Voice, client: TestClient[Any, Any]
) -> None:
    """tts start, the sentence, the code as speech in real time, tts stop."""
    voice.tts.seconds = 1.5
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    answer = await response.json()
    code = answer["activation"]["code"]
    ws = await connect_sdk(client, answer["websocket"]["token"])
    await ws.send_json(SDK_HELLO)

    loop = asyncio.get_running_loop()
    texts: list[dict[str, Any]] = []
    audio: list[tuple[float, bytes]] = []
    while not texts or texts[-1].get("state") != "stop":
        message = await asyncio.wait_for(ws.receive(), 10)
        if message.type is WSMsgType.BINARY:
            audio.append((loop.time(), message.data))
        else:
            texts.append(message.json())
    hello, alert = texts[:2]
    assert [(frame["type"], frame.get("state")) for frame in texts[1:]] == [
        ("alert", None),
        ("tts", "start"),
        ("tts", "sentence_start"),
        ("tts", "stop"),
    ]
    rate = hello["audio_params"]["sample_rate"]
    decoder = SpeakerDecoder(rate, hello["audio_params"]["frame_duration"])
    pcm = b"".join(decoder.decode(packet) for _when, packet in audio)
    assert decoder.failed == 0
    assert abs(len(pcm) / 2 / rate - 1.5) <= FRAME
    assert abs(dominant_frequency(pcm, rate) - 880) <= 5
    # Paced for the device's queue, not sent all at once.
    assert audio[-1][0] - audio[0][0] >= 1.5 - 8 * FRAME
    # The screen shows the code; the voice says it digit by digit.
    assert code in alert["message"]
    assert voice.tts.messages == [alert["message"].replace(code, " ".join(code))]
    await ws.close()


async def test_the_code_is_not_repeated_when_the_client_listens_again(
    hass: HomeAssistant, voice: Voice, client: TestClient[Any, Any]
) -> None:
    """After our tts stop an auto-mode client listens again: no loop of the code.

    The wake word shows it again, once however often it is said at once.
    """
    voice.tts.seconds = 0.2
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    answer = await response.json()
    ws = await connect_sdk(client, answer["websocket"]["token"])
    await ws.send_json(SDK_HELLO)

    async def texts_until_stop() -> list[dict[str, Any]]:
        texts: list[dict[str, Any]] = []
        while not texts or texts[-1].get("state") != "stop":
            message = await asyncio.wait_for(ws.receive(), 10)
            if message.type is not WSMsgType.BINARY:
                texts.append(message.json())
        return texts

    await texts_until_stop()
    session = SDK_HELLO.get("session_id", "")
    await ws.send_json(
        {"session_id": session, "type": "listen", "state": "start", "mode": "auto"}
    )
    # Nothing answers a listen start (the code would come within milliseconds).
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(ws.receive(), 0.5)

    for _ in range(3):
        await ws.send_json(
            {
                "session_id": session,
                "type": "listen",
                "state": "detect",
                "text": "你好小智",
            }
        )
    texts = await texts_until_stop()
    assert [(frame["type"], frame.get("state")) for frame in texts] == [
        ("alert", None),
        ("tts", "start"),
        ("tts", "sentence_start"),
        ("tts", "stop"),
    ]
    await ws.close()
