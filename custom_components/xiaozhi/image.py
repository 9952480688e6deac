"""Images: the last photo from the camera and the last screen picture."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import override

from homeassistant.components.image import ImageEntity, ImageEntityDescription
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import (
    EntityFactory,
    XiaozhiEntity,
    XiaozhiToolEntityDescription,
    async_follow_device,
    tool_entity_factories,
)
from .entry_data import Picture, XiaozhiEntryData
from .protocol.firmware import PHOTO_TOOL, SNAPSHOT_TOOL
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiImageEntityDescription(
    XiaozhiToolEntityDescription, ImageEntityDescription
):
    """A picture the device uploads."""

    picture_fn: Callable[[XiaozhiEntryData], Picture | None]


IMAGES = (
    XiaozhiImageEntityDescription(
        key="last_photo",
        translation_key="last_photo",
        tool=PHOTO_TOOL,
        picture_fn=lambda data: data.last_photo,
    ),
    XiaozhiImageEntityDescription(
        key="screen",
        translation_key="screen",
        tool=SNAPSHOT_TOOL,
        picture_fn=lambda data: data.screen,
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add images for the device's camera and screen."""

    @callback
    def wanted(runtime: XiaozhiRuntime) -> dict[str, EntityFactory]:
        return tool_entity_factories(runtime, IMAGES, partial(XiaozhiImage, hass))

    async_follow_device(entry, async_add_entities, wanted)


class XiaozhiImage(XiaozhiEntity, ImageEntity):
    """The latest picture of one kind."""

    entity_description: XiaozhiImageEntityDescription

    def __init__(
        self,
        hass: HomeAssistant,
        runtime: XiaozhiRuntime,
        description: XiaozhiImageEntityDescription,
    ) -> None:
        """Create the image entity."""
        XiaozhiEntity.__init__(self, runtime, description.key, description)
        ImageEntity.__init__(self, hass)

    @property
    def _picture(self) -> Picture | None:
        return self.entity_description.picture_fn(self.entry_data)

    @property
    @override
    def available(self) -> bool:
        """Return True: the last picture stays viewable."""
        return True

    @property
    @override
    def entity_picture(self) -> str | None:
        """Return the picture's URL, or None until there is a picture."""
        return super().entity_picture if self._picture is not None else None

    @property
    @override
    def image_last_updated(self) -> datetime | None:
        """Return when the picture was taken."""
        picture = self._picture
        return picture.taken if picture is not None else None

    @property
    @override
    def content_type(self) -> str:
        """Return the picture's type."""
        picture = self._picture
        return picture.content_type if picture is not None else "image/jpeg"

    @override
    async def async_image(self) -> bytes | None:
        """Return the picture."""
        picture = self._picture
        return picture.content if picture is not None else None
