"""``play N FILE|URL`` in the demo: the device as a speaker.

A URL goes to the device's media player as it is; a local file is served to
Home Assistant from a small HTTP server on loopback. What the device played
is saved as a WAV under ``.demo/replies`` once it stops (a radio plays until
``stop-media N``).
"""

import asyncio
from datetime import datetime
from pathlib import Path
import secrets
from typing import Any

from aiohttp import web

from simulator import SimulatedDevice
from simulator.notify import NotifyPlayback
from simulator.voice import write_wav

from . import DemoError
from .client import HomeAssistantClient

PLAYED_RATE = 24000
DAY = 86400.0  # a radio may play all day


def media_player_of(entities: list[dict[str, Any]], mac: str) -> str:
    """Return the media player entity of the device ``mac``."""
    for entity in entities:
        if entity.get("platform") == "xiaozhi" and entity.get("unique_id") == (
            f"{mac}-media_player"
        ):
            return str(entity["entity_id"])
    raise DemoError(f"the device {mac} has no media player")


class FileServer:
    """Local files on one-time paths of a loopback HTTP server."""

    def __init__(self) -> None:
        """Serve nothing until asked."""
        self._files: dict[str, Path] = {}
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def url_of(self, path: Path) -> str:
        """Return a URL of ``path``, starting the server on first use."""
        if not await asyncio.to_thread(path.is_file):
            raise DemoError(f"no such file: {path}")
        if self._runner is None:
            app = web.Application()
            app.router.add_get("/{token}/{name}", self._get)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self._port = self._runner.addresses[0][1]
        token = secrets.token_urlsafe(12)
        self._files[token] = path
        return f"http://127.0.0.1:{self._port}/{token}/{path.name}"

    async def _get(self, request: web.Request) -> web.StreamResponse:
        path = self._files.get(request.match_info["token"])
        if path is None:
            raise web.HTTPNotFound
        return web.FileResponse(path)

    async def close(self) -> None:
        """Stop serving."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class DemoMedia:
    """Plays files and URLs on the demo's devices; saves what they played."""

    def __init__(self, client: HomeAssistantClient, replies: Path) -> None:
        """Call Home Assistant through ``client``; save into ``replies``."""
        self._client = client
        self._replies = replies
        self._files = FileServer()
        self._saving: set[asyncio.Task[None]] = set()
        self.saved: list[Path] = []

    async def play(self, device: SimulatedDevice, number: int, source: str) -> str:
        """Play ``source`` on the device; return what to print."""
        if not source:
            raise DemoError("play needs a file or URL: play 2 song.mp3")
        url = (
            source
            if source.startswith(("http://", "https://"))
            else await self._files.url_of(
                await asyncio.to_thread(Path(source).expanduser)
            )
        )
        entities = await self._client.ws("config/entity_registry/list")
        entity_id = media_player_of(entities, device.config.mac)
        before = len(device.notify_sounds)
        await self._client.request(
            "POST",
            "/api/services/media_player/play_media",
            json_body={
                "entity_id": entity_id,
                "media_content_id": url,
                "media_content_type": "music",
            },
        )
        if len(device.notify_sounds) == before:
            return f"{device.config.board} plays it in its conversation"
        record = device.notify_sounds[-1]
        task = asyncio.create_task(self._save(device, number, record))
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)
        return (
            f"{device.config.board} plays {source}; what it plays is saved "
            "when it ends (stop-media N stops it)"
        )

    async def stop(self, device: SimulatedDevice) -> str:
        """Stop what the device plays."""
        entities = await self._client.ws("config/entity_registry/list")
        await self._client.request(
            "POST",
            "/api/services/media_player/media_stop",
            json_body={"entity_id": media_player_of(entities, device.config.mac)},
        )
        return f"{device.config.board} stopped playing"

    async def _save(
        self, device: SimulatedDevice, number: int, record: NotifyPlayback
    ) -> None:
        await device.wait_for(lambda: record.finished_at is not None, timeout=DAY)
        if not record.pcm:
            print(f"{device.config.board} played nothing: {record.error}", flush=True)
            return
        path = self._replies / (
            f"device-{number}-played-{datetime.now().strftime('%H%M%S')}.wav"  # noqa: DTZ005
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(write_wav, path, bytes(record.pcm), PLAYED_RATE)
        self.saved.append(path)
        seconds = len(record.pcm) / 2 / PLAYED_RATE
        print(
            f"{device.config.board} played {seconds:.1f} s, saved to {path}",
            flush=True,
        )

    async def close(self) -> None:
        """Stop saving and serving."""
        for task in list(self._saving):
            task.cancel()
        await self._files.close()
