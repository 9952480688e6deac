"""Where firmware comes from: a list of releases in GitHub's shape.

The source is an integration-wide setting (the firmware's own GitHub
releases by default, or a fork, or any URL answering the same JSON). One
coordinator reads it with Home Assistant's shared client session once Home
Assistant has started and every few hours after (an install asks again
when the list is older than 15 minutes), and every device's update entity
follows it. A failure keeps what was read before, and the entities say
why. Drafts are ignored, and prereleases unless the user opted in.

Versions are tags such as ``v2.6.0`` or ``v2.7.0-rc1``, ordered the way
Python packages are (``2.7.0-beta`` < ``2.7.0-beta.2`` < ``2.7.0-rc1`` <
``2.7.0``); a tag that is no version is ignored.
"""

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta
import json
from typing import Any, Final, override

import aiohttp
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.event import async_call_later
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator, UpdateFailed
from packaging.version import InvalidVersion, Version

from ..const import DOMAIN, LOGGER
from ..download import async_describe_failure, async_download, describe_failure
from ..protocol.ota_image import (
    MAX_FIRMWARE_BYTES,
    AppImage,
    app_from_merged,
    merged_binary,
)
from ..settings import server_settings_of

CHECK_INTERVAL: Final = timedelta(hours=6)
# However many installs ask, the list is fetched at most this often.
FRESH_FOR: Final = timedelta(minutes=15)
LIST_TIMEOUT: Final = 30.0
DOWNLOAD_TIMEOUT: Final = 300.0
MAX_LIST_BYTES: Final = 4 * 1024 * 1024
# A release image read for one box is kept this long for the others.
IMAGE_KEPT: Final = timedelta(minutes=10)
MAX_NOTES: Final = 20_000
LIST_HEADERS: Final = {"Accept": "application/vnd.github+json"}


@dataclass(frozen=True, slots=True)
class Asset:
    """A file of a release."""

    name: str
    size: int
    url: str


@dataclass(frozen=True, slots=True)
class Release:
    """A firmware release."""

    version: str
    title: str
    notes: str
    url: str | None
    prerelease: bool
    assets: dict[str, Asset]

    def asset_for(self, board: str, manufacturer: str | None) -> Asset | None:
        """Return the zip of a board (``v{version}_{name}.zip``), if any.

        Releases name a board ``{manufacturer}-{name}`` (since 2.2) or by
        its name alone (before).
        """
        names = []
        if manufacturer and not board.startswith(f"{manufacturer}-"):
            names.append(f"v{self.version}_{manufacturer}-{board}.zip")
        names.append(f"v{self.version}_{board}.zip")
        return next((self.assets[n] for n in names if n in self.assets), None)


