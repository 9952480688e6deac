"""Home Assistant's REST and WebSocket APIs, and reading what they answer."""

import asyncio
from collections.abc import Iterable, Mapping, Sequence
import json
from typing import Any

import aiohttp

from . import DOMAIN, ONBOARDING_STEPS, DemoError, base_url


def onboarding_done_steps(status: Any) -> set[str]:
    """Return the finished steps of an ``/api/onboarding`` answer.

    Once onboarding is complete Home Assistant no longer serves that address
    (404, an error object or text rather than a list): every step is done.
    """
    if not isinstance(status, list):
        if isinstance(status, dict | str) or status is None:
            return set(ONBOARDING_STEPS)
        raise DemoError(f"Unexpected onboarding status: {status!r}")
    return {
        item["step"]
        for item in status
        if isinstance(item, dict) and item.get("done") and "step" in item
    }


def find_pairing_flow(flows: Iterable[Mapping[str, Any]], mac: str) -> str | None:
    """Return the id of the pairing flow of the device with this MAC, if any."""
    mac = mac.lower()
    for flow in flows:
        context = flow.get("context") or {}
        if (
            flow.get("handler") == DOMAIN
            and str(context.get("unique_id", "")).lower() == mac
            and flow.get("step_id", "pair") == "pair"
        ):
            return str(flow["flow_id"])
    return None


def connected_entity(
    entities: Iterable[Mapping[str, Any]], mac: str
) -> Mapping[str, Any] | None:
    """Return the registry entry of a device's "connected" binary sensor."""
    unique_id = f"{mac.lower()}-connected"
    for entity in entities:
        if (
            entity.get("platform") == DOMAIN
            and entity.get("unique_id") == unique_id
            and str(entity.get("entity_id", "")).startswith("binary_sensor.")
        ):
            return entity
    return None


def area_key(name: str) -> str:
    """Return an area name as Home Assistant compares them (case, spaces)."""
    return name.casefold().replace(" ", "")


def find_area(areas: Iterable[Mapping[str, Any]], name: str) -> str | None:
    """Return the id of the area called ``name`` (``Living Room`` too), if any."""
    key = area_key(name)
    for area in areas:
        if area_key(str(area.get("name", ""))) == key:
            return str(area["area_id"])
    return None


def device_entry(
    devices: Iterable[Mapping[str, Any]], mac: str
) -> Mapping[str, Any] | None:
    """Return the device registry entry of the device with this MAC."""
    identifier = [DOMAIN, mac.lower()]
    for device in devices:
        if identifier in (list(pair) for pair in device.get("identifiers", [])):
            return device
    return None


def entry_titles(entries: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Return entry id -> title of config entries."""
    return {
        str(entry["entry_id"]): str(entry.get("title", ""))
        for entry in entries
        if "entry_id" in entry
    }


class HomeAssistantClient:
    """The REST and WebSocket APIs of the Home Assistant the demo runs."""

    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        """Talk to 127.0.0.1:<port>."""
        self._session = session
        self.url = base_url(port)
        self.client_id = f"{self.url}/"
        self.redirect_uri = f"{self.url}/?auth_callback=1"
        self.token: str | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ws_id = 0
        self._ws_lock = asyncio.Lock()

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        ok: Sequence[int] = (200,),
    ) -> Any:
        """Send a request and return the JSON answer; DemoError otherwise."""
        headers = {}
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        async with self._session.request(
            method,
            self.url + path,
            headers=headers,
            json=json_body,
            data=form,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as response:
            text = await response.text()
            if response.status not in ok:
                raise DemoError(
                    f"{method} {path} answered {response.status}: {text[:300]}"
                )
            try:
                return json.loads(text) if text else None
            except ValueError:
                return text

    async def status(self, path: str, token: str) -> int:
        """Return the status code of an authenticated GET."""
        async with self._session.get(
            self.url + path,
            headers={"Authorization": f"Bearer {token}"},
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            await response.read()
            return response.status

    # ------------------------------------------------------------ auth

    async def exchange_code(self, code: str) -> dict[str, Any]:
        """Exchange an authorization code for access and refresh tokens."""
        tokens = await self.request(
            "POST",
            "/auth/token",
            form={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": self.client_id,
            },
        )
        if not isinstance(tokens, dict) or "access_token" not in tokens:
            raise DemoError(f"No access token in {tokens!r}")
        return tokens

    async def login(self, username: str, password: str) -> dict[str, Any]:
        """Log in through the login flow the web interface uses."""
        flow = await self.request(
            "POST",
            "/auth/login_flow",
            json_body={
                "client_id": self.client_id,
                "handler": ["homeassistant", None],
                "redirect_uri": self.redirect_uri,
            },
        )
        result = await self.request(
            "POST",
            f"/auth/login_flow/{flow['flow_id']}",
            json_body={
                "client_id": self.client_id,
                "username": username,
                "password": password,
            },
        )
        if result.get("type") != "create_entry":
            raise DemoError(
                f"Could not log in as {username} / {password} (errors: "
                f"{result.get('errors')}). Start over with scripts/demo --reset."
            )
        return await self.exchange_code(result["result"])

    async def revoke(self, refresh_token: str) -> None:
        """Revoke a refresh token (and its access tokens)."""
        await self.request("POST", "/auth/revoke", form={"token": refresh_token})

    # ------------------------------------------------------------ WebSocket

    async def ws_connect(self, token: str) -> None:
        """Open the WebSocket API and authenticate."""
        await self.ws_close()
        ws = await self._session.ws_connect(
            self.url.replace("http", "ws", 1) + "/api/websocket",
            max_msg_size=0,
        )
        hello = await ws.receive_json()
        if hello.get("type") != "auth_required":
            raise DemoError(f"Unexpected WebSocket greeting: {hello!r}")
        await ws.send_json({"type": "auth", "access_token": token})
        answer = await ws.receive_json()
        if answer.get("type") != "auth_ok":
            await ws.close()
            raise DemoError(f"WebSocket authentication failed: {answer!r}")
        self._ws = ws

    async def ws_close(self) -> None:
        """Close the WebSocket API connection, if open."""
        if self._ws is not None:
            await self._ws.close()
            self._ws = None

    async def ws(self, command: str, **data: Any) -> Any:
        """Send a WebSocket command and return its result."""
        if self._ws is None:
            raise DemoError("The WebSocket API is not connected")
        async with self._ws_lock:
            self._ws_id += 1
            msg_id = self._ws_id
            await self._ws.send_json({"id": msg_id, "type": command, **data})
            while True:
                message = await self._ws.receive()
                if message.type is not aiohttp.WSMsgType.TEXT:
                    raise DemoError(f"WebSocket API closed during {command}")
                answer = json.loads(message.data)
                if answer.get("id") == msg_id and answer.get("type") == "result":
                    break
        if not answer.get("success"):
            raise DemoError(f"{command} failed: {answer.get('error')}")
        return answer.get("result")
