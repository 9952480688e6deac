"""Pairing flows: a device checks in, shows a code, the user types it here."""

import asyncio
from typing import Any, override

from homeassistant.config_entries import (
    SOURCE_IGNORE,
    ConfigEntry,
    ConfigFlow,
    ConfigFlowResult,
    OptionsFlow,
)
from homeassistant.core import callback
from homeassistant.data_entry_flow import section
from homeassistant.helpers.network import NoURLAvailableError, get_url
from homeassistant.helpers.selector import (
    BooleanSelector,
    NumberSelector,
    NumberSelectorConfig,
    NumberSelectorMode,
    SelectSelector,
    SelectSelectorConfig,
    TextSelector,
)
from homeassistant.helpers.typing import DiscoveryInfoType
from homeassistant.setup import async_setup_component
import probatio

from .const import (
    CONF_BOARD,
    CONF_CALL_TIMEOUT,
    CONF_CLIENT_ID,
    CONF_FIRMWARE,
    CONF_KEEPALIVE,
    CONF_MAC,
    CONF_TOKEN,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DOMAIN,
    LOGGER,
    URL_OTA,
    WAIT_FOR_DEVICE_TIMEOUT,
)
from .data import DATA_KEY
from .endpoints import RESERVED_PORTS, EndpointSettings, Transport
from .manager import XiaozhiConfigEntry
from .pairing import CodeCheck, PairingManager, PendingDevice, new_token

CONF_CODE = "code"
SECTION_TRANSPORT = "transport"
CONF_TRANSPORT = "transport"
CONF_MQTT_PORT = "mqtt_port"
CONF_UDP_PORT = "udp_port"
PORT_SELECTOR = NumberSelector(
    NumberSelectorConfig(min=1, max=65535, step=1, mode=NumberSelectorMode.BOX)
)


def entry_title(pending: PendingDevice) -> str:
    """Return the name a newly paired device gets."""
    return f"XiaoZhi {pending.board} {pending.mac[-5:].upper()}"


