"""The devices' OTA check-in and activation: who a device is, and its answer.

At boot a device posts its system information to its OTA address. The paired
identity gets where to connect (the ``mqtt`` and ``websocket`` blocks) with
its token; any other identity, even with a paired MAC, gets a pairing code
and never the token. While the code is shown the device polls the activation
address: 202 pending, 200 once the user entered it.

:class:`CheckIns` builds every answer; the views only adapt HTTP.
"""

from enum import StrEnum
from functools import partial
from http import HTTPStatus
from typing import Any, Final

from aiohttp import web
from homeassistant.config_entries import SOURCE_IGNORE, ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.helpers.http import KEY_HASS, HomeAssistantView
from homeassistant.util import dt as dt_util
from yarl import URL

from ..const import CONF_TOKEN, DOMAIN, URL_ACTIVATE, URL_OTA
from ..pairing.identity import client_matches, loaded_runtime
from ..pairing.manager import PairingManager
from ..protocol.http import error_response
from ..protocol.ota import (
    CheckIn,
    activation_block,
    read_check_in,
    server_time,
    websocket_block,
)
from ..protocol.ota_image import DeviceHardware
from .mqtt import DeviceEndpoints
from .uploads import UploadViews
from .urls import device_base_url, websocket_url


class Refused(StrEnum):
    """Why a check-in gets no answer."""

    IGNORED = "Device is ignored"
    DISABLED = "Device is disabled"
    TOO_MANY = "Too many devices are waiting to pair"


class CheckIns:
    """Answers check-ins: pairing codes, links, firmware; what the views share."""

    def __init__(
        self, pairing: PairingManager, endpoints: DeviceEndpoints, uploads: UploadViews
    ) -> None:
        """Answer with the instance's pairing, endpoints and one-time URLs."""
        self._pairing = pairing
        self._endpoints = endpoints
        self._firmware = uploads.firmware

    def _record(
        self, hass: HomeAssistant, check_in: CheckIn, base: str
    ) -> dict[str, str] | None:
        """Keep what a paired device's check says; return firmware to offer.

        At boot this is where a new firmware version shows first. An install
        that waited for the device is offered (``firmware/installer.py``).
        """
        runtime = loaded_runtime(hass, check_in.mac)
        if runtime is None:
            return None
        runtime.entry_data.async_set_hardware(
            DeviceHardware.from_system_info(check_in.info)
        )
        _board, firmware = check_in.describe()
        runtime.async_checked_in(firmware)
        return runtime.installer.offer(partial(self._firmware.mint, base))

    def answer(
        self, hass: HomeAssistant, check_in: CheckIn, base: str
    ) -> dict[str, Any] | Refused:
        """Return the OTA answer for a device that reached us at ``base``."""
        answer: dict[str, Any] = {"server_time": server_time(dt_util.now())}
        entry = hass.config_entries.async_entry_for_domain_unique_id(
            DOMAIN, check_in.mac
        )
        if entry is not None:
            if entry.source == SOURCE_IGNORE:
                return Refused.IGNORED
            if entry.disabled_by is not None:
                return Refused.DISABLED
            if client_matches(entry, check_in.client_id):
                if (offer := self._record(hass, check_in, base)) is not None:
                    answer["firmware"] = offer
                # The firmware prefers mqtt when both are there; clients that
                # speak only WebSocket take that block.
                mqtt = self._endpoints.ota_block(
                    URL(base).host, entry, check_in.client_id
                )
                if mqtt is not None:
                    answer["mqtt"] = mqtt
                answer["websocket"] = websocket_block(
                    websocket_url(base), entry.data[CONF_TOKEN]
                )
                return answer
        board, firmware = check_in.describe()
        pending = self._pairing.check_in(
            mac=check_in.mac,
            client_id=check_in.client_id,
            address=check_in.address,
            board=board,
            firmware=firmware,
        )
        if pending is None:
            return Refused.TOO_MANY
        answer["activation"] = activation_block(
            pending.code,
            pending.challenge,
            pending.remaining(),
            f"Home Assistant\n{pending.code}",
        )
        # Clients that connect before they are paired (xiaozhi-sdk) need a link
        # now; it is restricted to showing the code until the user enters it,
        # and then its token is the device's.
        answer["websocket"] = websocket_block(websocket_url(base), pending.token)
        return answer

    def activation_pending(
        self, hass: HomeAssistant, mac: str, client: str
    ) -> bool | None:
        """Return whether a device still waits for its code (None: no pairing)."""
        if self._pairing.get(mac, client) is not None:
            return True
        entry = hass.config_entries.async_entry_for_domain_unique_id(DOMAIN, mac)
        if entry is None or entry.source == SOURCE_IGNORE:
            return None
        if not client_matches(entry, client):
            return None
        # A client that connects at once must find the device ready.
        return entry.state is not ConfigEntryState.LOADED


_REFUSED_STATUS: Final = {
    Refused.IGNORED: HTTPStatus.FORBIDDEN,
    Refused.DISABLED: HTTPStatus.FORBIDDEN,
    Refused.TOO_MANY: HTTPStatus.TOO_MANY_REQUESTS,
}


class OtaView(HomeAssistantView):
    """The device's OTA check: pairing codes and, once paired, its link."""

    url = URL_OTA
    extra_urls = [URL_OTA.rstrip("/")]  # noqa: RUF012 - as declared by the base
    name = "api:xiaozhi:ota"
    requires_auth = False

    def __init__(self, check_ins: CheckIns) -> None:
        """Answer with ``check_ins``."""
        self._check_ins = check_ins

    async def post(self, request: web.Request) -> web.Response:
        """Answer a device's check-in."""
        hass = request.app[KEY_HASS]
        check_in = await read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        base = device_base_url(hass, str(request.url.origin()))
        answer = self._check_ins.answer(hass, check_in, base)
        if isinstance(answer, Refused):
            return error_response(_REFUSED_STATUS[answer], answer.value)
        return self.json(answer)


class ActivateView(HomeAssistantView):
    """Polled by a device while its code is shown: 202 pending, 200 paired."""

    url = URL_ACTIVATE
    name = "api:xiaozhi:activate"
    requires_auth = False

    def __init__(self, check_ins: CheckIns) -> None:
        """Answer with ``check_ins``."""
        self._check_ins = check_ins

    async def post(self, request: web.Request) -> web.Response:
        """Tell the device whether the user entered its code."""
        hass = request.app[KEY_HASS]
        check_in = await read_check_in(request)
        if isinstance(check_in, web.Response):
            return check_in
        pending = self._check_ins.activation_pending(
            hass, check_in.mac, check_in.client_id
        )
        if pending is None:
            return error_response(
                HTTPStatus.NOT_FOUND, "No pairing in progress for this device"
            )
        if pending:
            return self.json({"status": "pending"}, HTTPStatus.ACCEPTED)
        return self.json({"status": "activated"})
