"""Timers set through a device: shown on it, and announced when they finish."""

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from homeassistant.components.intent import TimerEventType, TimerInfo
from homeassistant.core import HomeAssistant, callback
from homeassistant.exceptions import HomeAssistantError

from ..const import LOGGER
from ..errors import DeviceUnavailableError
from ..texts import async_device_text
from .channel import VoiceChannel

type Announce = Callable[..., Awaitable[None]]


class TimerTarget(Protocol):
    """The device's runtime, as far as its timers need it."""

    hass: HomeAssistant

    @property
    def name(self) -> str:
        """Return the device's name."""

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
            if reachable:
                try:
                    await self._announce(
                        message=await async_device_text(
                            hass, "timer_finished", {"name": name}
                        )
                    )
                except HomeAssistantError as err:
                    LOGGER.debug("%s: timer not announced: %s", target.name, err)
            return
        if channel is None or not reachable:
            return
        minutes, seconds = divmod(timer.seconds_left, 60)
        key = (
            "timer_cancelled" if event_type is TimerEventType.CANCELLED else "timer_set"
        )
        text = await async_device_text(
            hass, key, {"name": name, "time": f"{minutes}:{seconds:02d}"}
        )
        try:
            await channel.async_show_alert(
                await async_device_text(hass, "timer_title"), text, "neutral"
            )
        except HomeAssistantError as err:
            LOGGER.debug("%s: timer not shown: %s", target.name, err)
