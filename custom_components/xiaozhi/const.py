"""Constants for the XiaoZhi integration."""

from typing import Final

DOMAIN: Final = "xiaozhi"
