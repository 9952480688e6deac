"""One answer per wake word: boxes of one area that wake together pick one.

Boxes in the same Home Assistant area are a group. The first box of a group
to start a conversation opens a round; every box of the group that starts
within :data:`ARBITRATION_WINDOW` of it takes part, and one answers:

- a box that started without a wake word (its button, or a board whose wake
  word engine keeps no pre-roll) started on purpose: the first such box wins
  at once;
- otherwise the box whose pre-roll holds the wake phrase most clearly (the
  nearest one) wins, as soon as the room has spoken: when every box of the
  area that could take part has started and its pre-roll is rated. A box
  that cannot take part (in a conversation, announcing, playing media,
  not connected) is not waited for; one that stays silent keeps the round
  open until the window ends, never longer;
- a box that sent a wake word without a pre-roll comes last.

Each pre-roll is rated in the executor as soon as it is whole, while the
others are still coming. The others stand down; a box of the group that
starts after the decision, within the window, stands down too. Boxes in
other areas, or in none, never take part. When a round had more than one
box, each is told the outcome (events).
"""

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from homeassistant.core import CALLBACK_TYPE, HomeAssistant, callback
from homeassistant.helpers import device_registry as dr

from ..const import LOGGER

# Two boxes in one room detect one wake word a few tens of milliseconds
# apart, and Wi-Fi adds up to a hundred or two more. A third of a second
# covers both; the winner's audio is held meanwhile, so nothing it hears is
# lost, and a streaming speech-to-text catches up at once.
ARBITRATION_WINDOW: Final = 0.3


@dataclass(slots=True, eq=False, kw_only=True)
class WakeClaim:
    """One box's start of a conversation, waiting for its group's decision."""

    device_id: str
    name: str
    # Started without a wake word (button, or a board without a pre-roll).
    deliberate: bool
    # The box's pre-roll as it is now (taken on the event loop).
    preroll: Callable[[], list[bytes]]
    # Fires the box's outcome event (won, stood down) once decided.
    report: Callable[[bool, dict[str, object]], None]
    # Set once the pre-roll is whole (the box's gate says so).
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    clarity: float | None = None
    rated: bool = False
    at: float = 0.0
    decision: asyncio.Future[bool] = field(init=False)


type Measure = Callable[[list[bytes]], float | None]


