"""The device as a speaker: media by URL or media source, announcements, volume.

What plays is the runtime's :class:`MediaPlayback`; this entity only turns
Home Assistant's media player calls into it. The firmware can neither pause
nor seek a sound, so neither is offered, and it has no mute to read back,
so none is faked.
"""

from functools import partial
from typing import Any, override

from homeassistant.components import media_source
from homeassistant.components.media_player import (
    BrowseMedia,
    MediaPlayerDeviceClass,
    MediaPlayerEntity,
    MediaPlayerEntityFeature,
    MediaPlayerState,
    MediaType,
    async_process_play_media_url,
)
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .entity import XiaozhiEntity
from .media.fetch import (
    async_open_source,
    async_open_spoken,
    async_speak,
    is_spoken_text,
)
from .media.player import NowPlaying, PlaybackState
from .protocol.firmware import VOLUME_TOOL
from .runtime import XiaozhiConfigEntry, XiaozhiRuntime

PARALLEL_UPDATES = 0

BASE_FEATURES = (
    MediaPlayerEntityFeature.PLAY_MEDIA
    | MediaPlayerEntityFeature.BROWSE_MEDIA
    | MediaPlayerEntityFeature.MEDIA_ANNOUNCE
    | MediaPlayerEntityFeature.STOP
)
VOLUME_FEATURES = (
    MediaPlayerEntityFeature.VOLUME_SET | MediaPlayerEntityFeature.VOLUME_STEP
)
STATES = {
    PlaybackState.IDLE: MediaPlayerState.IDLE,
    PlaybackState.BUFFERING: MediaPlayerState.BUFFERING,
    PlaybackState.PLAYING: MediaPlayerState.PLAYING,
}


async def async_setup_entry(
    hass: HomeAssistant,
    entry: XiaozhiConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the device's media player."""
    async_add_entities([XiaozhiMediaPlayer(entry.runtime_data)])


class XiaozhiMediaPlayer(XiaozhiEntity, MediaPlayerEntity):
    """Plays sounds, streams and announcements on the device's speaker."""

    _attr_translation_key = "speaker"
    _attr_device_class = MediaPlayerDeviceClass.SPEAKER
    _attr_volume_step = 0.1

    def __init__(self, runtime: XiaozhiRuntime) -> None:
        """Create the media player of a device."""
        super().__init__(runtime, "media_player")

    @override
    async def async_added_to_hass(self) -> None:
        """Follow the playback as well as the device."""
        await super().async_added_to_hass()
        self.async_on_remove(self.runtime.player.async_subscribe(self._handle_update))

    @property
    @override
    def supported_features(self) -> MediaPlayerEntityFeature:
        """Return what it can do; volume needs the device's volume tool."""
        if VOLUME_TOOL in self.entry_data.tools:
            return BASE_FEATURES | VOLUME_FEATURES
        return BASE_FEATURES

    @property
    @override
    def state(self) -> MediaPlayerState:
        """Return playing while the device is fed, idle otherwise."""
        return STATES[self.runtime.player.state]

    @property
    @override
    def volume_level(self) -> float | None:
        """Return the device's volume (0..1), as its status reports it."""
        volume = self.entry_data.status.volume
        return None if volume is None else volume / 100

    @property
    @override
    def media_content_id(self) -> str | None:
        """Return what plays, as it was asked for (Music Assistant matches it)."""
        now = self.runtime.player.now
        return now.media_id if now is not None else None

    @property
    @override
    def media_content_type(self) -> MediaType | None:
        """Return music while something plays (a stream or a file)."""
        return MediaType.MUSIC if self.runtime.player.now is not None else None

    @property
    @override
    def media_title(self) -> str | None:
        """Return the title of what plays, when it came with one."""
        now = self.runtime.player.now
        return now.title if now is not None else None

    @property
    @override
    def media_duration(self) -> int | None:
        """Return how long what plays lasts, when its source says."""
        now = self.runtime.player.now
        if now is None or now.duration is None:
            return None
        return round(now.duration)

    @property
    @override
    def media_position(self) -> int | None:
        """Return the position at :attr:`media_position_updated_at` (its start)."""
        return 0 if self.runtime.player.state is PlaybackState.PLAYING else None

    @property
    @override
    def media_position_updated_at(self) -> Any:
        """Return when what plays started."""
        now = self.runtime.player.now
        if now is None or self.runtime.player.state is not PlaybackState.PLAYING:
            return None
        return now.started_at

    @override
    async def async_play_media(
        self, media_type: MediaType | str, media_id: str, **kwargs: Any
    ) -> None:
        """Play a URL or media source; an announcement goes through the satellite."""
        hass, player = self.hass, self.runtime.player
        title = _title(kwargs)
        spoken = None
        if is_spoken_text(media_id):
            # tts.speak: made here without conversion, shown with its text.
            spoken = await async_speak(hass, media_id)
            title = title or spoken.message[:128]
        if kwargs.get("announce"):
            announced = spoken.media_id if spoken is not None else media_id
            await player.async_show_announcement(
                self.runtime.conversation.async_announce_media(announced),
                NowPlaying(
                    media_id,
                    title,
                    "announcement",
                    spoken.duration if spoken is not None else None,
                ),
            )
            return
        if spoken is not None:
            await player.async_play(
                self.runtime.channel,
                partial(async_open_spoken, spoken),
                media_id,
                title,
                spoken.duration,
            )
            return
        url = media_id
        if media_source.is_media_source_id(media_id):
            played = await media_source.async_resolve_media(
                hass, media_id, self.entity_id
            )
            url = played.url
        url = async_process_play_media_url(hass, url)
        await player.async_play(
            self.runtime.channel, lambda: async_open_source(hass, url), media_id, title
        )

    @override
    async def async_media_stop(self) -> None:
        """Stop what plays: silent within a second."""
        await self.runtime.player.async_stop()

    @override
    async def async_set_volume_level(self, volume: float) -> None:
        """Set the device's volume through its own tool."""
        await self.runtime.commands.async_set_volume(round(volume * 100))

    @override
    async def async_browse_media(
        self,
        media_content_type: MediaType | str | None = None,
        media_content_id: str | None = None,
    ) -> BrowseMedia:
        """Browse media sources: audio only."""
        return await media_source.async_browse_media(
            self.hass,
            media_content_id,
            content_filter=lambda item: item.media_content_type.startswith("audio/"),
        )

    @callback
    @override
    def _handle_update(self) -> None:
        self.async_write_ha_state()


def _title(kwargs: dict[str, Any]) -> str | None:
    """Return the title Music Assistant and others send along, if any."""
    extra = kwargs.get("extra")
    metadata = extra.get("metadata") if isinstance(extra, dict) else None
    title = metadata.get("title") if isinstance(metadata, dict) else None
    return str(title)[:128] if isinstance(title, str) and title else None
