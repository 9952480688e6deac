"""Voice in the demo: a pipeline with the demo engines, and devices that talk.

The devices are Assist satellites. The demo gives Home Assistant a pipeline
("XiaoZhi demo") made of the demo engines (``demo/voice_engines``) and Home
Assistant's own conversation agent, and makes it the preferred one, which the
satellites use unless their "Assistant" select says otherwise.

On the console, ``say N TEXT`` speaks TEXT into device N's microphone
(synthesized by espeak-ng, a tone without it) after its wake word, and
``say N FILE.wav [TEXT]`` plays a recording instead; the reply the device
plays is saved as a WAV under ``.demo/replies``.
"""

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
import io
from pathlib import Path
import shutil
from typing import Any

from simulator import SimulatedDevice
from simulator.voice import read_audio, tone, write_wav

from . import LANGUAGE, DemoError, say
from .client import HomeAssistantClient
from .media import DemoMedia

ENGINES = "xiaozhi_demo_voice"
PIPELINE_NAME = "XiaoZhi demo"
AGENT = "conversation.home_assistant"
ENGINE_DOMAINS = ("stt", "tts", "conversation")
WAKE_WORD = "你好小智"
REPLY_TIMEOUT = 60.0
ESPEAK_TIMEOUT = 30.0
AUDIO_FILES = (".wav", ".mp3", ".ogg", ".opus", ".flac", ".m4a")


