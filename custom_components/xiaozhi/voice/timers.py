"""Timers set through a device: shown on it, and announced when they finish.

A timer that finishes while the device cannot be told (a WebSocket device
between conversations) still fires its event; the log and a persistent
notification say so.
"""

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from homeassistant.components import persistent_notification
from homeassistant.components.intent import TimerEventType, TimerInfo
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError

from ..const import DOMAIN, LOGGER
from ..errors import DeviceUnavailableError
from ..speaker.channel import VoiceChannel
from ..texts import async_device_text

type Announce = Callable[..., Awaitable[None]]


class TimerTarget(Protocol):
    """The device's runtime, as far as its timers need it."""

    hass: HomeAssistant

    @property
    def name(self) -> str:
        """Return the device's name."""

    @property
    def mac(self) -> str:
        """Return the device's MAC address."""

    @property
    def voice(self) -> VoiceChannel:
        """Return the voice of the live session (DeviceUnavailableError without)."""

    def run_in_background(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` for as long as the device's entry is loaded."""

    def async_signal_timer_finished(self, name: str, seconds: int) -> None:
        """Fire the event of a finished timer."""


class DeviceTimers:
    """Follows the timers of one device (core's timer handler)."""

    def __init__(self, target: TimerTarget, announce: Announce) -> None:
        """Show timers on ``target``; ``announce`` says that one finished."""
        self._target = target
        self._announce = announce

    @callback
    def handle(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        """Show timers on the device; say and fire when one finishes."""
        self._target.run_in_background(
            self._async_timer(event_type, timer), "xiaozhi timer"
        )

    async def _async_timer(self, event_type: TimerEventType, timer: TimerInfo) -> None:
        target = self._target
        hass = target.hass
        name = timer.name or ""
        try:
            channel: VoiceChannel | None = target.voice
        except DeviceUnavailableError:
            channel = None
        reachable = channel is not None and (channel.open or channel.idle_reachable)
        if event_type is TimerEventType.FINISHED:
            duration = (
                (timer.start_hours or 0) * 3600
                + (timer.start_minutes or 0) * 60
                + (timer.start_seconds or 0)
            )
            target.async_signal_timer_finished(name, duration)
            said = await async_device_text(
                hass, _keyed("timer_finished", name), {"name": name}
            )
            if reachable:
                try:
                    await self._announce(message=said)
                except HomeAssistantError as err:
                    LOGGER.info("%s: timer not announced: %s", target.name, err)
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
            LOGGER.debug("%s: timer not shown: %s", target.name, err)

    async def _async_missed(self, said: str) -> None:
        """Tell the user a timer rang on a device that could not say so."""
        target = self._target
        LOGGER.info("%s: %s, but the device could not be told", target.name, said)
        persistent_notification.async_create(
            target.hass,
            await async_device_text(
                target.hass, "timer_missed", {"timer": said, "device": target.name}
            ),
            title=target.name,
            notification_id=f"{DOMAIN}_timer_{target.mac}",
        )


def _keyed(key: str, name: str) -> str:
    """Return the text of a named timer, or of one without a name."""
    return key if name else f"{key}_unnamed"
