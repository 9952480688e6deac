"""The HTTP client a device uses, and URL helpers.

A device talks through any object with ``ws_connect``, ``post`` and ``get``
methods shaped like :class:`aiohttp.ClientSession`'s. Tests that reach a
server through :class:`aiohttp.test_utils.TestClient` (which only accepts
relative paths) pass it together with :func:`relative_url` as URL rewriter.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from aiohttp import ClientResponse, ClientWebSocketResponse
from yarl import URL

type UrlRewriter = Callable[[str], str]


class HttpClient(Protocol):
    """The subset of aiohttp.ClientSession / TestClient the device uses."""

    def ws_connect(self, url: str, **kwargs: Any) -> Awaitable[ClientWebSocketResponse]:
        """Open a WebSocket."""
        ...  # pragma: no cover

    def post(self, url: str, **kwargs: Any) -> Awaitable[ClientResponse]:
        """Send a POST request."""
        ...  # pragma: no cover

    def get(self, url: str, **kwargs: Any) -> Awaitable[ClientResponse]:
        """Send a GET request."""
        ...  # pragma: no cover


def relative_url(url: str) -> str:
    """Strip scheme and host from a URL, keeping path and query.

    >>> relative_url("ws://127.0.0.1:8123/api/xiaozhi/v1/?a=1")
    '/api/xiaozhi/v1/?a=1'
    """
    parsed = URL(url)
    if not parsed.absolute:
        return url
    relative = str(parsed.relative())
    return relative or "/"


def mask_token(token: str | None) -> str:
    """Return a loggable form of a secret."""
    if not token:
        return "<none>"
    if len(token) <= 8:
        return "***"
    return token[:4] + "***"


def redact_url(url: str | None) -> str:
    """Return a loggable URL: query values (which may hold tokens) hidden."""
    if not url:
        return "<none>"
    parsed = URL(url)
    if not parsed.query_string:
        return url
    return str(parsed.with_query(None)) + "?***"


def multipart_parts(
    boundary: str,
    *,
    fields: list[tuple[str, str]],
    file_field: str,
    filename: str,
    content_type: str,
    data: bytes,
) -> list[bytes]:
    """Return the chunks of a multipart/form-data body as the firmware writes it.

    Text fields come first, then the file part, then the closing boundary.
    Values are inserted unescaped.
    """
    chunks: list[bytes] = [
        (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{name}"\r\n'
            "\r\n"
            f"{value}\r\n"
        ).encode()
        for name, value in fields
    ]
    chunks.append(
        (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{file_field}"; '
            f'filename="{filename}"\r\n'
            f"Content-Type: {content_type}\r\n"
            "\r\n"
        ).encode()
    )
    chunks.append(data)
    chunks.append(f"\r\n--{boundary}--\r\n".encode())
    return chunks


async def chunked(chunks: list[bytes]) -> AsyncIterator[bytes]:
    """Yield body chunks so aiohttp sends them with chunked encoding."""
    for chunk in chunks:
        yield chunk