class _Round:
    """The boxes of one group that started within one window."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.claims: list[WakeClaim] = []
        self.winner: WakeClaim | None = None
        self.closer: asyncio.TimerHandle | None = None
        self.tasks: list[asyncio.Task[None]] = []  # rating, deciding

    @property
    def open(self) -> bool:
        return self.winner is None


class WakeArbiter:
    """Decides, per area, which box answers a wake word that several heard."""

    def __init__(
        self,
        hass: HomeAssistant,
        measure: Measure,
        window: float = ARBITRATION_WINDOW,
    ) -> None:
        """Decide for ``hass``; ``measure`` rates a pre-roll (run in the executor)."""
        self._hass = hass
        self._loop = hass.loop
        self._measure = measure
        self.window = window
        self._rounds: dict[str, _Round] = {}
        # Every box that could hear a wake word: whether it could take part now.
        self._members: dict[str, Callable[[], bool]] = {}

    @callback
    def join(self, device_id: str, can_claim: Callable[[], bool]) -> CALLBACK_TYPE:
        """Count a box in its area's rounds; ``can_claim``: it could start now."""
        self._members[device_id] = can_claim

        @callback
        def leave() -> None:
            if self._members.get(device_id) is can_claim:
                del self._members[device_id]

        return leave

    def claim(self, group: str, claim: WakeClaim) -> asyncio.Future[bool]:
        """Enter a box's start in its group's round; resolve True if it answers."""
        now = self._loop.time()
        claim.at = now
        claim.decision = self._loop.create_future()
        round_ = self._rounds.get(group)
        if round_ is None:
            round_ = self._rounds[group] = _Round(group)
            round_.closer = self._loop.call_at(now + self.window, self._close, round_)
        round_.claims.append(claim)
        if not round_.open:
            self._lose_late(round_, claim)
        elif claim.deliberate:
            self._decide(round_, claim)
        else:
            self._spawn(round_, self._async_rate(round_, claim), f"{claim.name} rated")
        return claim.decision

    def withdraw(self, claim: WakeClaim) -> None:
        """Take back a claim whose box went away before the decision."""
        if claim.decision.done() and not claim.decision.cancelled():
            return  # decided: it took part
        # (A box whose wait was cancelled cancelled its decision with it.)
        for round_ in self._rounds.values():
            if claim in round_.claims:
                round_.claims.remove(claim)
                self._settle(round_)
        claim.decision.cancel()

    async def _async_rate(self, round_: _Round, claim: WakeClaim) -> None:
        """Rate a box's pre-roll once it is whole; decide if the room has spoken."""
        await claim.ready.wait()
        await self._async_measure(claim, claim.preroll())
        self._settle(round_)

    async def _async_measure(self, claim: WakeClaim, preroll: list[bytes]) -> None:
        """Rate ``preroll``, the claim's pre-roll, in the executor."""
        claim.clarity = await self._hass.async_add_executor_job(self._measure, preroll)
        claim.rated = True

    def _settle(self, round_: _Round) -> None:
        """Decide when every box that could take part did, and is rated."""
        waiting = [claim for claim in round_.claims if not claim.decision.done()]
        if (
            round_.open
            and waiting
            and all(claim.rated for claim in waiting)
            and not self._anyone_silent(round_)
        ):
            self._decide(round_, min(waiting, key=_rank))

    def _anyone_silent(self, round_: _Round) -> bool:
        """Return True if a box of the round's area could start, and did not."""
        claimed = {claim.device_id for claim in round_.claims}
        registry = dr.async_get(self._hass)
        return any(
            device_id not in claimed
            and (device := registry.async_get(device_id)) is not None
            and device.area_id == round_.group
            and can_claim()
            for device_id, can_claim in self._members.items()
        )

    def _close(self, round_: _Round) -> None:
        """End the round's window: decide now, unless decided already."""
        round_.closer = None
        if round_.open:
            self._spawn(round_, self._async_decide(round_), "decided")
        else:
            self._forget(round_)

    async def _async_decide(self, round_: _Round) -> None:
        """Rate what is not rated yet, then let the clearest wake phrase answer."""
        unrated = [
            claim
            for claim in round_.claims
            if not claim.decision.done() and not claim.rated
        ]
        if unrated and len(round_.claims) > 1:
            # Every pre-roll as it is now, rated side by side.
            await asyncio.gather(
                *(self._async_measure(claim, claim.preroll()) for claim in unrated)
            )
        live = [claim for claim in round_.claims if not claim.decision.done()]
        if live and round_.open:
            self._decide(round_, min(live, key=_rank))
        self._forget(round_)

    def _spawn(
        self, round_: _Round, coro: Coroutine[Any, Any, None], what: str
    ) -> None:
        round_.tasks.append(
            self._hass.async_create_background_task(
                coro, f"xiaozhi wake word round in {round_.group} {what}"
            )
        )

    def _decide(self, round_: _Round, winner: WakeClaim) -> None:
        """Resolve every box of the round; tell them when they were several."""
        round_.winner = winner
        for task in round_.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        round_.tasks = []
        for claim in round_.claims:
            self._resolve(claim, won=claim is winner)
        losers = [claim for claim in round_.claims if claim is not winner]
        if not losers:
            return
        LOGGER.debug(
            "Wake word in area %s: %s answers; %s stood down",
            round_.group,
            winner.name,
            ", ".join(claim.name for claim in losers),
        )
        winner.report(
            True,
            {
                "area_id": round_.group,
                "clarity": _rounded(winner.clarity),
                "stood_down": [claim.device_id for claim in losers],
            },
        )
        for claim in losers:
            self._report_loss(round_, claim, winner)

    def _lose_late(self, round_: _Round, claim: WakeClaim) -> None:
        """Stand down a box that starts after the decision, within the window."""
        self._resolve(claim, won=False)
        if (winner := round_.winner) is not None:
            LOGGER.debug(
                "Wake word in area %s: %s came late; %s answers",
                round_.group,
                claim.name,
                winner.name,
            )
            self._report_loss(round_, claim, winner)

    @staticmethod
    def _report_loss(round_: _Round, claim: WakeClaim, winner: WakeClaim) -> None:
        claim.report(
            False,
            {
                "area_id": round_.group,
                "clarity": _rounded(claim.clarity),
                "winner": winner.device_id,
                "winner_name": winner.name,
            },
        )

    def _forget(self, round_: _Round) -> None:
        if self._rounds.get(round_.group) is round_:
            del self._rounds[round_.group]

    @staticmethod
    def _resolve(claim: WakeClaim, *, won: bool) -> None:
        if not claim.decision.done():
            claim.decision.set_result(won)

    def shutdown(self) -> None:
        """Stop deciding: every open round ends without a winner."""
        for round_ in self._rounds.values():
            if round_.closer is not None:
                round_.closer.cancel()
            for task in round_.tasks:
                task.cancel()
            for claim in round_.claims:
                if not claim.decision.done():
                    claim.decision.cancel()
        self._rounds.clear()


def _rank(claim: WakeClaim) -> tuple[int, float, float]:
    """Sort key among wake words, best first: clearest, then earliest.

    (A start on purpose never gets here: it is decided as it comes.)
    """
    if claim.clarity is not None:
        return (0, -claim.clarity, claim.at)
    return (1, 0.0, claim.at)


def _rounded(clarity: float | None) -> float | None:
    return None if clarity is None else round(clarity, 1)
