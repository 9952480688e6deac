"""Speech out: text-to-speech streams as PCM, and PCM played as paced Opus."""

from collections.abc import AsyncIterator
import logging
from typing import Any

from homeassistant.components import tts
from homeassistant.components.assist_pipeline import (
    PipelineNotFound,
    async_get_pipeline,
)
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..protocol.audio.codec import OpusEncoder, PcmConverter, WavReader, decode_file
from ..protocol.audio.pacing import DownlinkPacer, PacingStats
from .channel import VoiceChannel


async def stream_pcm(
    hass: HomeAssistant,
    stream: tts.ResultStream,
    rate: int,
) -> AsyncIterator[bytes]:
    """Yield a TTS result as 16-bit mono PCM at ``rate``.

    WAV (what the satellite asks engines for) is converted as it streams;
    any other format is decoded with PyAV once complete.
    """
    reader = WavReader() if stream.extension == "wav" else None
    converter: PcmConverter | None = None
    other = bytearray()
    async for chunk in stream.async_stream_result():
        if reader is None:
            other += chunk
            continue
        samples = reader.feed(chunk)
        if samples is None or reader.format is None:
            continue
        if converter is None:
            converter = PcmConverter(
                reader.format.sample_rate, reader.format.channels, rate
            )
        if pcm := converter.convert(samples):
            yield pcm
    if converter is not None and (pcm := converter.flush()):
        yield pcm
    if other:
        for pcm in await hass.async_add_executor_job(
            lambda: list(decode_file(bytes(other), rate))
        ):
            yield pcm


def async_speech(hass: HomeAssistant, text: str) -> tts.ResultStream | None:
    """Start saying ``text`` with the preferred voice assistant's text-to-speech.

    Return None when it has none, or its engine refuses (logged at debug).
    """
    try:
        pipeline = async_get_pipeline(hass)
    except PipelineNotFound:
        return None
    if not pipeline.tts_engine:
        return None
    options: dict[str, Any] = {tts.ATTR_PREFERRED_FORMAT: "wav"}
    if pipeline.tts_voice:
        options[tts.ATTR_VOICE] = pipeline.tts_voice
    try:
        stream = tts.async_create_stream(
            hass, pipeline.tts_engine, pipeline.tts_language, options
        )
    except HomeAssistantError as err:
        LOGGER.debug("No text-to-speech for %r: %s", text, err)
        return None
    stream.async_set_message(text)
    return stream


async def play_audio(
    channel: VoiceChannel, pcm: AsyncIterator[bytes], *, not_before: float
) -> PacingStats:
    """Encode PCM (at the channel's rate) into Opus, send it in real time.

    Returns once the device has played it all; raises what the channel
    raises.
    """
    frame_ms = channel.frame_duration
    encoder = OpusEncoder(channel.sample_rate, frame_ms)
    frame_bytes = encoder.frame_samples * 2
    pacer = DownlinkPacer(
        channel.async_send_audio,
        frame_duration=frame_ms / 1000,
        lead=channel.lead_frames,
        not_before=not_before,
    )
    async for chunk in pcm:
        # A frame at a time as it is sent: an engine may hand over a whole
        # reply at once, and encoding it in one go would hold the event loop
        # (and the first frame) for tens of milliseconds.
        for start in range(0, len(chunk), frame_bytes):
            for packet in encoder.encode(chunk[start : start + frame_bytes]):
                await pacer.send(packet)
    for packet in encoder.flush():
        await pacer.send(packet)
    await pacer.drain()
    if LOGGER.isEnabledFor(logging.DEBUG):
        LOGGER.debug(
            "%s: played %d frames, lead at most %.0f ms",
            channel.name,
            pacer.stats.frames,
            pacer.stats.max_lead * 1000,
        )
    return pacer.stats
