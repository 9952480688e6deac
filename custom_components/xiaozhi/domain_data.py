"""What the integration keeps once per Home Assistant instance.

Paired devices are config entries, and each one's runtime is its entry's
``runtime_data``. What belongs to no single device lives here: the devices
waiting to be paired, the MQTT + UDP endpoint, the views that mint one-time
URLs, the count of wrong credentials per address, the firmware releases, and
which box of an area answers a wake word.
"""

from dataclasses import dataclass

from homeassistant.core import HomeAssistant
from homeassistant.util.hass_dict import HassKey

from .const import DOMAIN
from .firmware.releases import ReleaseCoordinator
from .pairing.manager import PairingManager
from .transport.logins import FailedLogins
from .transport.mqtt import DeviceEndpoints
from .transport.uploads import UploadViews
from .voice.arbiter import WakeArbiter


@dataclass(slots=True)
class XiaozhiDomainData:
    """Instance-wide state of the integration."""

    pairing: PairingManager
    endpoints: DeviceEndpoints
    uploads: UploadViews
    logins: FailedLogins
    releases: ReleaseCoordinator
    arbiter: WakeArbiter


DATA_KEY: HassKey[XiaozhiDomainData] = HassKey(DOMAIN)


def domain_data_of(hass: HomeAssistant) -> XiaozhiDomainData | None:
    """Return the instance-wide data, None before the integration is set up.

    The one lookup: views, endpoints and runtimes get theirs at
    construction; what runs only once it is set up reads it here.
    """
    return hass.data.get(DATA_KEY)


def domain_data(hass: HomeAssistant) -> XiaozhiDomainData:
    """Return the instance-wide data of an integration that is set up."""
    if (data := domain_data_of(hass)) is None:
        raise RuntimeError("the XiaoZhi integration is not set up")
    return data