def engine_entities(entities: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Return domain (``stt``, ``tts``, ``conversation``) -> demo engine's entity."""
    found = {}
    for entity in entities:
        entity_id = str(entity.get("entity_id", ""))
        domain = entity_id.partition(".")[0]
        if entity.get("platform") == ENGINES and domain in ENGINE_DOMAINS:
            found[domain] = entity_id
    return found


def pipeline_settings(
    stt: str,
    tts: str,
    *,
    name: str = PIPELINE_NAME,
    agent: str = AGENT,
    prefer_local_intents: bool = True,
) -> dict[str, Any]:
    """Return a pipeline as ``assist_pipeline/pipeline/create`` takes it.

    It uses the demo engines, and by default it is the demo's own pipeline,
    with Home Assistant's agent.
    """
    return {
        "name": name,
        "language": LANGUAGE,
        "conversation_engine": agent,
        "conversation_language": LANGUAGE,
        "stt_engine": stt,
        "stt_language": LANGUAGE,
        "tts_engine": tts,
        "tts_language": LANGUAGE,
        "tts_voice": None,
        "wake_word_entity": None,
        "wake_word_id": None,
        "prefer_local_intents": prefer_local_intents,
    }


def transcript_of(path: Path) -> str:
    """Return what a file named like ``what_time_is_it.wav`` says."""
    return " ".join(path.stem.replace("_", " ").replace("-", " ").split())


def read_recording(name: str) -> bytes:
    """Return a recording as the microphone's 16 kHz PCM (blocking)."""
    path = Path(name).expanduser()
    if not path.is_file():
        raise DemoError(f"No audio file {path}")
    try:
        return read_audio(path)
    except (OSError, ValueError) as err:  # PyAV's errors are both
        raise DemoError(f"Cannot read {path}: {err}") from err


@dataclass(frozen=True, slots=True)
class Reply:
    """What a device said back."""

    sentences: list[str]
    seconds: float
    path: Path | None


class DemoVoice:
    """The demo's pipeline, and conversations started from the console."""

    def __init__(self, client: HomeAssistantClient, replies: Path) -> None:
        """Talk to Home Assistant through ``client``; save replies in ``replies``."""
        self._client = client
        self._replies = replies
        self._espeak = shutil.which("espeak-ng")
        self.media = DemoMedia(client, replies)
        # Domain -> entity id of the demo engines, once the pipeline is made.
        self.engines: dict[str, str] = {}

    async def ensure_pipeline(self, timeout: float) -> None:
        """Create the demo pipeline once and make it the preferred one."""
        client = self._client
        async with asyncio.timeout(timeout):
            while True:  # the engines' entry is created as Home Assistant starts
                entities = await client.ws("config/entity_registry/list")
                if len(engines := engine_entities(entities)) == len(ENGINE_DOMAINS):
                    break
                await asyncio.sleep(0.5)
        self.engines = engines
        listing = await client.ws("assist_pipeline/pipeline/list")
        wanted = pipeline_settings(engines["stt"], engines["tts"])
        pipeline = next(
            (p for p in listing["pipelines"] if p.get("name") == PIPELINE_NAME), None
        )
        if pipeline is None:
            pipeline = await client.ws("assist_pipeline/pipeline/create", **wanted)
            say(f"Created the voice pipeline {PIPELINE_NAME!r} (demo engines)")
        if listing.get("preferred_pipeline") != pipeline["id"]:
            await client.ws(
                "assist_pipeline/pipeline/set_preferred", pipeline_id=pipeline["id"]
            )
            say(f"Made {PIPELINE_NAME!r} the preferred voice pipeline")
        if not self._espeak:
            say("espeak-ng is not installed: devices speak and answer in tones")

    async def speech_of(self, text: str) -> tuple[bytes, str]:
        """Return the microphone's audio and the transcript of a ``say``."""
        first, _, rest = text.partition(" ")
        if first.lower().endswith(AUDIO_FILES):
            pcm = await asyncio.to_thread(read_recording, first)
            return pcm, rest.strip() or transcript_of(Path(first))
        return await self.speech(text), text

    async def speech(self, text: str) -> bytes:
        """Return ``text`` spoken, as the microphone's 16 kHz PCM."""
        if self._espeak is None:
            return tone(300, 0.3 * max(1, len(text.split())))
        process = await asyncio.create_subprocess_exec(
            self._espeak,
            "--stdout",
            "-v",
            "en-us",
            text,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        async with asyncio.timeout(ESPEAK_TIMEOUT):
            audio, _ = await process.communicate()
        if process.returncode != 0 or not audio:
            raise DemoError(f"espeak-ng could not say {text!r}")
        return await asyncio.to_thread(read_audio, io.BytesIO(audio))

    async def converse(self, device: SimulatedDevice, number: int, text: str) -> Reply:
        """Wake ``device``, say ``text``; wait for the reply and save it.

        ``text`` may start with an audio file to play into the microphone
        instead; the rest (or the file's name) is what the stand-in
        speech-to-text returns.
        """
        speech, text = await self.speech_of(text)
        await self._client.request(
            "POST", f"/api/services/{ENGINES}/set_transcript", json_body={"text": text}
        )
        sentences = len(device.tts_sentences)
        closes = len(device.close_reasons)
        record = device.speaker.record
        played = len(record.played_pcm)
        finished = record.finished_at
        await device.wake(WAKE_WORD, speech)
        try:
            # Done when something came back (words, audio, or the end of the
            # conversation) and the device no longer speaks.
            await device.wait_for(
                lambda: (
                    (
                        len(device.tts_sentences) > sentences
                        or record.finished_at != finished
                        or len(device.close_reasons) > closes
                    )
                    and device.speaker.idle
                    and device.state.activity != "speaking"
                ),
                timeout=REPLY_TIMEOUT,
            )
        except TimeoutError:
            return Reply(device.tts_sentences[sentences:], 0.0, None)
        if len(record.played_pcm) == played:
            return Reply(device.tts_sentences[sentences:], 0.0, None)
        pcm = bytes(record.played_pcm[played:])
        rate = device.speaker.rate
        path = self._replies / (
            f"device-{number}-{datetime.now().strftime('%H%M%S')}.wav"  # noqa: DTZ005
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(write_wav, path, pcm, rate)
        return Reply(device.tts_sentences[sentences:], len(pcm) / 2 / rate, path)
