"""A firmware release source on 127.0.0.1: a release list and one release zip.

The list has GitHub's shape (what the integration's release source reads);
the zip is what a xiaozhi release holds for a board, built with
``simulator/firmware_image.py``.
"""

from typing import Any, Final

from aiohttp import web

from simulator.firmware_image import app_image, merged_binary, release_zip

from .. import HOST

RELEASE_VERSION: Final = "2.9.0"
LIST_PATH: Final = "/repos/xiaozhi/firmware/releases"


def asset_name(version: str, board: str) -> str:
    """Return a release zip's name (``v{version}_{board}.zip``)."""
    return f"v{version}_{board}.zip"


def release_list(
    base: str, version: str, board: str, size: int
) -> list[dict[str, Any]]:
    """Return the release list: one release with one board's zip."""
    name = asset_name(version, board)
    return [
        {
            "tag_name": f"v{version}",
            "name": f"XiaoZhi {version}",
            "body": "Built for the smoke run.",
            "html_url": f"{base}/releases/v{version}",
            "draft": False,
            "prerelease": False,
            "assets": [
                {
                    "name": name,
                    "size": size,
                    "browser_download_url": f"{base}/download/{name}",
                }
            ],
        }
    ]


class ReleaseServer:
    """Serves the list and the zip; counts how often the list was read."""

    def __init__(self, board: str, chip: str, version: str = RELEASE_VERSION) -> None:
        """Build the release zip of ``board``; nothing listens before start()."""
        self.version = version
        self.board = board
        self.zip = release_zip(merged_binary(app_image(version=version, chip=chip)))
        self.list_reads = 0
        self.downloads = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        """Listen on a free port of 127.0.0.1."""
        app = web.Application()
        app.router.add_get(LIST_PATH, self._list)
        app.router.add_get("/download/{name}", self._download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{HOST}:{port}"

    @property
    def list_url(self) -> str:
        """Return the release list's URL (the server entry's setting)."""
        return self.url + LIST_PATH

    async def _list(self, _request: web.Request) -> web.Response:
        self.list_reads += 1
        return web.json_response(
            release_list(self.url, self.version, self.board, len(self.zip))
        )

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["name"] != asset_name(self.version, self.board):
            raise web.HTTPNotFound
        self.downloads += 1
        return web.Response(body=self.zip, content_type="application/zip")

    async def stop(self) -> None:
        """Stop listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
