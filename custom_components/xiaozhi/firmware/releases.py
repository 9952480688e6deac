"""Where firmware comes from: a list of releases in GitHub's shape.

The source is an integration-wide setting (the firmware's own GitHub
releases by default, or a fork, or any URL answering the same JSON). It is
read with Home Assistant's shared client session when a device's entity
checks (every few hours, or when asked), at most every 15 minutes, and
kept; a failure is quiet (the latest version shows as
unknown) and logged once. Drafts are ignored, and prereleases unless the
user opted in; a release whose version is not plain numbers is ignored (the
firmware could not compare it).
"""

import asyncio
from dataclasses import dataclass
from datetime import timedelta
import json
from typing import Any, Final

import aiohttp
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from ..const import DOMAIN, LOGGER
from ..download import async_download, describe_failure
from ..protocol.ota_image import MAX_FIRMWARE_BYTES, version_key
from ..settings import server_settings_of

# However many devices ask (each entity checks every few hours, or when the
# user asks), the list is fetched at most this often.
FRESH_FOR: Final = timedelta(minutes=15)
LIST_TIMEOUT: Final = 30.0
DOWNLOAD_TIMEOUT: Final = 300.0
MAX_LIST_BYTES: Final = 4 * 1024 * 1024
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


def parse_releases(data: Any, *, prereleases: bool) -> list[Release]:
    """Return the usable releases of a list, newest first."""
    releases: list[Release] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict) or item.get("draft") is not False:
            continue
        prerelease = item.get("prerelease") is True
        tag = item.get("tag_name")
        if (prerelease and not prereleases) or not isinstance(tag, str):
            continue
        version = tag.removeprefix("v")
        if version_key(version) is None:
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
                title=title if isinstance(title, str) and title else tag,
                notes=notes[:MAX_NOTES] if isinstance(notes, str) else "",
                url=page if isinstance(page, str) else None,
                prerelease=prerelease,
                assets=assets,
            )
        )
    releases.sort(key=lambda release: version_key(release.version) or (), reverse=True)
    return releases


class ReleaseSource:
    """The release list, fetched now and then and kept.

    Where from, and whether prereleases count, are the server entry's
    settings, read at each fetch: a change applies at the next check.
    """

    def __init__(self, hass: HomeAssistant) -> None:
        """Fetch nothing yet."""
        self.hass = hass
        self.releases: list[Release] | None = None
        self._checked: tuple[float, str, bool] | None = None
        self._lock = asyncio.Lock()
        self._failed = False

    async def async_refresh(self, *, force: bool = False) -> list[Release] | None:
        """Return the releases, fetching them when due (or ``force``)."""
        settings = server_settings_of(self.hass)
        url, prereleases = settings.firmware_releases_url, settings.firmware_prereleases
        async with self._lock:
            now = self.hass.loop.time()
            checked = self._checked
            due = (
                force
                or checked is None
                or checked[1:] != (url, prereleases)
                or now - checked[0] >= FRESH_FOR.total_seconds()
            )
            if not due:
                return self.releases
            self._checked = (now, url, prereleases)
            try:
                data = await self._async_get_json(url)
            except (aiohttp.ClientError, TimeoutError, ValueError) as err:
                if not self._failed:
                    LOGGER.info("Firmware releases not read from %s: %s", url, err)
                self._failed = True
                return self.releases
            self._failed = False
            self.releases = parse_releases(data, prereleases=prereleases)
            return self.releases

    async def _async_get_json(self, url: str) -> Any:
        session = async_get_clientsession(self.hass)
        async with (
            asyncio.timeout(LIST_TIMEOUT),
            session.get(url, headers=LIST_HEADERS) as response,
        ):
            response.raise_for_status()
            body = await response.content.read(MAX_LIST_BYTES + 1)
            if len(body) > MAX_LIST_BYTES:
                raise ValueError("the release list is too large")
            return json.loads(body)

    def find(self, version: str) -> Release | None:
        """Return the release of ``version``, if it is known."""
        return next(
            (item for item in self.releases or [] if item.version == version), None
        )

    async def async_download(self, asset: Asset) -> bytes:
        """Return an asset's bytes; raise ``firmware_download_failed``."""
        if asset.size > MAX_FIRMWARE_BYTES:
            raise _download_failed(asset.name, f"{asset.size} bytes")
        return await async_fetch_firmware(self.hass, asset.url, asset.name)


async def async_fetch_firmware(
    hass: HomeAssistant, url: str, name: str | None = None
) -> bytes:
    """Return a firmware file's bytes (at most 32 MB); raise when it fails."""
    try:
        return await async_download(
            hass, url, limit=MAX_FIRMWARE_BYTES, timeout=DOWNLOAD_TIMEOUT
        )
    except (aiohttp.ClientError, TimeoutError) as err:
        shown, error = describe_failure(url, err)
        raise _download_failed(name or shown, error) from err


def _download_failed(asset: str, error: str) -> HomeAssistantError:
    return HomeAssistantError(
        translation_domain=DOMAIN,
        translation_key="firmware_download_failed",
        translation_placeholders={"asset": asset, "error": error},
    )
