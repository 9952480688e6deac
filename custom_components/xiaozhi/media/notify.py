"""Sound for an idle device: an Ogg Opus stream it fetches once (``notify``).

Firmware with the ``notify`` player, told a URL while Idle, plays its popup
cue, GETs the URL once and plays the mono Ogg Opus stream as it reads it,
through a queue of 20 packets; TCP back-pressure alone would let the
server's buffers hold many seconds. So the stream is written about a second
ahead of playback: stopping it (ending the response without the Ogg
end-of-stream page, which makes the device drop what it holds) silences the
device within a second, and the stream is known to be over when the device
has played it. Nothing in the protocol says whether a device has the player:
it is learnt from whether it fetched the URL.
"""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
import contextlib
from http import HTTPStatus
from typing import Final

from aiohttp import web
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..entry_data import XiaozhiEntryData
from ..errors import translated_error
from ..protocol import MediaSourceError
from ..protocol.audio.ogg import Chunk
from ..protocol.audio.pacing import DownlinkPacer
from ..speaker.channel import VoiceChannel

# The firmware fetches at once when idle; its HTTP client gives up on a read
# after 5 s, so the first audio must be ready well before that.
NOTIFY_FETCH_TIMEOUT: Final = 5.0
FIRST_AUDIO_TIMEOUT: Final = 4.0
NOTIFY_RETRY: Final = 1.0
# The device plays its popup cue (0.48 s) before the sound.
NOTIFY_CUE: Final = 0.48
# Written ahead of the device's playback, in frames of 60 ms (about 1 s).
NOTIFY_LEAD_FRAMES: Final = 16
FRAME_SECONDS: Final = 0.06

type OpenChunks = Callable[
    [], Awaitable[tuple[AsyncIterator[Chunk], Callable[[], Awaitable[None]]]]
]


class NotifyStream:
    """One sound, streamed once to the device that fetches it."""

    def __init__(self, name: str, open_chunks: OpenChunks) -> None:
        """Serve what ``open_chunks`` makes once the device asks for it.

        ``open_chunks`` starts the source when the device fetches (so a
        sound is fetched only by way of the device) and returns its chunks
        and a closer.
        """
        self.name = name
        self._open = open_chunks
        self.fetched = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.started: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()
        self._request: web.Request | None = None
        self._stopped = False
        self.notified_at: float | None = None  # when the device was told
        self.sent = 0.0  # seconds of audio written

    @property
    def stopping(self) -> bool:
        """Return True once the stream was stopped."""
        return self._stopped

    def stop(self) -> None:
        """End the stream mid-way: the device drops what it holds.

        The connection is cut, not ended: a stream that ends cleanly plays
        out from the device's queue.
        """
        self._stopped = True
        if (request := self._request) is not None and request.transport is not None:
            request.transport.abort()
        self._settle(self.started, None)
        self._settle(self.finished, None)

    async def respond(self, request: web.Request) -> web.StreamResponse:
        """Stream the sound to the device that fetched its URL."""
        self.fetched.set()
        response: web.StreamResponse | None = None
        close: Callable[[], Awaitable[None]] | None = None
        try:
            if self._stopped:
                return web.Response(status=HTTPStatus.GONE)
            chunks, close = await self._open()
            first = await async_first_chunk(chunks, self.name)
            if self.stopping:  # while the source opened
                return web.Response(status=HTTPStatus.GONE)
            response = web.StreamResponse(
                headers={"Content-Type": "audio/ogg", "Cache-Control": "no-store"}
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
            self._request = request
            self._settle(self.started, None)
            await self._stream(response, first, chunks)
        except HomeAssistantError as err:
            self._settle(self.started, err)
            return web.Response(status=HTTPStatus.BAD_GATEWAY)
        finally:
            self._request = None
            if close is not None:
                await close()
            self._settle(self.started, None)
            self._settle(self.finished, None)
        return response

    async def _stream(
        self, response: web.StreamResponse, first: Chunk, chunks: AsyncIterator[Chunk]
    ) -> None:
        async def write(data: bytes, _timestamp: int) -> None:
            await response.write(data)

        pacer = DownlinkPacer(
            write, frame_duration=FRAME_SECONDS, lead=NOTIFY_LEAD_FRAMES
        )
        if self.notified_at is not None:
            # Its audio plays after the cue, however soon it arrives.
            pacer.playback_end = max(pacer.playback_end, self.notified_at + NOTIFY_CUE)
        try:
            await pacer.send(first.data, first.duration)
            self.sent += first.duration
            async for chunk in chunks:
                if self.stopping:
                    return
                await pacer.send(chunk.data, chunk.duration)
                self.sent += chunk.duration
            await response.write_eof()
        except MediaSourceError as err:
            # The source broke off: the stream ends where it is, and the
            # device plays what it holds.
            LOGGER.warning("%s: the sound broke off: %s", self.name, err)
            return
        except ConnectionError:
            if self._stopped:
                LOGGER.debug("%s: sound stopped after %.1f s", self.name, self.sent)
            else:
                # The device closed it: a wake word, its button, or a failure.
                LOGGER.debug("%s closed the sound after %.1f s", self.name, self.sent)
            return
        await pacer.drain()

    @staticmethod
    def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


async def async_first_chunk(chunks: AsyncIterator[Chunk], name: str) -> Chunk:
    """Return a source's first audio; raise ``play_failed`` when none comes.

    None comes when the source is not audio, is empty, or is too slow for
    the device (which gives up on a read after 5 s).
    """
    try:
        async with asyncio.timeout(FIRST_AUDIO_TIMEOUT):
            return await anext(chunks)
    except (StopAsyncIteration, TimeoutError, MediaSourceError) as err:
        reason = str(err) if isinstance(err, MediaSourceError) else "no audio in time"
        raise translated_error("play_failed", name, error=reason) from err


async def async_notify(
    channel: VoiceChannel,
    device: XiaozhiEntryData,
    stream: NotifyStream,
    text: str,
) -> bool:
    """Have the idle device fetch ``stream``; True once it started playing.

    False when the device did not fetch it within a few seconds: firmware
    without the player (learnt, on a device not known yet), a device that
    was busy, or a link without URLs. Raises HomeAssistantError when the
    sound itself failed.
    """
    if channel.urls is None:
        return False
    url, revoke = channel.urls.mint_sound_url(stream)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(NOTIFY_FETCH_TIMEOUT):
            # A device still letting go of a sound just stopped ignores a
            # notify; it is told again until it fetches.
            while not stream.fetched.is_set() and channel.idle_reachable:
                stream.notified_at = loop.time()
                await channel.async_notify(url, text)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(NOTIFY_RETRY):
                        await stream.fetched.wait()
    except TimeoutError:
        pass
    finally:
        revoke()
    if not stream.fetched.is_set():
        stream.stop()
        # A device that started a conversation meanwhile says nothing.
        if device.plays_notify is None and channel.idle_reachable:
            device.async_learn_notify(False)
            LOGGER.info(
                "%s did not fetch its sound: its firmware (%s) plays sounds only "
                "in a conversation",
                channel.name,
                device.firmware or "unknown",
            )
        return False
    if device.plays_notify is not True:
        device.async_learn_notify(True)
    await asyncio.shield(stream.started)
    return True
