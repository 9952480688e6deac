"""Setting up: Home Assistant as the devices' server, then each device by its code.

The first time, the user flow creates the server entry, which holds the
settings every device shares (``settings.py``). From then on it pairs a
device: the user types the code the device shows, and that code alone says
which device it is. A device that checks in on its own gets a discovery card
that asks for its code.
"""

from collections.abc import Callable
from typing import Any, Final, override

from homeassistant.config_entries import (
    SOURCE_IGNORE,
    ConfigEntry,
    ConfigEntryState,
    ConfigFlow,
    ConfigFlowResult,
    OptionsFlow,
)
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers.network import NoURLAvailableError, get_url
from homeassistant.helpers.selector import (
    BooleanSelector,
    NumberSelector,
    NumberSelectorConfig,
    NumberSelectorMode,
    SelectSelector,
    SelectSelectorConfig,
    TextSelector,
    TextSelectorConfig,
    TextSelectorType,
)
from homeassistant.helpers.typing import DiscoveryInfoType
import probatio

from .const import (
    CONF_AGENT_TOOLS,
    CONF_BOARD,
    CONF_CALL_TIMEOUT,
    CONF_CLIENT_ID,
    CONF_FALSE_WAKE_CHECK,
    CONF_FIRMWARE,
    CONF_KEEPALIVE,
    CONF_MAC,
    CONF_TOKEN,
    DEFAULT_AGENT_TOOLS,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_FALSE_WAKE_CHECK,
    DEFAULT_KEEPALIVE,
    DOMAIN,
    LOGGER,
    URL_OTA,
)
from .domain_data import domain_data, domain_data_of
from .firmware.releases import async_read_release_list
from .pairing.manager import (
    CodeCheck,
    PairingManager,
    PendingDevice,
    board_identifier,
    new_token,
)
from .settings import (
    CONF_FIRMWARE_PRERELEASES,
    CONF_FIRMWARE_RELEASES_URL,
    CONF_MQTT_PORT,
    CONF_TRANSPORT,
    CONF_UDP_PORT,
    CONF_WAKE_ARBITRATION,
    DEFAULT_RELEASES_URL,
    RESERVED_PORTS,
    SERVER_UNIQUE_ID,
    ServerSettings,
    Transport,
    is_http_url,
    is_server_entry,
)

CONF_CODE: Final = "code"
SERVER_TITLE: Final = "XiaoZhi server"
CODE_SCHEMA: Final = probatio.Schema({probatio.Required(CONF_CODE): TextSelector()})
PORT_SELECTOR: Final = NumberSelector(
    NumberSelectorConfig(min=1, max=65535, step=1, mode=NumberSelectorMode.BOX)
)
SERVER_SCHEMA: Final = probatio.Schema(
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
)
SERVER_OPTIONS_SCHEMA: Final = SERVER_SCHEMA.extend(
    {
        probatio.Optional(
            CONF_FIRMWARE_RELEASES_URL, default=DEFAULT_RELEASES_URL
        ): TextSelector(TextSelectorConfig(type=TextSelectorType.URL)),
        probatio.Optional(CONF_FIRMWARE_PRERELEASES, default=False): BooleanSelector(),
        probatio.Optional(CONF_WAKE_ARBITRATION, default=True): BooleanSelector(),
    }
)
DEVICE_OPTIONS_SCHEMA: Final = probatio.Schema(
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
        probatio.Required(CONF_AGENT_TOOLS): BooleanSelector(),
        probatio.Required(CONF_FALSE_WAKE_CHECK): BooleanSelector(),
    }
)


def entry_title(pending: PendingDevice) -> str:
    """Return the name a newly paired device gets: its board and MAC's end."""
    board = board_identifier(pending.board)
    tail = pending.mac[-5:].upper()
    return f"XiaoZhi {board} {tail}" if board else f"XiaoZhi {tail}"


