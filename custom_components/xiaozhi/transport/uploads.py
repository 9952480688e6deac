"""What devices upload and fetch over HTTP: photos, screen pictures, sounds.

The camera posts to the vision URL with the session's vision token. Screen
pictures and sounds use one-time URLs that the views below mint: each works
once, and a wrong or used one counts as a failed login of its address.
"""

from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
import io
import secrets
import socket
from typing import Final

from aiohttp import BodyPartReader, web
from aiohttp.http import HttpProcessingError
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from PIL import Image

from ..const import (
    LOGGER,
    MAX_OTA_BODY,
    MAX_PHOTO_BYTES,
    URL_CLIP,
    URL_FIRMWARE,
    URL_SNAPSHOT,
    URL_VISION,
)
from ..pairing.identity import client_matches, loaded_runtime
from ..pairing.manager import same_secret
from ..protocol.http import bearer_token, client_id, device_mac, error_response
from ..runtime import XiaozhiRuntime
from ..speaker.channel import Sound
from .logins import FailedLogins

JPEG_MAGIC: Final = b"\xff\xd8\xff"
FIRMWARE_CHUNK: Final = 16 * 1024
FIRMWARE_SEND_BUFFER: Final = 64 * 1024
# Far more than any device camera or screen (a 1080p frame is 2 Mpx).
MAX_PHOTO_PIXELS: Final = 16_000_000
VISION_ANSWER: Final = "Photo received by Home Assistant."


class OneTimeTokens[T]:
    """Secrets that each unlock one value once (the views' one-time URLs)."""

    def __init__(self) -> None:
        """Start with none handed out."""
        self._values: dict[str, T] = {}

    def add(self, value: T) -> tuple[str, CALLBACK_TYPE]:
        """Return a new token for ``value`` and the callback revoking it."""
        token = secrets.token_urlsafe(24)
        self._values[token] = value

        @callback
        def revoke() -> None:
            self._values.pop(token, None)

        return token, revoke

    def take(self, token: str) -> T | None:
        """Return the token's value and forget it; None if unknown or used."""
        return self._values.pop(token, None)


class VisionView(HomeAssistantView):
    """Photos from the device camera, authorised by the session's vision token."""

    url = URL_VISION
    name = "api:xiaozhi:vision"
    requires_auth = False

    def __init__(self, logins: FailedLogins) -> None:
        """Count wrong tokens in ``logins``."""
        self._logins = logins

    async def post(self, request: web.Request) -> web.Response:
        """Store the uploaded photo for the device's image entity."""
        hass = request.app[KEY_HASS]
        if self._logins.blocked(request.remote):
            return error_response(HTTPStatus.FORBIDDEN, "Too many wrong credentials")
        runtime = loaded_runtime(hass, device_mac(request))
        session = runtime.session if runtime is not None else None
        if (
            runtime is None
            or session is None
            or not same_secret(session.vision_token, bearer_token(request))
            or not client_matches(runtime.entry, client_id(request))
        ):
            self._logins.failed(request.remote, "vision upload")
            return error_response(HTTPStatus.UNAUTHORIZED, "Invalid vision token")
        if (
            request.content_length is not None
            and request.content_length > MAX_PHOTO_BYTES + MAX_OTA_BODY
        ):
            return error_response(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Photo too large"
            )
        upload = await _receive_picture(request, runtime, "photo")
        if isinstance(upload, web.Response):
            return upload
        question, photo = upload
        runtime.entry_data.async_set_picture("photo", photo, "image/jpeg", question)
        return web.Response(text=VISION_ANSWER)


