"""Sounds fetched for a device: whole, within the limit, errors translated."""

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestServer
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
import pytest

from custom_components.xiaozhi.media import fetch
from custom_components.xiaozhi.media.fetch import async_fetch_pcm
from simulator.voice import dominant_frequency, tone, wav_bytes

RATE = 24000


@pytest.fixture
async def sound_server(socket_enabled: None) -> TestServer:
    """Serve a 2 s 440 Hz WAV in small pieces, as a slow server would."""
    wav = wav_bytes(tone(440, 2.0, rate=RATE), RATE)

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for start in range(0, len(wav), 4096):
            await response.write(wav[start : start + 4096])
            await asyncio.sleep(0)  # let the client read what has come so far
        await response.write_eof()
        return response

    async def missing(_request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/door.wav", chunked)
    app.router.add_get("/missing.wav", missing)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_a_sound_arriving_in_pieces_is_fetched_whole(
    hass: HomeAssistant, sound_server: TestServer
) -> None:
    """Every piece is read: the sound lasts as long as it was made."""
    pcm = b"".join(
        await async_fetch_pcm(hass, str(sound_server.make_url("/door.wav")), RATE)
    )
    assert abs(len(pcm) / 2 / RATE - 2.0) <= 0.01
    assert abs(dominant_frequency(pcm, RATE) - 440) <= 5


async def test_a_sound_over_the_limit_is_refused(
    hass: HomeAssistant, sound_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the limit the download stops with a translated error."""
    monkeypatch.setattr(fetch, "MAX_MEDIA_BYTES", 50_000)
    with pytest.raises(HomeAssistantError) as err:
        await async_fetch_pcm(hass, str(sound_server.make_url("/door.wav")), RATE)
    assert err.value.translation_key == "media_unavailable"
    assert "larger than" in str(err.value.translation_placeholders)


async def test_a_missing_sound_names_the_url_without_its_query(
    hass: HomeAssistant, sound_server: TestServer
) -> None:
    """A signed URL's signature stays out of the error."""
    url = str(sound_server.make_url("/missing.wav").with_query(authSig="secret"))
    with pytest.raises(HomeAssistantError) as err:
        await async_fetch_pcm(hass, url, RATE)
    placeholders = err.value.translation_placeholders or {}
    assert placeholders["url"].endswith("/missing.wav")
    assert "secret" not in str(placeholders)
