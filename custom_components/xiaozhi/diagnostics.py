"""Diagnostics: what the integration knows about a device, secrets redacted."""

from __future__ import annotations

from typing import Any

from homeassistant.components.diagnostics import async_redact_data
from homeassistant.core import HomeAssistant

from .const import CONF_TOKEN
from .device import XiaozhiConfigEntry

TO_REDACT = {CONF_TOKEN, "vision_token", "ssid"}


async def async_get_config_entry_diagnostics(
    hass: HomeAssistant, entry: XiaozhiConfigEntry
) -> dict[str, Any]:
    """Return diagnostics for a config entry."""
    device = entry.runtime_data
    session = device.session
    return async_redact_data(
        {
            "entry": {
                "title": entry.title,
                "data": dict(entry.data),
                "options": dict(entry.options),
            },
            "device": {
                "board": device.board,
                "firmware": device.firmware,
                "client_id": device.client_id,
                "protocol_version": device.protocol_version,
                "connected": device.connected,
                "keepalive": device.keepalive,
                "activity": device.activity,
                "status": device.status,
                "tools": [tool.as_dict() for tool in device.tools.values()],
            },
            "session": None
            if session is None
            else {
                "session_id": session.session_id,
                "ready": session.ready,
                "hello": None
                if session.hello is None
                else {
                    "version": session.hello.version,
                    "features": session.hello.features,
                    "audio_params": session.hello.audio_params,
                },
                "server_info": session.server_info,
                "vision_token": session.vision_token,
                "pending_requests": session.mcp.pending_count,
                "binary_frames": session.binary_frames,
                "binary_bytes": session.binary_bytes,
            },
        },
        TO_REDACT,
    )
