"""Who a device is: the credentials Home Assistant handed it, and their checks.

A paired device is its MAC (``Device-Id``), the random UUID it generated
(``Client-Id``, recorded at pairing) and the token Home Assistant gave it. A
MAC is visible to everyone on the LAN, so nothing is handed out or accepted on
a MAC alone: every credential is checked against the whole identity, secrets
in constant time. Every transport (WebSocket, MQTT) uses these checks.
"""

from dataclasses import dataclass
from enum import StrEnum

from homeassistant.config_entries import ConfigEntry, ConfigEntryState
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir

from ..const import CONF_CLIENT_ID, CONF_MAC, CONF_TOKEN, DOMAIN, LOGGER
from ..runtime import XiaozhiConfigEntry, XiaozhiRuntime
from .manager import same_secret


class Refusal(StrEnum):
    """Why a device's login was refused."""

    BAD_TOKEN = "bad_token"  # noqa: S105 - a reason, not a secret
    WRONG_DEVICE = "wrong_device"
    WRONG_CLIENT = "wrong_client"
    DISABLED = "disabled"
    NOT_LOADED = "not_loaded"

    @property
    def failed_login(self) -> bool:
        """Return True when the credentials were wrong (a failed login)."""
        return self in (Refusal.BAD_TOKEN, Refusal.WRONG_DEVICE, Refusal.WRONG_CLIENT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Credentials:
    """What a device presents when it connects."""

    token: str | None
    mac: str | None
    client_id: str | None


def entry_for_token(hass: HomeAssistant, token: str) -> ConfigEntry | None:
    """Find the entry a device token belongs to, in constant time per entry."""
    found: ConfigEntry | None = None
    for entry in hass.config_entries.async_entries(DOMAIN, include_ignore=False):
        if same_secret(entry.data.get(CONF_TOKEN), token):
            found = entry
    return found


def client_matches(entry: ConfigEntry, client_id: str | None) -> bool:
    """Return True when ``client_id`` is the identity the entry paired with.

    An entry paired before identities were recorded has none yet: any client
    matches it until its first authenticated connection binds it.
    """
    stored = entry.data.get(CONF_CLIENT_ID)
    return stored is None or same_secret(stored, client_id)


def authenticate(
    hass: HomeAssistant, credentials: Credentials
) -> XiaozhiConfigEntry | Refusal:
    """Return the loaded entry the credentials belong to, or why not.

    The token, the MAC and the Client-Id must all belong to the same device.
    """
    entry = entry_for_token(hass, credentials.token) if credentials.token else None
    if entry is None:
        return Refusal.BAD_TOKEN
    if credentials.mac != entry.data[CONF_MAC]:
        return Refusal.WRONG_DEVICE
    if not client_matches(entry, credentials.client_id):
        return Refusal.WRONG_CLIENT
    if entry.disabled_by is not None:
        return Refusal.DISABLED
    if entry.state is not ConfigEntryState.LOADED:
        return Refusal.NOT_LOADED
    return entry


def issue_id(entry: ConfigEntry) -> str:
    """Return the repair issue id of an entry not bound to a device identity."""
    return f"not_bound_{entry.entry_id}"


@callback
def async_check_bound(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Raise a repair issue while the entry has no recorded identity."""
    if CONF_CLIENT_ID in entry.data:
        ir.async_delete_issue(hass, DOMAIN, issue_id(entry))
        return
    ir.async_create_issue(
        hass,
        DOMAIN,
        issue_id(entry),
        is_fixable=False,
        is_persistent=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key="not_bound",
        translation_placeholders={"name": entry.title},
    )


@callback
def async_bind(hass: HomeAssistant, entry: ConfigEntry, client_id: str | None) -> None:
    """Record the identity of a device that proved it holds its entry's token.

    Devices paired before identities were recorded are bound on their first
    authenticated connection; from then on their token works only with it.
    """
    if CONF_CLIENT_ID in entry.data or client_id is None:
        return
    hass.config_entries.async_update_entry(
        entry, data={**entry.data, CONF_CLIENT_ID: client_id}
    )
    LOGGER.info("%s is now bound to the identity it connected with", entry.title)
    async_check_bound(hass, entry)


@callback
def async_forget(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Remove what was raised about an entry that is removed."""
    ir.async_delete_issue(hass, DOMAIN, issue_id(entry))


def loaded_runtime(hass: HomeAssistant, mac: str | None) -> XiaozhiRuntime | None:
    """Return the runtime of the loaded device with this MAC, if any."""
    if mac is None:
        return None
    entry: XiaozhiConfigEntry | None = (
        hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, mac)
    )
    if entry is None or entry.state is not ConfigEntryState.LOADED:
        return None
    return entry.runtime_data


def loaded_runtimes(hass: HomeAssistant) -> list[XiaozhiRuntime]:
    """Return the runtimes of every loaded device (not the server entry)."""
    return [
        entry.runtime_data
        for entry in hass.config_entries.async_loaded_entries(DOMAIN)
        if isinstance(entry.runtime_data, XiaozhiRuntime)
    ]
