"""Timers set through a device: shown on it, and announced when they finish.

A timer that finishes while the device cannot be told (a WebSocket device
between conversations) still fires its event; the log and a persistent
notification say so.
"""

from collections.abc import Awaitable, Callable

from homeassistant.components import persistent_notification
from homeassistant.components.intent import TimerEventType, TimerInfo
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..entry_data import XiaozhiEntryData
from ..protocol import DeviceEvent, DeviceEventType
from ..speaker.channel import VoiceChannel
from ..texts import async_device_text

type Announce = Callable[..., Awaitable[None]]


class DeviceTimers:
    """Follows the timers of one device (core's timer handler)."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        device: XiaozhiEntryData,
        *,
        channel: Callable[[], VoiceChannel | None],
        fire: Callable[[DeviceEvent], None],
        announce: Announce,
    ) -> None:
        """Show timers on the device of ``entry`` through its live ``channel``.

        ``fire`` fires its events; ``announce`` says that a timer finished.
        """
        self._hass = hass
        self._entry = entry
        self._device = device
        self._channel = channel
        self._fire = fire
        self._announce = announce

    @callback
    def handle(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        """Show timers on the device; say and fire when one finishes."""
        self._entry.async_create_background_task(
            self._hass,
            self._async_timer(event_type, timer),
            f"xiaozhi timer of {self._device.mac}",
        )

    async def _async_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        hass, title = self._hass, self._entry.title
        name = timer.name or ""
        channel = self._channel()
        reachable = channel is not None and (channel.open or channel.idle_reachable)
        if event_type is TimerEventType.FINISHED:
            duration = (
                (timer.start_hours or 0) * 3600
                + (timer.start_minutes or 0) * 60
                + (timer.start_seconds or 0)
            )
            self._fire(
                DeviceEvent(
                    type=DeviceEventType.TIMER_FINISHED,
                    data={"name": name, "seconds": duration},
                )
            )
            said = await async_device_text(
                hass, _keyed("timer_finished", name), {"name": name}
            )
            if reachable:
                try:
                    await self._announce(message=said)
                except HomeAssistantError as err:
                    LOGGER.info("%s: timer not announced: %s", title, err)
                    reachable = False
            if not reachable:
                await self._async_missed(said)
            return
        if channel is None or not reachable:
            return
        minutes, seconds = divmod(timer.seconds_left, 60)
        key = (
            "timer_cancelled" if event_type is TimerEventType.CANCELLED else "timer_set"
        )
        text = await async_device_text(
            hass, _keyed(key, name), {"name": name, "time": f"{minutes}:{seconds:02d}"}
        )
        try:
            await channel.async_show_alert(
                await async_device_text(hass, "timer_title"), text, "neutral"
            )
        except HomeAssistantError as err:
            LOGGER.debug("%s: timer not shown: %s", title, err)

    async def _async_missed(self, said: str) -> None:
        """Tell the user a timer rang on a device that could not say so."""
        hass, title = self._hass, self._entry.title
        LOGGER.info("%s: %s, but the device could not be told", title, said)
        persistent_notification.async_create(
            hass,
            await async_device_text(
                hass, "timer_missed", {"timer": said, "device": title}
            ),
            title=title,
            notification_id=f"{DOMAIN}_timer_{self._device.mac}",
        )


def _keyed(key: str, name: str) -> str:
    """Return the text of a named timer, or of one without a name."""
    return key if name else f"{key}_unnamed"
