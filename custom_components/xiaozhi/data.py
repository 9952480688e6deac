"""What the integration keeps once per Home Assistant instance."""

from dataclasses import dataclass

from homeassistant.util.hass_dict import HassKey

from .const import DOMAIN
from .endpoints import DeviceEndpoints
from .pairing import PairingManager


@dataclass(slots=True)
class XiaozhiData:
    """Instance-wide state: devices waiting to be paired, the MQTT + UDP endpoint.

    Paired devices are config entries; their runtime is the entry's
    ``runtime_data``.
    """

    pairing: PairingManager
    endpoints: DeviceEndpoints


DATA_KEY: HassKey[XiaozhiData] = HassKey(DOMAIN)