def ota_url(hass: HomeAssistant) -> str:
    """Return the OTA address devices are given (Home Assistant's own URL)."""
    try:
        base = get_url(hass, allow_external=False, allow_cloud=False)
    except NoURLAvailableError:
        base = "http://homeassistant.local:8123"
    return base.rstrip("/") + URL_OTA


def server_settings(user_input: dict[str, Any]) -> ServerSettings:
    """Return the settings the user chose in a form (firmware: if shown)."""
    default = ServerSettings()
    return ServerSettings(
        transport=Transport(user_input[CONF_TRANSPORT]),
        mqtt_port=int(user_input[CONF_MQTT_PORT]),
        udp_port=int(user_input[CONF_UDP_PORT]),
        firmware_releases_url=str(
            user_input.get(CONF_FIRMWARE_RELEASES_URL, default.firmware_releases_url)
        ).strip(),
        firmware_prereleases=bool(user_input.get(CONF_FIRMWARE_PRERELEASES, False)),
        wake_arbitration=bool(user_input.get(CONF_WAKE_ARBITRATION, True)),
    )


def reserved_port_errors(settings: ServerSettings) -> dict[str, str]:
    """Return the form errors of ports an MQTT broker owns."""
    return {
        key: "port_reserved"
        for key in (CONF_MQTT_PORT, CONF_UDP_PORT)
        if getattr(settings, key) in RESERVED_PORTS
    }


async def async_try_settings(
    hass: HomeAssistant,
    server: ConfigEntry,
    user_input: dict[str, Any],
    placeholders: dict[str, str],
) -> tuple[ServerSettings, dict[str, str]]:
    """Check the settings a user chose; return them and the form's errors.

    A port an MQTT broker owns is refused first; new ports are opened now
    and put in service once the settings are saved (a port that cannot be
    opened leaves what serves now as it was: its error goes into
    ``placeholders``).
    A server entry that is not loaded (disabled, failed) opens nothing: its
    settings are used once it is. What the form does not show (a repair
    shows only the ports) stays as stored.
    """
    stored = ServerSettings.from_options(server.options)
    settings = server_settings({**stored.as_options(), **user_input})
    errors = reserved_port_errors(settings)
    url = settings.firmware_releases_url
    if not is_http_url(url):
        errors[CONF_FIRMWARE_RELEASES_URL] = "invalid_url"
    elif url != stored.firmware_releases_url:
        # A new address is read once: a typo is seen now, not in six hours.
        try:
            await async_read_release_list(hass, url)
        except HomeAssistantError as err:
            errors[CONF_FIRMWARE_RELEASES_URL] = "releases_unreadable"
            placeholders["error"] = (err.translation_placeholders or {}).get(
                "error", ""
            )
    data = domain_data_of(hass)
    if not errors and data is not None and server.state is ConfigEntryState.LOADED:
        # Bound now, applied once saved (the server entry's update listener).
        failed = await data.endpoints.async_bind(settings)
        for key, error in failed.items():
            errors[key] = "port_unavailable"
            placeholders["port"] = str(getattr(settings, key))
            placeholders["error"] = error
    return settings, errors


def server_form_values(
    entry: ConfigEntry, user_input: dict[str, Any] | None
) -> dict[str, Any]:
    """Return what the settings form shows: what is stored, or what was typed."""
    return {
        **ServerSettings.from_options(entry.options).as_options(),
        **(user_input or {}),
    }


