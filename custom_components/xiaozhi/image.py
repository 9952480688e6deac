"""Images: the last photo from the camera and the last screen picture."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from homeassistant.components.image import ImageEntity, ImageEntityDescription
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import PHOTO_TOOL, SNAPSHOT_TOOL
from .device import Photo, XiaozhiConfigEntry, XiaozhiDevice
from .entity import (
    EntityFactory,
    XiaozhiEntity,
    async_follow_device,
    tool_entity_factories,
)

PARALLEL_UPDATES = 0


@dataclass(frozen=True, kw_only=True)
class XiaozhiImageEntityDescription(ImageEntityDescription):
    """A picture the device uploads."""

    tool: str
    photo_fn: Callable[[XiaozhiDevice], Photo | None]


IMAGES = (
    XiaozhiImageEntityDescription(
        key="last_photo",
        translation_key="last_photo",
        tool=PHOTO_TOOL,
        photo_fn=lambda device: device.last_photo,
    ),
    XiaozhiImageEntityDescription(
        key="screen",
        translation_key="screen",
        tool=SNAPSHOT_TOOL,
        photo_fn=lambda device: device.screen,
    ),
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add images for the device's camera and screen."""

    @callback
    def wanted(device: XiaozhiDevice) -> dict[str, EntityFactory]:
        return tool_entity_factories(device, IMAGES, partial(XiaozhiImage, hass))

    async_follow_device(hass, entry, async_add_entities, wanted)


class XiaozhiImage(XiaozhiEntity, ImageEntity):
    """The latest picture of one kind."""

    entity_description: XiaozhiImageEntityDescription

    def __init__(
        self,
        hass: HomeAssistant,
        device: XiaozhiDevice,
        description: XiaozhiImageEntityDescription,
    ) -> None:
        """Create the image entity."""
        XiaozhiEntity.__init__(self, device, description.key, description)
        ImageEntity.__init__(self, hass)

    @property
    def available(self) -> bool:
        """Return True: the last picture stays viewable."""
        return True

    @property
    def image_last_updated(self) -> datetime | None:
        """Return when the picture was taken."""
        photo = self.entity_description.photo_fn(self.device)
        return photo.taken if photo is not None else None

    @property
    def content_type(self) -> str:
        """Return the picture's type."""
        photo = self.entity_description.photo_fn(self.device)
        return photo.content_type if photo is not None else "image/jpeg"

    async def async_image(self) -> bytes | None:
        """Return the picture."""
        photo = self.entity_description.photo_fn(self.device)
        return photo.content if photo is not None else None
