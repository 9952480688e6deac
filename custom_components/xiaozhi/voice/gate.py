"""Whether a box that starts listening answers: its area's say, its wake word's.

The satellite passes the device's wake word, microphone and ``listen start``
here. A box that starts a conversation takes part in its area's arbitration
(``arbiter.py``) when other XiaoZhi boxes share the area; with the device's
false-wake check on, its pre-roll is checked first (``wake_check.py``). The
microphone is held meanwhile (:class:`EarlyAudio`), and the turn gets every
packet once the box may answer. A box that may not is sent back to idle.
A box with nothing to decide starts at once.
"""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final

from homeassistant.components.assist_pipeline import PipelineNotFound
from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr

from ..const import DOMAIN, LOGGER
from ..entry_data import XiaozhiEntryData
from ..protocol import DeviceEvent, DeviceEventType
from ..protocol.audio.preroll import EarlyAudio, Heard
from ..protocol.audio.wake import decode_preroll
from ..settings import server_settings_of
from .arbiter import WakeArbiter, WakeClaim
from .typed import chosen_pipeline
from .wake_check import async_check_wake

# The firmware sends listen start right after detect (over MQTT both travel
# on one connection); a detect older than this belonged to no start.
DETECT_TO_START: Final = 2.0


type TurnStarter = Callable[[str | None, list[bytes], bool], None]


def wake_group(hass: HomeAssistant, device_id: str | None) -> str | None:
    """Return the area whose boxes compete with this one for a wake word.

    None when arbitration is off, the device has no area, or no other
    XiaoZhi device is in it: then nobody decides, and it answers at once.
    """
    if not server_settings_of(hass).wake_arbitration:
        return None
    registry = dr.async_get(hass)
    device = registry.async_get(device_id) if device_id else None
    if device is None or device.area_id is None:
        return None
    for other in dr.async_entries_for_area(registry, device.area_id):
        if (
            other.id != device.id
            and other.disabled_by is None
            and any(domain == DOMAIN for domain, _ in other.identifiers)
        ):
            return device.area_id
    return None


