"""Clients that connect before they are paired, as the PyPI xiaozhi-sdk does.

xiaozhi-sdk (0.5.1) reads ``websocket.token`` from the OTA answer even while
activation is pending, connects at once with it, polls ``/activate`` until a
200, then closes its socket and connects again with the same token; it never
fetches the OTA again. Its link is restricted to the pairing code until the
user enters it.
"""

import asyncio
import hashlib
import hmac
from typing import Any
import uuid

from aiohttp import ClientWebSocketResponse, WSMsgType, WSServerHandshakeError
from aiohttp.test_utils import TestClient
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import HomeAssistant
import pytest

from custom_components.xiaozhi.const import CONF_TOKEN, DOMAIN

SDK_MAC = "02:00:5a:48:77:01"
OTA = "/api/xiaozhi/v1/ota/"


def sdk_headers() -> dict[str, str]:
    """What xiaozhi-sdk sends: lower-case MAC, uuid5 Client-Id, no Activation."""
    return {
        "User-Agent": "Linux host/0.5.1",
        "Device-Id": SDK_MAC,
        "Client-Id": str(uuid.uuid5(uuid.NAMESPACE_DNS, SDK_MAC)),
        "Accept-Language": "zh-CN",
        "serial-number": "",
    }


SDK_BODY = {
    "application": {"version": "0.5.1", "system": "Linux"},
    "board": {"type": "xiaozhi-sdk", "name": "xiaozhi-sdk", "mac_addr": SDK_MAC},
}
SDK_HELLO = {
    "type": "hello",
    "version": 1,
    "features": {"mcp": True, "consistent_sample_rate": False},
    "transport": "websocket",
    "audio_params": {
        "format": "opus",
        "sample_rate": 16000,
        "channels": 1,
        "frame_duration": 60,
    },
}


async def connect_sdk(client: TestClient, token: str, **headers: str) -> Any:
    return await client.ws_connect(
        "/api/xiaozhi/v1/",
        headers={
            "Authorization": f"Bearer {token}",
            "Protocol-Version": "1",
            **sdk_headers(),
            **headers,
        },
    )


async def next_frame(ws: ClientWebSocketResponse) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.receive(), 5)
    assert message.type is WSMsgType.TEXT, message
    return dict(message.json())


async def _activate(client: TestClient, challenge: str) -> int:
    signature = hmac.new(b"", challenge.encode(), hashlib.sha256).hexdigest()
    response = await client.post(
        OTA + "activate",
        headers=sdk_headers(),
        json={"serial_number": "", "challenge": challenge, "hmac": signature},
    )
    return response.status


async def test_sdk_pairs_and_reconnects_with_the_same_token(
    hass: HomeAssistant, client: TestClient
) -> None:
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    answer = await response.json()
    token = answer["websocket"]["token"]
    challenge = answer["activation"]["challenge"]
    code = answer["activation"]["code"]
    assert await _activate(client, challenge) == 202

    # It connects at once: our hello (everything it reads), then its code.
    ws = await connect_sdk(client, token)
    await ws.send_json(SDK_HELLO)
    hello = await next_frame(ws)
    assert hello["transport"] == "websocket"
    assert set(hello["audio_params"]) >= {"sample_rate", "frame_duration", "channels"}
    assert hello["session_id"]
    alert = await next_frame(ws)
    assert alert["type"] == "alert"
    assert code in alert["message"]
    session_id = hello["session_id"]
    # No voice assistant speaks here: the sentence, with no audio.
    assert [await next_frame(ws) for _ in range(3)] == [
        {"session_id": session_id, "type": "tts", "state": "start"},
        {
            "session_id": session_id,
            "type": "tts",
            "state": "sentence_start",
            "text": alert["message"],
        },
        {"session_id": session_id, "type": "tts", "state": "stop"},
    ]
    # Asking again ("listen detect hi") shows the code again; nothing else
    # is served before pairing: no MCP, no audio.
    await ws.send_json({"type": "listen", "state": "detect", "text": "hi"})
    await ws.send_bytes(b"\x00" * 40)
    assert (await next_frame(ws))["type"] == "alert"
    assert [(await next_frame(ws))["state"] for _ in range(3)] == [
        "start",
        "sentence_start",
        "stop",
    ]

    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {"code": code}
    )
    entry = result["result"]
    assert entry.data[CONF_TOKEN] == token
    # The restricted link ends; /activate says 200 once the device is ready.
    closing = await asyncio.wait_for(ws.receive(), 5)
    assert closing.type in (WSMsgType.CLOSE, WSMsgType.CLOSED)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    assert await _activate(client, challenge) == 200

    # Same token, full session: the MCP handshake starts.
    ws = await connect_sdk(client, token)
    await ws.send_json(SDK_HELLO)
    assert (await next_frame(ws))["type"] == "hello"
    initialize = await next_frame(ws)
    assert initialize["type"] == "mcp"
    assert initialize["payload"]["method"] == "initialize"
    assert initialize["payload"]["params"]["capabilities"]["vision"]["token"]
    await ws.close()


async def test_activate_waits_for_the_entry_to_load(
    hass: HomeAssistant, client: TestClient
) -> None:
    """A 200 before the device is loaded would send the client into a 503."""
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    answer = await response.json()
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {"code": answer["activation"]["code"]}
    )
    entry = result["result"]
    await hass.async_block_till_done()
    await hass.config_entries.async_unload(entry.entry_id)
    assert await _activate(client, answer["activation"]["challenge"]) == 202
    await hass.config_entries.async_setup(entry.entry_id)
    assert await _activate(client, answer["activation"]["challenge"]) == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Client-Id": "someone-else"},
        {"Device-Id": "02:00:5a:48:77:02"},
    ],
)
async def test_pending_token_is_bound_to_its_identity(
    hass: HomeAssistant, client: TestClient, headers: dict[str, str]
) -> None:
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    token = (await response.json())["websocket"]["token"]
    with pytest.raises(WSServerHandshakeError) as err:
        await connect_sdk(client, token, **headers)
    assert err.value.status == 401
    with pytest.raises(WSServerHandshakeError):
        await connect_sdk(client, "not-the-token")


async def test_restricted_link_ends_when_the_code_expires(
    hass: HomeAssistant, client: TestClient
) -> None:
    response = await client.post(OTA, headers=sdk_headers(), json=SDK_BODY)
    token = (await response.json())["websocket"]["token"]
    ws = await connect_sdk(client, token)
    pairing = hass.data["xiaozhi"].pairing
    pairing.shutdown()  # every code gone (Home Assistant stops)
    closing = await asyncio.wait_for(ws.receive(), 5)
    assert closing.type in (WSMsgType.CLOSE, WSMsgType.CLOSED)
