"""Diagnostics: what the integration knows about a device, secrets redacted."""

from typing import Any

from homeassistant.components.diagnostics import async_redact_data
from homeassistant.core import HomeAssistant

from .const import CONF_TOKEN
from .manager import XiaozhiConfigEntry

TO_REDACT = {CONF_TOKEN, "vision_token", "ssid", "client_id"}


async def async_get_config_entry_diagnostics(
    hass: HomeAssistant, entry: XiaozhiConfigEntry
) -> dict[str, Any]:
    """Return diagnostics for a config entry."""
    manager = entry.runtime_data
    data = manager.data
    session = manager.session
    link = data.link
    return async_redact_data(
        {
            "entry": {
                "title": entry.title,
                "data": dict(entry.data),
                "options": dict(entry.options),
            },
            "device": {
                "board": data.board,
                "firmware": data.firmware,
                "activity": data.activity,
                "status": data.status.raw,
                "tools": [tool.as_dict() for tool in data.tools.values()],
            },
            "connection": {
                "connected": manager.connected,
                "keepalive": manager.keepalive,
                "connects": data.connects,
                "transport": link.transport if link else None,
                "remote": link.remote if link else None,
                "client_id": link.client_id if link else None,
                "protocol_version": link.protocol_version if link else None,
                "connected_since": link.connected_since.isoformat() if link else None,
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
                "audio_frames": session.audio_frames,
                "audio_bytes": session.audio_bytes,
            },
        },
        TO_REDACT,
    )