class SnapshotView(HomeAssistantView):
    """Screen pictures, uploaded to one-time URLs this view mints."""

    url = URL_SNAPSHOT + "/{token}"
    name = "api:xiaozhi:snapshot"
    requires_auth = False

    def __init__(self, logins: FailedLogins) -> None:
        """Start with no URL handed out; count wrong ones in ``logins``."""
        self._logins = logins
        self._tokens = OneTimeTokens[str]()

    def mint(self, base: str, mac: str) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time upload URL for ``mac`` and the callback revoking it."""
        token, revoke = self._tokens.add(mac)
        return f"{base}{URL_SNAPSHOT}/{token}", revoke

    async def post(self, request: web.Request, token: str) -> web.Response:
        """Store the uploaded screen picture."""
        hass = request.app[KEY_HASS]
        if self._logins.blocked(request.remote):
            return error_response(HTTPStatus.FORBIDDEN, "Too many wrong credentials")
        runtime = loaded_runtime(hass, self._tokens.take(token))
        if runtime is None:
            self._logins.failed(request.remote, "snapshot URL")
            return error_response(
                HTTPStatus.UNAUTHORIZED, "Invalid or used snapshot URL"
            )
        upload = await _receive_picture(request, runtime, "screen picture")
        if isinstance(upload, web.Response):
            return upload
        _question, picture = upload
        runtime.entry_data.async_set_picture("screen", picture, "image/jpeg")
        return web.Response(text="ok")


def take_one_time[T](
    request: web.Request,
    tokens: OneTimeTokens[T],
    token: str,
    logins: FailedLogins,
    what: str,
) -> T | web.Response:
    """Return what a one-time URL unlocks, or the response refusing it.

    A blocked address is refused first; an unknown or used URL counts as a
    failed login of its address.
    """
    if logins.blocked(request.remote):
        return error_response(HTTPStatus.FORBIDDEN, "Too many wrong credentials")
    value = tokens.take(token)
    if value is None:
        logins.failed(request.remote, f"{what} URL")
        return error_response(HTTPStatus.NOT_FOUND, f"Unknown or used {what} URL")
    return value


class ClipView(HomeAssistantView):
    """Sounds for the device to fetch (``notify``), at one-time URLs."""

    url = URL_CLIP + "/{token}"
    name = "api:xiaozhi:clip"
    requires_auth = False

    def __init__(self, logins: FailedLogins) -> None:
        """Start with nothing to serve; count wrong URLs in ``logins``."""
        self._logins = logins
        self._sounds = OneTimeTokens[Sound]()

    def mint(self, base: str, sound: Sound) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of ``sound`` and its revoker."""
        token, revoke = self._sounds.add(sound)
        return f"{base}{URL_CLIP}/{token}.ogg", revoke

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """Stream the sound to the device, once."""
        sound = take_one_time(
            request, self._sounds, token.removesuffix(".ogg"), self._logins, "sound"
        )
        if isinstance(sound, web.Response):
            return sound
        return await sound.respond(request)