def parse_version(version: str) -> Version | None:
    """Return a release or device version to compare, or None if it is none."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    return parsed if parsed.local is None and len(parsed.release) <= 4 else None


def newest_for(
    releases: list[Release], board: str, manufacturer: str | None
) -> Release | None:
    """Return the newest release that has a build for the board."""
    return next(
        (item for item in releases if item.asset_for(board, manufacturer)), None
    )


def parse_releases(data: Any, *, prereleases: bool) -> list[Release]:
    """Return the usable releases of a list, newest first."""
    releases: list[Release] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict) or item.get("draft") is not False:
            continue
        tag = item.get("tag_name")
        version = tag.removeprefix("v") if isinstance(tag, str) else ""
        if (parsed := parse_version(version)) is None:
            continue
        prerelease = item.get("prerelease") is True or parsed.is_prerelease
        if prerelease and not prereleases:
            continue
        assets = {}
        for asset in item.get("assets") or []:
            if not isinstance(asset, dict):
                continue
            name, size, url = (
                asset.get("name"),
                asset.get("size"),
                asset.get("browser_download_url"),
            )
            if (
                isinstance(name, str)
                and isinstance(size, int)
                and isinstance(url, str)
                and url.startswith(("https://", "http://"))
            ):
                assets[name] = Asset(name, size, url)
        title, notes, page = item.get("name"), item.get("body"), item.get("html_url")
        releases.append(
            Release(
                version=version,
                title=title if isinstance(title, str) and title else f"v{version}",
                notes=notes[:MAX_NOTES] if isinstance(notes, str) else "",
                url=page if isinstance(page, str) else None,
                prerelease=prerelease,
                assets=assets,
            )
        )
    releases.sort(key=lambda release: Version(release.version), reverse=True)
    return releases


async def async_read_release_list(hass: HomeAssistant, url: str) -> list[Any]:
    """Return the JSON list of releases at ``url``.

    Raises HomeAssistantError (``releases_unavailable``) saying what went
    wrong: the address, or an answer that is no release list.
    """
    try:
        return await _async_get_list(hass, url)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        shown, error = (
            describe_failure(url, err)  # it answered, with no list
            if isinstance(err, ValueError)
            else await async_describe_failure(hass, url, err)
        )
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="releases_unavailable",
            translation_placeholders={"url": shown, "error": error},
        ) from err


async def _async_get_list(hass: HomeAssistant, url: str) -> list[Any]:
    session = async_get_clientsession(hass)
    async with (
        asyncio.timeout(LIST_TIMEOUT),
        session.get(url, headers=LIST_HEADERS) as response,
    ):
        response.raise_for_status()
        body = await response.content.read(MAX_LIST_BYTES + 1)
    if len(body) > MAX_LIST_BYTES:
        raise ValueError("the release list is too large")
    data = json.loads(body)
    if not isinstance(data, list):
        raise ValueError("the answer is not a list of releases")  # noqa: TRY004
    return data


class ReleaseCoordinator(DataUpdateCoordinator[list[Release] | None]):
    """The release list of the whole integration, read every few hours.

    Where from, and whether prereleases count, are the server entry's
    settings, read at each fetch: a change applies at the next check (the
    server entry asks for one when they change). A failure keeps the list
    read before and says why (``last_exception``); it is logged once.
    """

    def __init__(self, hass: HomeAssistant) -> None:
        """Fetch nothing yet (the first check runs once Home Assistant started)."""
        super().__init__(
            hass,
            LOGGER,
            config_entry=None,
            name="XiaoZhi firmware releases",
            update_interval=CHECK_INTERVAL,
            always_update=False,
        )
        self._checked: tuple[float, str, bool] | None = None
        # Release images read lately, or being read, by asset URL.
        self._images: dict[str, asyncio.Task[AppImage]] = {}
        self._expiries: dict[str, CALLBACK_TYPE] = {}

    @override
    async def _async_update_data(self) -> list[Release] | None:
        settings = server_settings_of(self.hass)
        url, prereleases = settings.firmware_releases_url, settings.firmware_prereleases
        self._checked = (self.hass.loop.time(), url, prereleases)
        try:
            data = await async_read_release_list(self.hass, url)
        except HomeAssistantError as err:
            raise UpdateFailed(
                translation_domain=DOMAIN,
                translation_key="releases_unavailable",
                translation_placeholders=err.translation_placeholders,
            ) from err
        return parse_releases(data, prereleases=prereleases)

    async def async_fresh(self) -> list[Release]:
        """Return the releases, read again unless they were read just now.

        However many installs ask, the list is fetched at most every 15
        minutes for the same settings.
        """
        settings = server_settings_of(self.hass)
        checked = self._checked
        if (
            checked is None
            or checked[1:]
            != (settings.firmware_releases_url, settings.firmware_prereleases)
            or self.hass.loop.time() - checked[0] >= FRESH_FOR.total_seconds()
        ):
            await self.async_refresh()
        return self.data or []

    def find(self, version: str) -> Release | None:
        """Return the release of ``version``, if it is known."""
        return next((item for item in self.data or [] if item.version == version), None)

    async def async_image(self, asset: Asset) -> AppImage:
        """Return the application image of a release's asset.

        Raises ``firmware_download_failed``, or FirmwareRefusedError when the
        zip holds no image. Boxes of one board updating together share one
        download and one unzip (in the executor), kept for
        :data:`IMAGE_KEPT` once read; a failure is not kept.
        """
        if asset.size > MAX_FIRMWARE_BYTES:
            raise _download_failed(asset.name, f"{asset.size} bytes")
        reading = self._images.get(asset.url)
        if reading is None:
            reading = self._images[asset.url] = self.hass.async_create_background_task(
                self._async_read_image(asset), f"xiaozhi firmware {asset.name}"
            )
            reading.add_done_callback(lambda done: self._keep(asset.url, done))
        return await asyncio.shield(reading)

    async def _async_read_image(self, asset: Asset) -> AppImage:
        archive = await async_fetch_firmware(self.hass, asset.url, asset.name)
        return await self.hass.async_add_executor_job(release_image, archive)

    def _keep(self, url: str, done: asyncio.Task[AppImage]) -> None:
        """Keep a read image a while; forget a failure at once."""
        if done.cancelled() or done.exception() is not None:
            self._images.pop(url, None)
            return

        @callback
        def forget(_now: datetime) -> None:
            self._expiries.pop(url, None)
            if self._images.get(url) is done:
                del self._images[url]

        self._expiries[url] = async_call_later(self.hass, IMAGE_KEPT, forget)

    @override
    async def async_shutdown(self) -> None:
        """Stop checking, and let go of the images kept."""
        await super().async_shutdown()
        for cancel in self._expiries.values():
            cancel()
        self._expiries.clear()
        self._images.clear()


def release_image(archive: bytes) -> AppImage:
    """Return the application image of a release zip (CPU-bound: unzipping)."""
    return app_from_merged(merged_binary(archive))


async def async_fetch_firmware(
    hass: HomeAssistant, url: str, name: str | None = None
) -> bytes:
    """Return a firmware file's bytes (at most 32 MB); raise when it fails."""
    try:
        return await async_download(
            hass, url, limit=MAX_FIRMWARE_BYTES, timeout=DOWNLOAD_TIMEOUT
        )
    except (aiohttp.ClientError, TimeoutError) as err:
        shown, error = await async_describe_failure(hass, url, err)
        raise _download_failed(name or shown, error) from err


def _download_failed(asset: str, error: str) -> HomeAssistantError:
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key="firmware_download_failed",
        translation_placeholders={"asset": asset, "error": error},
    )