class WakeGate:
    """Holds a box's start until it may answer; starts its turn, or stands it down."""

    def __init__(
        self,
        hass: HomeAssistant,
        arbiter: WakeArbiter,
        *,
        name: str,
        device: XiaozhiEntryData,
        checks_false_wakes: Callable[[], bool],
        fire: Callable[[DeviceEvent], None],
        pipeline_entity: Callable[[], str | None],
        start_turn: TurnStarter,
        stand_down: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Decide for the device ``name``; ``fire`` fires its events.

        ``start_turn(wake, live audio, stopped)`` starts the turn (stopped:
        push-to-talk let go meanwhile); ``stand_down`` ends the conversation.
        """
        self._hass = hass
        self._name = name
        self._device = device
        self._checks_false_wakes = checks_false_wakes
        self._fire = fire
        self._arbiter = arbiter
        self._pipeline_entity = pipeline_entity
        self._start_turn = start_turn
        self._stand_down = stand_down
        self._early = EarlyAudio()
        self._wake: str | None = None
        self._wake_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._claim: WakeClaim | None = None
        self._stopped = False
        # The turn started: what the early audio still holds is its own.
        self._begun = False
        # A conversation is on: a listen start continues it, no new wake.
        self.conversing = False

    @property
    def deciding(self) -> bool:
        """Return True while a start waits for its decision.

        (A decision that needed no wait was taken as the task started.)
        """
        return self._task is not None and not self._task.done()

    @property
    def woken(self) -> bool:
        """Return True when a wake word waits for its ``listen start``."""
        return self._wake is not None

    # --- what the device does ---------------------------------------------

    @callback
    def wake_word(self, text: str | None) -> None:
        """Take ``listen detect``: its pre-roll came before it."""
        self._wake = text
        self._wake_at = self._hass.loop.time()
        self._fresh()
        self._early.mark_detect()

    @callback
    def join(self, can_claim: Callable[[], bool]) -> CALLBACK_TYPE:
        """Take part in the area's rounds; ``can_claim``: the box could start now."""
        return self._arbiter.join(self._device.device_id or self._name, can_claim)

    @callback
    def audio(self, payload: bytes, heard: Heard | None) -> None:
        """Hold a microphone packet that came before the turn started."""
        self._fresh()
        self._early.add(payload, heard)
        self._preroll_check()

    @callback
    def _preroll_check(self) -> None:
        """Tell the round once the pre-roll is whole, to rate it."""
        claim = self._claim
        if claim is not None and self._early.preroll_whole:
            claim.ready.set()

    @callback
    def turn_audio(self, payload: bytes, heard: Heard | None) -> list[bytes]:
        """Return what of a packet that came during a turn is the turn's.

        A pre-roll that came after ``listen start`` (UDP) is not.
        """
        if not self._begun:
            return [payload]
        return self._early.after_start(payload, heard)

    @callback
    def listening_stopped(self) -> None:
        """Take ``listen stop`` (push-to-talk let go)."""
        self._stopped = True

    @callback
    def listening_started(self, *, asked: bool) -> None:
        """Take ``listen start``; ``asked``: Home Assistant asked a question."""
        if self.deciding:
            return  # deciding already
        now = self._hass.loop.time()
        wake, self._wake = self._wake, None
        self._fresh()
        if wake is not None and now - self._wake_at > DETECT_TO_START:
            # The firmware says listen start right after detect; this one
            # belonged to no start (a text client's greeting).
            wake = None
            self._early.forget_detect()
        self._early.mark_start()
        # A listen start inside a conversation continues it: no new wake.
        starts = not asked and (wake is not None or not self.conversing)
        group = wake_group(self._hass, self._device.device_id) if starts else None
        check = starts and wake is not None and self._checks_false_wakes()
        self._stopped = False
        if group is None and not check:
            self._begin(wake)
            return
        self._task = self._hass.async_create_background_task(
            self._async_decide(wake, group, check=check),
            f"xiaozhi wake word of {self._name}",
        )

    @callback
    def reset(self) -> None:
        """Forget everything: the device's audio is gone, or moved on."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._early.clear()
        self._begun = False
        self._wake = None

    # --- deciding ---------------------------------------------------------

    def _fresh(self) -> None:
        """Start over after a turn: what comes now belongs to the next one."""
        if self._begun:
            self._begun = False
            self._early.clear()

    @callback
    def _begin(self, wake: str | None) -> None:
        held = self._early.split()
        self._begun = True
        self.conversing = True
        self._start_turn(wake, held.live, self._stopped)

    async def _async_decide(
        self, wake: str | None, group: str | None, *, check: bool
    ) -> None:
        claim: WakeClaim | None = None
        try:
            if group is not None:
                claim = self._claim = WakeClaim(
                    device_id=self._device.device_id or self._name,
                    name=self._name,
                    deliberate=wake is None,
                    preroll=lambda: self._early.preroll,
                    report=self._report,
                )
                self._preroll_check()
                if not await self._arbiter.claim(group, claim):
                    LOGGER.debug("%s stands down for another box", self._name)
                    await self._async_stand_down()
                    return
            if check and wake is not None and await self._async_false_wake(wake):
                await self._async_stand_down()
                return
        except asyncio.CancelledError:
            if claim is not None:
                self._arbiter.withdraw(claim)
            raise
        finally:
            if self._claim is claim:
                self._claim = None
        self._task = None
        self._begin(wake)

    async def _async_stand_down(self) -> None:
        """Send the device back to idle without a word.

        Decided: the link closing on the way (WebSocket) does not cancel it.
        """
        self._task = None
        self._early.clear()
        await self._stand_down()

    @callback
    def _report(self, won: bool, data: dict[str, object]) -> None:
        """Fire the outcome of a wake word that several boxes of the area heard."""
        kind = DeviceEventType.WAKE_WON if won else DeviceEventType.WAKE_STOOD_DOWN
        self._fire(DeviceEvent(type=kind, data=dict(data)))

    async def _async_false_wake(self, wake: str) -> bool:
        """Return True, and say so, when the pre-roll does not hold ``wake``."""
        preroll = self._early.preroll
        if not preroll:
            return False  # nothing to check: the board keeps no pre-roll
        try:
            pipeline = chosen_pipeline(self._hass, self._pipeline_entity())
        except PipelineNotFound:
            return False  # the turn says why it cannot answer
        pcm = await self._hass.async_add_executor_job(decode_preroll, preroll)
        name = self._name
        result = await async_check_wake(self._hass, pipeline, pcm, wake, name)
        if result.false_wake:
            LOGGER.info(
                "%s: false wake (heard %r, not %r); not answering",
                name,
                result.heard,
                wake,
            )
            self._fire(
                DeviceEvent(
                    type=DeviceEventType.FALSE_WAKE,
                    data={"heard": result.heard, "wake_word": wake},
                )
            )
        return result.false_wake