class FirmwareView(HomeAssistantView):
    """Firmware images for a device to fetch, at one-time URLs.

    The firmware's OTA needs status 200 and a ``Content-Length``; what it
    has fetched is the install's progress, and a download that ends before
    the last byte is reported as broken.
    """

    url = URL_FIRMWARE + "/{token}"
    name = "api:xiaozhi:firmware"
    requires_auth = False

    def __init__(self, logins: FailedLogins) -> None:
        """Start with nothing to serve; count wrong URLs in ``logins``."""
        self._logins = logins
        self._images = OneTimeTokens[_Image]()

    def mint(
        self,
        base: str,
        image: bytes,
        progress: Callable[[int], None],
        broke: Callable[[], None],
    ) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of ``image`` and its revoker.

        ``progress`` is called with the bytes sent so far, ``broke`` when the
        transfer ends before the last byte.
        """
        token, revoke = self._images.add(_Image(image, progress, broke))
        return f"{base}{URL_FIRMWARE}/{token}.bin", revoke

    async def get(self, request: web.Request, token: str) -> web.StreamResponse:
        """Send the image, once, with its length."""
        served = take_one_time(
            request, self._images, token.removesuffix(".bin"), self._logins, "firmware"
        )
        if isinstance(served, web.Response):
            return served
        image = served.data
        response = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream"}
        )
        response.content_length = len(image)
        if request.transport is not None and (
            sock := request.transport.get_extra_info("socket")
        ):
            # What is sent is then what the device has read, give or take a
            # buffer: the progress, and a download it broke off, are seen.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, FIRMWARE_SEND_BUFFER)
        sent = 0
        try:
            await response.prepare(request)
            for start in range(0, len(image), FIRMWARE_CHUNK):
                await response.write(image[start : start + FIRMWARE_CHUNK])
                sent = min(start + FIRMWARE_CHUNK, len(image))
                served.progress(sent)
            await response.write_eof()
        finally:
            if sent < len(image):
                served.broke()
        return response


@dataclass(frozen=True, slots=True)
class _Image:
    """A firmware image served once, and who follows its download."""

    data: bytes
    progress: Callable[[int], None]
    broke: Callable[[], None]


@dataclass(frozen=True, slots=True)
class UploadViews:
    """The views devices upload to and fetch from (registered once)."""

    vision: VisionView
    snapshots: SnapshotView
    clips: ClipView
    firmware: FirmwareView

    @classmethod
    def register(cls, hass: HomeAssistant, logins: FailedLogins) -> UploadViews:
        """Register the views (once per instance: routes stay)."""
        views = cls(
            VisionView(logins),
            SnapshotView(logins),
            ClipView(logins),
            FirmwareView(logins),
        )
        for view in (views.vision, views.snapshots, views.clips, views.firmware):
            hass.http.register_view(view)
        return views

    def for_device(self, base: str, mac: str) -> DeviceUploads:
        """Return the URLs of one device, on the address it reached us with."""
        return DeviceUploads(base, self, mac)


class DeviceUploads:
    """Upload and sound URLs for one device, on the address it reached us with."""

    def __init__(self, base: str, views: UploadViews, mac: str) -> None:
        """Remember where uploads go."""
        self.vision_url = base + URL_VISION
        self._base = base
        self._views = views
        self._mac = mac

    def mint_snapshot_url(self) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time screen picture URL and the callback revoking it."""
        return self._views.snapshots.mint(self._base, self._mac)

    def mint_sound_url(self, sound: Sound) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL streaming ``sound`` to the device."""
        return self._views.clips.mint(self._base, sound)

    def mint_firmware_url(
        self, image: bytes, progress: Callable[[int], None], broke: Callable[[], None]
    ) -> tuple[str, CALLBACK_TYPE]:
        """Return a one-time URL of a firmware image, reporting bytes sent."""
        return self._views.firmware.mint(self._base, image, progress, broke)


async def _receive_picture(
    request: web.Request, runtime: XiaozhiRuntime, what: str
) -> tuple[str, bytes] | web.Response:
    """Return the question and JPEG of an upload, or the error response."""
    try:
        question, photo = await _read_photo(request)
        await request.app[KEY_HASS].async_add_executor_job(_check_jpeg, photo)
    except (ValueError, TypeError) as err:
        LOGGER.warning("%s sent an unusable %s: %s", runtime.name, what, err)
        return error_response(HTTPStatus.BAD_REQUEST, str(err))
    except _TooLargeError:
        return error_response(
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"The {what} is too large"
        )

    return question, photo


def _check_jpeg(photo: bytes) -> None:
    """Raise ValueError unless ``photo`` decodes as a JPEG of a sane size.

    Only a picture is ever served back as ``image/jpeg``: a body that only
    starts like a JPEG is refused. (Bytes after a whole picture's end are
    ignored by decoders, and served with ``nosniff``.)
    """
    try:
        with Image.open(io.BytesIO(photo), formats=["JPEG"]) as image:
            width, height = image.size
            if width * height > MAX_PHOTO_PIXELS:
                raise ValueError(f"picture of {width}x{height} is too large")
            image.load()
    except (OSError, SyntaxError, Image.DecompressionBombError) as err:
        raise ValueError(f"file is not a JPEG picture: {err}") from None


class _TooLargeError(Exception):
    """A part of the upload is over its limit."""


async def _read_photo(request: web.Request) -> tuple[str, bytes]:
    """Read the ``question`` and ``file`` parts of a vision upload."""
    if not request.content_type.startswith("multipart/"):
        raise ValueError("expected multipart/form-data")
    reader = await request.multipart()
    question = ""
    photo: bytes | None = None
    try:
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise TypeError("nested multipart is not supported")
            if part.name == "question":
                raw = await _read_part(part, MAX_OTA_BODY)
                question = raw.decode("utf-8", "replace")
            elif part.name == "file":
                photo = await _read_part(part, MAX_PHOTO_BYTES)
            else:
                await part.release()
    except HttpProcessingError as err:
        # The multipart parser's own errors: a part header over its limit,
        # a body cut short...
        raise ValueError(f"malformed multipart body: {err.message}") from None
    if photo is None:
        raise ValueError("no file part")
    if not photo.startswith(JPEG_MAGIC):
        raise ValueError("file is not a JPEG")
    return question, photo


async def _read_part(part: BodyPartReader, limit: int) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk():
        data += chunk
        if len(data) > limit:
            raise _TooLargeError
    return bytes(data)