class XiaozhiConfigFlow(ConfigFlow, domain=DOMAIN):
    """Pair a XiaoZhi device with the code it shows."""

    VERSION = 1

    def __init__(self) -> None:
        """Start without a device."""
        self._pending: PendingDevice | None = None
        self._paired_entry: ConfigEntry | None = None
        self._wait_task: asyncio.Task[PendingDevice] | None = None

    @staticmethod
    @callback
    @override
    def async_get_options_flow(config_entry: XiaozhiConfigEntry) -> OptionsFlow:
        """Return the options flow."""
        return XiaozhiOptionsFlow()

    async def _pairing(self) -> PairingManager:
        """Return the pairing state; the endpoints must answer devices now."""
        await async_setup_component(self.hass, DOMAIN, {})
        return self.hass.data[DATA_KEY].pairing

    def _device(self) -> PendingDevice:
        if self._pending is None:  # pragma: no cover - steps run in order
            raise RuntimeError("no device to pair")
        return self._pending

    def _ota_url(self) -> str:
        try:
            base = get_url(self.hass, allow_external=False, allow_cloud=False)
        except NoURLAvailableError:
            base = "http://homeassistant.local:8123"
        return base.rstrip("/") + URL_OTA

    async def async_step_user(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Explain what to enter on the device, then wait for it."""
        await self._pairing()
        if user_input is None:
            return self.async_show_form(
                step_id="user",
                description_placeholders={"ota_url": self._ota_url()},
            )
        return await self.async_step_wait_for_device()

    async def async_step_wait_for_device(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Wait until an unpaired device checks in."""
        if self._wait_task is None:
            self._wait_task = self.hass.async_create_task(
                self._async_wait_for_device(), "xiaozhi wait for device"
            )
        if not self._wait_task.done():
            return self.async_show_progress(
                step_id="wait_for_device",
                progress_action="wait_for_device",
                progress_task=self._wait_task,
                description_placeholders={"ota_url": self._ota_url()},
            )
        try:
            self._pending = self._wait_task.result()
        except TimeoutError:
            return self.async_show_progress_done(next_step_id="no_device")
        return self.async_show_progress_done(next_step_id="device_found")

    async def _async_wait_for_device(self) -> PendingDevice:
        pairing = await self._pairing()
        paired = {
            entry.unique_id
            for entry in self._async_current_entries(include_ignore=True)
            if entry.unique_id
        }
        async with asyncio.timeout(WAIT_FOR_DEVICE_TIMEOUT):
            return await pairing.wait_for_device(exclude=paired)

    async def async_step_no_device(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Give up: no device checked in."""
        return self.async_abort(
            reason="no_device", description_placeholders={"ota_url": self._ota_url()}
        )

    async def async_step_device_found(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Take the device that checked in."""
        pending = self._device()
        await self.async_set_unique_id(pending.mac, raise_on_progress=False)
        self._abort_if_unique_id_configured()
        self.context["title_placeholders"] = {"name": pending.name}
        return await self.async_step_pair()

    async def async_step_integration_discovery(
        self, discovery_info: DiscoveryInfoType
    ) -> ConfigFlowResult:
        """Start pairing a device that checked in on its own.

        A paired MAC checking in with another identity is paired again: it may
        be that device after a factory reset. Its code, shown on its screen,
        decides; until it is typed the paired identity keeps working.
        """
        mac: str = discovery_info[CONF_MAC]
        await self.async_set_unique_id(mac)
        waiting = (await self._pairing()).pending_for(mac)
        if not waiting:
            return self.async_abort(reason="code_expired")
        self._pending = waiting[0]
        self._paired_entry = self.hass.config_entries.async_entry_for_domain_unique_id(
            DOMAIN, mac
        )
        if self._paired_entry is None or self._paired_entry.source == SOURCE_IGNORE:
            self._abort_if_unique_id_configured()
            self.context["title_placeholders"] = {"name": self._pending.name}
            return await self.async_step_pair()
        self.context["title_placeholders"] = {"name": self._paired_entry.title}
        return await self.async_step_pair_again()

    async def async_step_pair(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Ask for the code shown on the device."""
        pending = self._device()
        errors: dict[str, str] = {}
        if user_input is not None:
            pairing = await self._pairing()
            outcome, paired = pairing.check_code(pending.mac, user_input[CONF_CODE])
            if outcome is CodeCheck.EXPIRED:
                return self.async_abort(reason="code_expired")
            if paired is None:
                errors[CONF_CODE] = outcome.value
            else:
                return self._async_paired(paired)
        if self._paired_entry is not None:
            return self.async_show_form(
                step_id="pair_again",
                data_schema=probatio.Schema(
                    {probatio.Required(CONF_CODE): TextSelector()}
                ),
                errors=errors,
                description_placeholders={
                    "name": self._paired_entry.title,
                    "mac": pending.mac.upper(),
                },
            )
        return self.async_show_form(
            step_id="pair",
            data_schema=probatio.Schema({probatio.Required(CONF_CODE): TextSelector()}),
            errors=errors,
            description_placeholders={
                "name": pending.name,
                "board": pending.board,
                "mac": pending.mac.upper(),
            },
        )

    async_step_pair_again = async_step_pair

    def _async_paired(self, paired: PendingDevice) -> ConfigFlowResult:
        """Create the device's entry, or give a paired one its new identity."""
        self.hass.data[DATA_KEY].pairing.complete(paired)
        data = {
            CONF_MAC: paired.mac,
            CONF_CLIENT_ID: paired.client_id,
            # The token handed out with the code, which a client that connects
            # before it is paired (xiaozhi-sdk) goes on using.
            CONF_TOKEN: paired.token,
            CONF_BOARD: paired.board,
            CONF_FIRMWARE: paired.firmware,
        }
        if (entry := self._paired_entry) is not None:
            LOGGER.warning(
                "Paired %s again with a new identity; the old one no longer works",
                entry.title,
            )
            return self.async_update_reload_and_abort(
                entry, data_updates=data, reason="paired_again"
            )
        LOGGER.info("Paired %s", paired.name)
        return self.async_create_entry(title=entry_title(paired), data=data)

    async def async_step_reconfigure(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Issue the device a new token."""
        entry: XiaozhiConfigEntry = self._get_reconfigure_entry()
        if user_input is None:
            return self.async_show_form(
                step_id="reconfigure",
                description_placeholders={"name": entry.title},
            )
        result = self.async_update_and_abort(
            entry, data_updates={CONF_TOKEN: new_token()}
        )
        LOGGER.info("Issued a new token to %s", entry.title)
        await entry.runtime_data.async_token_changed()
        return result


OPTIONS_SCHEMA = probatio.Schema(
    {
        probatio.Required(CONF_CALL_TIMEOUT): NumberSelector(
            NumberSelectorConfig(
                min=5,
                max=300,
                step=1,
                mode=NumberSelectorMode.BOX,
                unit_of_measurement="s",
            )
        ),
        probatio.Required(CONF_KEEPALIVE): BooleanSelector(),
        probatio.Required(SECTION_TRANSPORT): section(
            probatio.Schema(
                {
                    probatio.Required(CONF_TRANSPORT): SelectSelector(
                        SelectSelectorConfig(
                            options=[transport.value for transport in Transport],
                            translation_key=CONF_TRANSPORT,
                        )
                    ),
                    probatio.Required(CONF_MQTT_PORT): PORT_SELECTOR,
                    probatio.Required(CONF_UDP_PORT): PORT_SELECTOR,
                }
            ),
            {"collapsed": True},
        ),
    }
)


class XiaozhiOptionsFlow(OptionsFlow):
    """The device's options, and the transport of every device."""

    async def async_step_init(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Show the options; apply the transport settings at once."""
        endpoints = self.hass.data[DATA_KEY].endpoints
        errors: dict[str, str] = {}
        placeholders = {"name": self.config_entry.title, "port": "", "error": ""}
        if user_input is not None:
            options = dict(user_input)
            transport = options.pop(SECTION_TRANSPORT)
            settings = EndpointSettings(
                transport=Transport(transport[CONF_TRANSPORT]),
                mqtt_port=int(transport[CONF_MQTT_PORT]),
                udp_port=int(transport[CONF_UDP_PORT]),
            )
            reserved = [
                port
                for port in (settings.mqtt_port, settings.udp_port)
                if port in RESERVED_PORTS
            ]
            if reserved:
                errors["base"] = "port_reserved"
                placeholders["port"] = str(reserved[0])
            elif failed := await endpoints.async_apply(settings):
                key, error = next(iter(failed.items()))
                errors["base"] = "port_unavailable"
                placeholders["port"] = str(getattr(settings, key))
                placeholders["error"] = error
            else:
                return self.async_create_entry(data=options)
        settings = endpoints.settings
        suggested = {
            CONF_CALL_TIMEOUT: DEFAULT_CALL_TIMEOUT,
            CONF_KEEPALIVE: DEFAULT_KEEPALIVE,
            **self.config_entry.options,
            SECTION_TRANSPORT: {
                CONF_TRANSPORT: settings.transport.value,
                CONF_MQTT_PORT: settings.mqtt_port,
                CONF_UDP_PORT: settings.udp_port,
            },
        }
        if user_input is not None:
            suggested |= user_input
        return self.async_show_form(
            step_id="init",
            data_schema=self.add_suggested_values_to_schema(OPTIONS_SCHEMA, suggested),
            errors=errors,
            description_placeholders=placeholders,
        )