class XiaozhiConfigFlow(ConfigFlow, domain=DOMAIN):
    """Set up the server, and pair XiaoZhi devices with the codes they show."""

    VERSION = 1

    def __init__(self) -> None:
        """Start without a device."""
        self._pending: PendingDevice | None = None
        self._paired_entry: ConfigEntry | None = None

    @staticmethod
    @callback
    @override
    def async_get_options_flow(config_entry: ConfigEntry) -> OptionsFlow:
        """Return the options flow: the server's settings, or a device's."""
        if is_server_entry(config_entry):
            return ServerOptionsFlow()
        return DeviceOptionsFlow()

    def _server_entry(self) -> ConfigEntry | None:
        return self.hass.config_entries.async_entry_for_domain_unique_id(
            DOMAIN, SERVER_UNIQUE_ID
        )

    def _pairing(self) -> PairingManager:
        """Return the pairing state (the integration is set up by then)."""
        return domain_data(self.hass).pairing

    def _device(self) -> PendingDevice:
        if self._pending is None:  # pragma: no cover - steps run in order
            raise RuntimeError("no device to pair")
        return self._pending

    # --- the server -----------------------------------------------------

    async def async_step_user(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Set the server up the first time; pair a device after that."""
        server = self._server_entry()
        if server is None:
            return await self.async_step_server()
        if (
            server.state is not ConfigEntryState.LOADED
            or domain_data_of(self.hass) is None
        ):
            return self.async_abort(reason="server_not_loaded")
        return await self.async_step_code()

    async def async_step_server(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Make Home Assistant the server of XiaoZhi devices."""
        errors: dict[str, str] = {}
        if user_input is not None:
            settings = server_settings(user_input)
            if not (errors := reserved_port_errors(settings)):
                await self.async_set_unique_id(SERVER_UNIQUE_ID)
                self._abort_if_unique_id_configured()
                return self.async_create_entry(
                    title=SERVER_TITLE, data={}, options=settings.as_options()
                )
        return self.async_show_form(
            step_id="server",
            data_schema=self.add_suggested_values_to_schema(
                SERVER_SCHEMA, user_input or ServerSettings().as_options()
            ),
            errors=errors,
            description_placeholders={"ota_url": ota_url(self.hass)},
        )

    async def async_step_system(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Create the server entry for an installation paired before it existed."""
        await self.async_set_unique_id(SERVER_UNIQUE_ID)
        self._abort_if_unique_id_configured()
        settings = ServerSettings.from_options(user_input or {})
        return self.async_create_entry(
            title=SERVER_TITLE, data={}, options=settings.as_options()
        )

    # --- a device -------------------------------------------------------

    async def async_step_code(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Pair the device that shows the code the user types."""
        errors: dict[str, str] = {}
        if user_input is not None:
            check, pending = self._pairing().find_code(user_input[CONF_CODE])
            if pending is not None:
                await self.async_set_unique_id(pending.mac, raise_on_progress=False)
                entry = self.hass.config_entries.async_entry_for_domain_unique_id(
                    DOMAIN, pending.mac
                )
                if entry is not None and entry.source != SOURCE_IGNORE:
                    self._paired_entry = entry
                return self._async_paired(pending)
            errors[CONF_CODE] = check.value
        return self.async_show_form(
            step_id="code",
            data_schema=CODE_SCHEMA,
            errors=errors,
            description_placeholders={"ota_url": ota_url(self.hass)},
        )

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
        if not (waiting := self._pairing().pending_for(mac)):
            return self.async_abort(reason="code_expired")
        self._pending = waiting[0]
        self._paired_entry = self.hass.config_entries.async_entry_for_domain_unique_id(
            DOMAIN, mac
        )
        if self._paired_entry is None or self._paired_entry.source == SOURCE_IGNORE:
            self._paired_entry = None
            self._abort_if_unique_id_configured()
            self.context["title_placeholders"] = {"name": self._pending.name}
            return await self.async_step_pair()
        self.context["title_placeholders"] = {"name": self._paired_entry.title}
        return await self.async_step_pair_again()

    async def async_step_pair(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Ask for the code shown on a discovered device."""
        pending = self._device()
        errors: dict[str, str] = {}
        if user_input is not None:
            outcome, paired = self._pairing().check_code(
                pending.mac, user_input[CONF_CODE]
            )
            if outcome is CodeCheck.EXPIRED:
                return self.async_abort(reason="code_expired")
            if paired is None:
                errors[CONF_CODE] = outcome.value
            else:
                return self._async_paired(paired)
        if self._paired_entry is not None:
            return self.async_show_form(
                step_id="pair_again",
                data_schema=CODE_SCHEMA,
                errors=errors,
                description_placeholders={
                    "name": self._paired_entry.title,
                    "mac": pending.mac.upper(),
                },
            )
        return self.async_show_form(
            step_id="pair",
            data_schema=CODE_SCHEMA,
            errors=errors,
            description_placeholders={"name": pending.name},
        )

    async_step_pair_again = async_step_pair

    def _async_paired(self, paired: PendingDevice) -> ConfigFlowResult:
        """Create the device's entry, or give a paired one its new identity."""
        self._pairing().complete(paired, self.flow_id)
        # Its old identity's retries may have shut its address out.
        domain_data(self.hass).logins.forgive(paired.address)
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
        entry = self._get_reconfigure_entry()
        if is_server_entry(entry):
            return await self.async_step_server_settings()
        if user_input is None:
            return self.async_show_form(
                step_id="reconfigure",
                description_placeholders={"name": entry.title},
            )
        runtime = entry.runtime_data if entry.state is ConfigEntryState.LOADED else None
        self.hass.config_entries.async_update_entry(
            entry, data={**entry.data, CONF_TOKEN: new_token()}
        )
        LOGGER.info("Issued a new token to %s", entry.title)
        if runtime is not None:
            # The old link ends and the device restarts to fetch the new
            # token, before anything else can run.
            await runtime.async_token_changed()
        return self.async_abort(reason="reconfigure_successful")

    async def async_step_server_settings(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Change the settings every device shares (as Configure does)."""
        entry = self._get_reconfigure_entry()
        return await async_server_settings_step(
            self,
            entry,
            user_input,
            "server_settings",
            lambda settings: self.async_update_and_abort(
                entry,
                options=settings.as_options(),
                reason="server_settings_saved",
            ),
        )


async def async_server_settings_step(
    flow: ConfigFlow | OptionsFlow,
    entry: ConfigEntry,
    user_input: dict[str, Any] | None,
    step_id: str,
    done: Callable[[ServerSettings], ConfigFlowResult],
) -> ConfigFlowResult:
    """Show the server's settings; apply them only once every new port is open."""
    errors: dict[str, str] = {}
    placeholders = {"port": "", "error": "", "ota_url": ota_url(flow.hass)}
    if user_input is not None:
        settings, errors = await async_try_settings(
            flow.hass, entry, user_input, placeholders
        )
        if not errors:
            return done(settings)
    return flow.async_show_form(
        step_id=step_id,
        data_schema=flow.add_suggested_values_to_schema(
            SERVER_OPTIONS_SCHEMA, server_form_values(entry, user_input)
        ),
        errors=errors,
        description_placeholders=placeholders,
    )


class ServerOptionsFlow(OptionsFlow):
    """The settings every device shares: how devices reach Home Assistant."""

    async def async_step_init(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Start with the settings."""
        return await self.async_step_server()

    async def async_step_server(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Show the settings; apply them only once every new port is open."""
        return await async_server_settings_step(
            self,
            self.config_entry,
            user_input,
            "server",
            lambda settings: self.async_create_entry(data=settings.as_options()),
        )


class DeviceOptionsFlow(OptionsFlow):
    """The options of one device."""

    async def async_step_init(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Start with the device's options."""
        return await self.async_step_device()

    async def async_step_device(
        self, user_input: dict[str, Any] | None = None
    ) -> ConfigFlowResult:
        """Show the device's options."""
        if user_input is not None:
            return self.async_create_entry(data=user_input)
        suggested = {
            CONF_CALL_TIMEOUT: DEFAULT_CALL_TIMEOUT,
            CONF_KEEPALIVE: DEFAULT_KEEPALIVE,
            CONF_AGENT_TOOLS: DEFAULT_AGENT_TOOLS,
            CONF_FALSE_WAKE_CHECK: DEFAULT_FALSE_WAKE_CHECK,
            **self.config_entry.options,
        }
        return self.async_show_form(
            step_id="device",
            data_schema=self.add_suggested_values_to_schema(
                DEVICE_OPTIONS_SCHEMA, suggested
            ),
            description_placeholders={"name": self.config_entry.title},
        )
