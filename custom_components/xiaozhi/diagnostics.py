"""Diagnostics: what the integration knows about a device, secrets redacted."""

from typing import Any

from homeassistant.components.diagnostics import REDACTED, async_redact_data
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant

from .const import CONF_MAC, CONF_TOKEN
from .domain_data import domain_data
from .runtime import XiaozhiRuntime
from .settings import is_server_entry

# Secrets, and what locates or identifies the device: its MAC (the entry's
# title carries its end), its network address, and any address a device's
# status may report.
TO_REDACT = {
    CONF_TOKEN,
    "vision_token",
    "ssid",
    "client_id",
    CONF_MAC,
    "remote",
    "ip",
    "ip_address",
    "mac_address",
}


async def async_get_config_entry_diagnostics(
    hass: HomeAssistant, entry: ConfigEntry
) -> dict[str, Any]:
    """Return diagnostics for a config entry: the server's, or a device's."""
    if is_server_entry(entry):
        data = domain_data(hass)
        endpoints = data.endpoints
        return {
            "settings": dict(entry.options),
            "logins": data.logins.as_dict(),
            "mqtt_port": endpoints.mqtt.port if endpoints.mqtt else None,
            "udp_port": endpoints.udp.port if endpoints.udp else None,
            "mqtt_connections": endpoints.mqtt.connections if endpoints.mqtt else 0,
            "udp_channels": endpoints.udp.channels if endpoints.udp else 0,
        }
    return _device_diagnostics(entry)


def _device_diagnostics(entry: ConfigEntry[XiaozhiRuntime]) -> dict[str, Any]:
    runtime = entry.runtime_data
    data = runtime.entry_data
    session = runtime.session
    link = data.link
    return async_redact_data(
        {
            "entry": {
                "title": REDACTED,
                "data": dict(entry.data),
                "options": dict(entry.options),
            },
            "device": {
                "board": data.board,
                "firmware": data.firmware,
                "activity": data.activity,
                "status": data.status.raw,
                "tools": [tool.as_dict() for tool in data.tools.values()],
                # What a firmware update is checked against.
                "hardware": data.hardware.as_dict() if data.hardware else None,
                "firmware_install": {
                    "version": runtime.installer.version,
                    "phase": runtime.installer.phase,
                    "percent": runtime.installer.percent,
                    "last_result": None
                    if (result := runtime.installer.result) is None
                    else {
                        "version": result.version,
                        "outcome": result.outcome,
                        "reason": result.reason,
                    },
                },
            },
            "connection": {
                "connected": runtime.connected,
                "keepalive": runtime.options.keepalive,
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
